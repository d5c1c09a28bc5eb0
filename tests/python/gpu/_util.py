"""Helpers shared by the GPU tests of the shipped kernels.

The measure of error is the relative Frobenius norm ||out - ref|| / ||ref||, computed in
float64 against a reference computed in float64 from the same (already rounded) inputs,
so the only error measured is the kernel's. The tolerances are a few units of the output
dtype's rounding (fp16 2^-11 ≈ 4.9e-4, bf16 2^-8 ≈ 3.9e-3, fp32 2^-24 ≈ 6e-8 times the
growth of a long float32 reduction).
"""
import zlib

import pytest
import torch

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def seed_of(*parts) -> int:
    """A per-test seed, stable across runs and different for every parameter combination."""
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def randn(shape, dtype, seed, scale=1.0, offset=0.0, device="cuda") -> torch.Tensor:
    """Normal values drawn in float32 with a private generator, then rounded to dtype."""
    gen = torch.Generator(device=device).manual_seed(seed)
    values = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return (values * scale + offset).to(dtype)


def norm_weight(n, dtype, seed) -> torch.Tensor:
    """A weight near one (1 ± 0.1·N(0,1)) so that no output element is scaled to nothing."""
    return randn((n,), dtype, seed, scale=0.1, offset=1.0)


def poison(shape, dtype, device="cuda") -> torch.Tensor:
    """An output buffer full of NaN: an element the kernel forgets to write stays NaN."""
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64; inf when out holds a NaN or inf."""
    out64 = out.detach().to(torch.float64)
    ref64 = ref.detach().to(torch.float64)
    if out64.shape != ref64.shape:
        raise AssertionError(f"shape {tuple(out64.shape)} != reference {tuple(ref64.shape)}")
    if not torch.isfinite(out64).all():
        return float("inf")
    denom = ref64.norm().item()
    diff = (out64 - ref64).norm().item()
    return diff / denom if denom > 0 else diff


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = ""):
    """No NaN anywhere, and relative Frobenius error within dtype's tolerance."""
    nan = torch.isnan(out).sum().item()
    assert nan == 0, f"{what}: {nan} of {out.numel()} output elements are NaN (unwritten?)"
    err = rel_err(out, ref)
    tol = TOLERANCE[dtype]
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e} ({dtype_id(dtype)})"


def assert_argument_error(fn, pattern: str):
    """fn() raises ValueError or TypeError whose message matches `pattern` (which should name
    the argument at fault)."""
    with pytest.raises((ValueError, TypeError), match=pattern):
        fn()


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape
