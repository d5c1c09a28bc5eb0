"""The fused residual add + RMSNorm (tegula.kernels.fused_norm) against torch on the GPU:
h equal to torch's x + residual bit for bit, y against F.rms_norm of that h in float64,
outputs poisoned, aligned, ragged and chunked rows, fp16, bf16 and fp32, in place (into
residual, also through a strided view), NaN and inf, empty extents and argument errors."""
import importlib

import pytest
import torch
import torch.nn.functional as F

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_argument_error, assert_close, dtype_id, norm_weight, poison, randn,
                        same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_argument_error, assert_close, dtype_id, norm_weight, poison, randn,
                       same_storage, seed_of)

pytestmark = pytest.mark.gpu

FN = importlib.import_module("tegula.kernels.fused_norm")

EPS = 1e-6
ALIGNED = [(8192, 4096), (8, 4096), (64, 512)]
# Rows not a multiple of a block's; hidden sizes that leave padding; rows walked in chunks.
RAGGED = [(1, 8), (3, 24), (17, 520), (1000, 4104), (33, 1000), (5, 13)]
WIDE = [(4, 32768), (3, 100003)]


def inputs(shape, dtype, *tag):
    x = randn(shape, dtype, seed_of("x", shape, dtype, *tag))
    r = randn(shape, dtype, seed_of("r", shape, dtype, *tag), scale=4.0)
    w = norm_weight(shape[-1], dtype, seed_of("w", shape, dtype, *tag))
    return x, r, w


