"""`from tilelang.contrib import nvcc`: the compute capability programs check before
choosing a kernel."""
from __future__ import annotations


def get_target_compute_version(target=None) -> str:
    """The compute capability as "major.minor" ("9.0" on an H100): of `target` when given
    ("sm_90a", "cuda -arch=sm_80" or a compute version), else of the current GPU, else of
    the target Tegula compiles for without one (TEGULA_TARGET, or sm_90a)."""
    import re

    from .. import env

    if target is None:
        name, _ = env.resolve_target("auto")
    else:
        name = str(target)
    match = re.search(r"sm_(\d+)(\d)", name) or re.search(r"(\d+)\.(\d)", name)
    if not match:
        raise ValueError(f"get_target_compute_version: cannot read a compute capability from {target!r}")
    return f"{match.group(1)}.{match.group(2)}"


def parse_compute_version(compute_version: str) -> tuple[int, int]:
    """"9.0" -> (9, 0)."""
    major, minor = str(compute_version).split(".")[:2]
    return int(major), int(minor)
