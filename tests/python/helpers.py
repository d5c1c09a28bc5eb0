"""Checks shared by the Python tests (importable as `helpers`, see conftest.py)."""
import atexit
import os
import shutil
import tempfile

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


def gemm_reference(a: torch.Tensor, b: torch.Tensor, bias=None, activation: str = "none",
                   dtype=torch.float64) -> torch.Tensor:
    """a @ b [+ bias], then "relu" or "gelu" (the tanh form), computed in `dtype` (float64 by
    default) from the rounded inputs: what a GEMM with that epilogue must give."""
    c = a.to(dtype) @ b.to(dtype)
    if bias is not None:
        c = c + bias.to(dtype)
    if activation == "relu":
        c = torch.relu(c)
    if activation == "gelu":
        c = torch.nn.functional.gelu(c, approximate="tanh")
    return c


def gemm_inputs(M, N, K, dtype, seed, b_layout="NK", device="cuda"):
    """(a, b, bias) of a GEMM test, drawn in that order from one generator seeded `seed`:
    a (M, K), b (N, K) (a weight, b_layout "NK") or (K, N) ("KN"), bias (N,); standard
    normal values rounded to dtype."""
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(M, K, generator=g, device=device).to(dtype)
    b = torch.randn(*((N, K) if b_layout == "NK" else (K, N)), generator=g, device=device).to(dtype)
    bias = torch.randn(N, generator=g, device=device).to(dtype)
    return a, b, bias


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


_SOURCES = []


def source_file(tag: str, src: str) -> str:
    """`src` written to a file of its own, _<tag>.py in a directory this test process made
    and removes at exit (so that errors name its lines), and that file's path."""
    if not _SOURCES:
        _SOURCES.append(tempfile.mkdtemp(prefix="tegula-test-sources-"))
        atexit.register(shutil.rmtree, _SOURCES[0], True)
    path = os.path.join(_SOURCES[0], f"_{tag}.py")
    with open(path, "w") as fh:
        fh.write(src)
    return path


def compile_error_of_source(src: str, tag: str):
    """The TegulaCompileError that running `src` (a program ending in tegula.compile) raises,
    from a file of its own (source_file) so that the error can name its lines."""
    import tegula

    path = source_file(tag, src)
    with pytest.raises(tegula.TegulaCompileError) as info:
        exec(compile(src, path, "exec"), {})  # noqa: S102
    return info.value


# NVLink multicast stays off in every process a test starts (NCCL, torch's symmetric
# memory, NVSHMEM): a program that uses it can take a shared host's GPUs out of service.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def torchrun(script, *args, ranks=2, gpus=False, timeout=600, env=None):
    """`script args` under torchrun with `ranks` processes (on the CPU, its GPUs hidden,
    unless gpus; `env` added to their environment); the last JSON line rank 0 printed,
    parsed."""
    import json
    import subprocess
    import sys

    import torch.distributed as dist

    if not dist.is_available() or (not gpus and not dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    env = dict(os.environ, **(env or {}), **MULTICAST_OFF, OMP_NUM_THREADS="1")
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", str(script),
           *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"torchrun failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1])