def reference(x, r, w):
    """(y, h): h as torch's x + r gives it, y = F.rms_norm of that h in float64."""
    h = x + r
    return F.rms_norm(h.double(), (h.shape[-1],), w.double(), EPS), h


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED + WIDE, ids=str)
def test_add_rms_norm_into_poisoned_output(shape, dtype):
    x, r, w = inputs(shape, dtype)
    out = poison(shape, dtype)
    y, h = FN.add_rms_norm(x, r, w, EPS, out=out)
    y_ref, h_ref = reference(x, r, w)
    assert same_storage(y, out)
    assert torch.equal(h, h_ref), "h differs from torch's x + residual"
    assert_close(y, y_ref, dtype, f"add_rms_norm {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(8192, 4096), (17, 520), (3, 100003)], ids=str)
def test_add_rms_norm_in_place(shape, dtype):
    x, r, w = inputs(shape, dtype, "inplace")
    y_ref, h_ref = reference(x, r, w)
    x_before = x.clone()
    y, h = FN.add_rms_norm(x, r, w, EPS, inplace=True)
    assert h is r and torch.equal(r, h_ref)
    assert torch.equal(x, x_before)
    assert_close(y, y_ref, dtype, f"add_rms_norm in place {shape}")


def test_in_place_through_a_strided_view_writes_back():
    dtype = torch.bfloat16
    base = randn((64, 2 * 1024), dtype, seed_of("strided"))
    r = base[:, ::2]                       # not launchable: read and written through a copy
    x = randn((64, 1024), dtype, seed_of("strided-x"))
    w = norm_weight(1024, dtype, seed_of("strided-w"))
    y_ref, h_ref = reference(x, r.clone(), w)
    odd = base[:, 1::2].clone()
    y, h = FN.add_rms_norm(x, r, w, EPS, inplace=True)
    assert h is r and torch.equal(base[:, ::2], h_ref) and torch.equal(base[:, 1::2], odd)
    assert_close(y, y_ref, dtype, "add_rms_norm in place, strided residual")


def test_leading_dims_views_and_new_row_counts():
    dtype = torch.float16
    x, r, w = inputs((2, 3, 5, 1024), dtype, "nd")
    y, h = FN.add_rms_norm(x, r, w, EPS)
    y_ref, h_ref = reference(x, r, w)
    assert y.shape == h.shape == x.shape and torch.equal(h, h_ref)
    assert_close(y, y_ref, dtype, "add_rms_norm 4-D")
    wide = randn((40, 3000), dtype, seed_of("wide"))
    xv, rv = wide[:, :1000], wide[:, 1000:2000]    # strided views: copied first
    y, h = FN.add_rms_norm(xv, rv, w[:1000].contiguous(), EPS)
    y_ref, h_ref = reference(xv, rv, w[:1000])
    assert torch.equal(h, h_ref)
    assert_close(y, y_ref, dtype, "add_rms_norm strided views")
    kernel = FN.kernel_for(1024, dtype, EPS)
    for m in (1, 9, 4097):   # M is dynamic: one kernel for every row count
        x, r, w = inputs((m, 1024), dtype, "rows")
        y, h = FN.add_rms_norm(x, r, w, EPS)
        assert_close(y, reference(x, r, w)[0], dtype, f"add_rms_norm M={m}")
    assert FN.kernel_for(1024, dtype, EPS) is kernel


def test_tilelang_form_returns_y_and_h():
    dtype = torch.bfloat16
    x, r, w = inputs((37, 520), dtype, "jit")
    p = FN.plan(520, dtype)
    kernel = FN.add_rms_norm_kernel(520, "bfloat16", EPS, False, p.blk_m, p.threads, p.n_pad, p.chunks)
    y, h = kernel(x, r, w)
    y_ref, h_ref = reference(x, r, w)
    assert torch.equal(h, h_ref)
    assert_close(y, y_ref, dtype, "add_rms_norm out_idx=[3, 4]")


def test_nan_and_inf_as_torch():
    dtype = torch.float16
    x, r, w = inputs((6, 4096), dtype, "nan")
    x[1, 3] = float("nan")
    x[2, 7] = float("inf")
    x[3, 0], r[3, 0] = 60000.0, 10000.0      # h overflows to inf, as torch's x + r does
    y, h = FN.add_rms_norm(x, r, w, EPS)
    h_ref = x + r
    y_ref = F.rms_norm(h_ref.float(), (4096,), w.float(), EPS)
    assert torch.equal(h.isnan(), h_ref.isnan()) and torch.equal(h.isinf(), h_ref.isinf())
    assert torch.equal(y.isnan(), y_ref.isnan())
    torch.testing.assert_close(y.float(), y_ref, equal_nan=True, rtol=2e-3, atol=2e-3)
    assert not torch.isnan(y[[0, 4, 5]]).any()


def test_large_residual_magnitudes():
    """float32 sums of squares: hidden states near 300 overflow a float16 sum."""
    x, r, w = inputs((8, 4096), torch.float16, "big")
    x, r = x * 150, r * 40
    y, h = FN.add_rms_norm(x, r, w, EPS)
    y_ref, h_ref = reference(x, r, w)
    assert torch.equal(h, h_ref)
    assert_close(y, y_ref, torch.float16, "add_rms_norm |h|~300")


def test_empty_extents():
    for shape in [(0, 64), (4, 0)]:
        x = torch.empty(shape, dtype=torch.float16, device="cuda")
        w = torch.ones(shape[-1], dtype=torch.float16, device="cuda")
        y, h = FN.add_rms_norm(x, x.clone(), w)
        assert y.shape == h.shape == shape


def test_argument_errors():
    x, r, w = inputs((4, 64), torch.float16, "errors")
    assert_argument_error(lambda: FN.add_rms_norm(x, r.cpu(), w), r"add_rms_norm: residual must be a CUDA tensor")
    assert_argument_error(lambda: FN.add_rms_norm(x, r, w.cpu()), r"add_rms_norm: weight must be a CUDA tensor")
    assert_argument_error(lambda: FN.add_rms_norm(x, r, w, out=poison((4, 32), torch.float16)),
                          r"add_rms_norm: out must have shape")
    assert_argument_error(lambda: FN.add_rms_norm(x, r[:, :32], w), r"add_rms_norm: residual must have the shape")
