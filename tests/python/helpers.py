"""Checks shared by the Python tests (importable as `helpers`, see conftest.py)."""
import os

import pytest
import torch


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (Frobenius), computed in float64; NaN when out has a NaN.
    With ref all zeros it is ||out|| itself, so a zero reference still compares."""
    out64 = out.detach().to(torch.float64).cpu()
    ref64 = torch.as_tensor(ref).detach().to(torch.float64).cpu()
    if out64.shape != ref64.shape:
        raise AssertionError(f"shape {tuple(out64.shape)} differs from the reference's {tuple(ref64.shape)}")
    diff = (out64 - ref64).norm().item()
    denom = ref64.norm().item()
    return diff / denom if denom > 0 else diff


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """A tensor like `t` full of NaN: an element a kernel never writes stays NaN."""
    return torch.full_like(t, float("nan"))


def assert_close_rel(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "output"):
    """Fails on any NaN in `out` (an unwritten element of a poisoned output, or a NaN the
    kernel made) and when rel_err(out, ref) exceeds `tol`."""
    nan = int(torch.isnan(out).sum()) if out.is_floating_point() else 0
    assert nan == 0, f"{what}: {nan} of {out.numel()} elements are NaN (never written?)"
    err = rel_err(out, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} exceeds {tol:.1e}"


def compile_error_of_source(src: str, tag: str):
    """The TegulaCompileError that running `src` (a program ending in tegula.compile) raises,
    the source written to build/_<tag>.py first so that the error can name its lines."""
    import tegula

    path = os.path.join(os.path.dirname(__file__), "..", "..", "build", f"_{tag}.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(src)
    with pytest.raises(tegula.TegulaCompileError) as info:
        exec(compile(src, path, "exec"), {})  # noqa: S102
    return info.value
