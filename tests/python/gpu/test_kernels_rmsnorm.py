"""RMSNorm and fused RMSNorm + SiLU (tegula.kernels.rmsnorm) against torch, on the GPU."""
import pytest
import torch
import torch.nn.functional as F

from tegula.kernels import rms_norm, rms_norm_silu
from tegula.kernels import rmsnorm as rmsnorm_module

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_close, dtype_id, assert_argument_error, norm_weight,
                        poison, randn, same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_close, dtype_id, assert_argument_error, norm_weight,
                       poison, randn, same_storage, seed_of)

pytestmark = pytest.mark.gpu

EPS = 1e-6
ALIGNED = [(4096, 1024), (256, 4096), (64, 512)]
# M not a multiple of the rows a block takes; hidden sizes that leave padding columns.
RAGGED = [(1, 8), (3, 24), (17, 520), (1000, 4104), (33, 1000)]
SHAPES = ALIGNED + RAGGED


def _ref(x, w, silu=False):
    y = F.rms_norm(x.double(), (x.shape[-1],), w.double(), EPS)
    return F.silu(y) if silu else y


def _inputs(shape, dtype, *tag):
    x = randn(shape, dtype, seed_of("x", shape, dtype, *tag))
    w = norm_weight(shape[-1], dtype, seed_of("w", shape, dtype, *tag))
    return x, w


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm_into_poisoned_output(shape, dtype):
    x, w = _inputs(shape, dtype)
    out = poison(shape, dtype)
    y = rms_norm(x, w, EPS, out=out)
    assert same_storage(y, out)
    assert_close(y, _ref(x, w), dtype, f"rms_norm {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(256, 4096), (17, 520), (1, 8)], ids=str)
def test_rms_norm_allocates_output(shape, dtype):
    x, w = _inputs(shape, dtype, "alloc")
    y = rms_norm(x, w, EPS)
    assert y.shape == x.shape and y.dtype == dtype and y.is_cuda
    assert_close(y, _ref(x, w), dtype, f"rms_norm {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm_silu(shape, dtype):
    x, w = _inputs(shape, dtype, "silu")
    out = poison(shape, dtype)
    y = rms_norm_silu(x, w, EPS, out=out)
    assert_close(y, _ref(x, w, silu=True), dtype, f"rms_norm_silu {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_rms_norm_leading_dims_flatten(dtype):
    x, w = _inputs((2, 3, 5, 1024), dtype, "nd")
    y = rms_norm(x, w, EPS)
    assert y.shape == x.shape
    assert_close(y, _ref(x, w), dtype, "rms_norm 4-D")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=dtype_id)
def test_jit_kernel_forms(dtype):
    """The TileLang form (out_idx=[-1], returns Y) and the form with a caller's Y."""
    n = 520
    x, w = _inputs((37, n), dtype, "jit")
    returns_y = rmsnorm_module.kernel_for(n, dtype, EPS, allocates_output=True)
    assert_close(returns_y(x, w), _ref(x, w), dtype, "rms_norm out_idx=[-1]")
    writes_y = rmsnorm_module.kernel_for(n, dtype, EPS)
    out = poison((37, n), dtype)
    writes_y(x, w, out)
    assert_close(out, _ref(x, w), dtype, "rms_norm preallocated Y")


def test_new_row_count_reuses_the_kernel():
    """M is dynamic: one compiled kernel serves every batch size."""
    dtype, n = torch.float16, 1024
    kernel = rmsnorm_module.kernel_for(n, dtype, EPS)
    for m in (1, 5, 300, 4097):
        x, w = _inputs((m, n), dtype, "rows", m)
        out = poison((m, n), dtype)
        kernel(x, w, out)
        assert_close(out, _ref(x, w), dtype, f"rms_norm M={m}")
    assert rmsnorm_module.kernel_for(n, dtype, EPS) is kernel


def test_large_and_small_magnitudes():
    """Float32 accumulation: fp16 inputs near 300 would overflow a float16 sum of squares."""
    x = randn((8, 4096), torch.float16, seed_of("big"), scale=300.0)
    w = norm_weight(4096, torch.float16, seed_of("bigw"))
    assert_close(rms_norm(x, w, EPS), _ref(x, w), torch.float16, "rms_norm |x|~300")
    x = randn((8, 4096), torch.float32, seed_of("small"), scale=1e-3)
    w = norm_weight(4096, torch.float32, seed_of("smallw"))
    assert_close(rms_norm(x, w, EPS), _ref(x, w), torch.float32, "rms_norm |x|~1e-3")


def test_empty_rows():
    x = torch.empty((0, 64), dtype=torch.float16, device="cuda")
    w = norm_weight(64, torch.float16, 1)
    assert rms_norm(x, w).shape == (0, 64)


def test_argument_errors():
    x, w = _inputs((4, 64), torch.float16, "errors")
    assert_argument_error(lambda: rms_norm(x.double(), w), r"rms_norm: x must")
    assert_argument_error(lambda: rms_norm(x.cpu(), w), r"rms_norm: x must")
    assert_argument_error(lambda: rms_norm(x.tolist(), w), r"rms_norm: x must")
    assert_argument_error(lambda: rms_norm(x, w.float()), r"rms_norm: weight must")
    assert_argument_error(lambda: rms_norm(x, w.cpu()), r"rms_norm: weight must")
    assert_argument_error(lambda: rms_norm(x, w[:32]), r"rms_norm: weight must have shape")
    assert_argument_error(lambda: rms_norm(x, w, eps=-1.0), r"rms_norm: eps")
    assert_argument_error(lambda: rms_norm(x, w, out=poison((4, 32), torch.float16)),
                          r"rms_norm: out must")
    odd = randn((4, 12), torch.float16, 3)  # any hidden size is taken
    ow = norm_weight(12, torch.float16, 4)
    assert_close(rms_norm(odd, ow, EPS), _ref(odd, ow), torch.float16, "rms_norm N=12")
    assert_argument_error(lambda: rms_norm_silu(x.cpu(), w), r"rms_norm_silu: x must")
