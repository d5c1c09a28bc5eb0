"""Backward kernels of the norms and softmax, column_sum, and every row kernel at any hidden
size, against torch autograd (float64 from the same rounded inputs, so the error measured
is ours), on the GPU: aligned and ragged N, rows long enough to be walked in chunks,
strided and expanded gradients, outputs allocated over NaN-filled memory, NaN rows."""
import importlib

import pytest
import torch
import torch.nn.functional as F

from tegula.kernels import layer_norm, rms_norm, rms_norm_silu, row_max, row_min, row_sum, softmax

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import DTYPES, assert_close, dtype_id, norm_weight, poison, randn, seed_of
except ImportError:
    from _util import DTYPES, assert_close, dtype_id, norm_weight, poison, randn, seed_of

rmsnorm_mod = importlib.import_module("tegula.kernels.rmsnorm")
layernorm_mod = importlib.import_module("tegula.kernels.layernorm")
softmax_mod = importlib.import_module("tegula.kernels.row_softmax")
reduce_mod = importlib.import_module("tegula.kernels.reduce")

pytestmark = pytest.mark.gpu

# (rows, N): ragged and aligned hidden sizes, and rows past the single-pass limits
# (8192 for the backward kernels, 12288 where their registers allow, 16384 for the
# forwards) that are walked in chunks.
SHAPES = [(37, 1), (37, 7), (300, 13), (129, 1000), (64, 4100), (256, 4096), (33, 12288), (3, 65536),
          (2, 100003)]


def _dirty_allocator(nbytes):
    """Fills memory the caching allocator will hand out next with NaN, so that an output the
    kernel allocates and forgets to write shows up (poisoned outputs for out_idx kernels)."""
    junk = torch.full((nbytes // 4 + 1024,), float("nan"), device="cuda")
    del junk


def _grads(fn, dy, *inputs):
    leaves = [t.detach().double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, dy.double())


def _inputs(shape, dtype, *tag):
    n = shape[-1]
    x = randn(shape, dtype, seed_of("x", shape, dtype, *tag), scale=2.0, offset=0.5)
    dy = randn(shape, dtype, seed_of("dy", shape, dtype, *tag))
    w = norm_weight(n, dtype, seed_of("w", shape, dtype, *tag))
    b = randn((n,), dtype, seed_of("b", shape, dtype, *tag))
    return x, dy, w, b


def _check(outs, refs, dtype, what):
    for k, (out, ref) in enumerate(zip(outs, refs)):
        assert out.shape == ref.shape and out.dtype == dtype, f"{what} output {k}"
        assert_close(out, ref, dtype, f"{what} output {k}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("silu", [False, True], ids=["rms", "rms_silu"])
def test_rms_norm_backward(shape, dtype, silu):
    x, dy, w, _ = _inputs(shape, dtype, silu)
    n = shape[-1]

    def fn(x, w):
        y = F.rms_norm(x, (n,), w, 1e-6)
        return F.silu(y) if silu else y
    _dirty_allocator(3 * x.numel() * 4)
    dx, dw = rmsnorm_mod.rms_norm_backward(dy, x, w, 1e-6, silu=silu)
    rdx, rdw = _grads(fn, dy, x, w)
    if n == 1:  # dx = rstd·g·w·eps/(x² + eps): a cancellation to ~0, judged against its terms
        assert not torch.isnan(dx).any()
        scale = (dy.double() * w.double() / x.double().abs()).norm()
        assert (dx.double() - rdx).norm() <= 1e-2 * scale
        _check([dw], [rdw], dtype, "rms_norm_backward N=1")
        return
    _check([dx, dw], [rdx, rdw], dtype, f"rms_norm_backward silu={silu} {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm_backward(shape, dtype):
    x, dy, w, b = _inputs(shape, dtype, "ln")
    n = shape[-1]
    _dirty_allocator(3 * x.numel() * 4)
    dx, dw, db = layernorm_mod.layer_norm_backward(dy, x, w, b, 1e-5)
    refs = _grads(lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5), dy, x, w, b)
    if n == 1:  # a row of one element normalises to 0: dx and dw are exactly 0
        assert torch.equal(dx, torch.zeros_like(dx)) and torch.equal(dw, torch.zeros_like(dw))
        _check([db], refs[2:], dtype, "layer_norm_backward N=1")
        return
    _check([dx, dw, db], refs, dtype, f"layer_norm_backward {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax_backward(shape, dtype):
    x, dy, _, _ = _inputs(shape, dtype, "sm")
    y = torch.softmax(x.float(), -1).to(dtype)
    _dirty_allocator(2 * x.numel() * 4)
    dx = softmax_mod.softmax_backward(dy, y)
    yd = y.double()
    ref = yd * (dy.double() - (dy.double() * yd).sum(-1, keepdim=True))
    if shape[-1] == 1:  # y = 1, so dx = dy - dy = 0 exactly
        assert torch.equal(dx, torch.zeros_like(dx))
        return
    assert_close(dx, ref, dtype, f"softmax_backward {shape}")
    # and against autograd of torch's softmax on the same x
    (rdx,) = _grads(lambda x: torch.softmax(x, -1), dy, x)
    tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-4}[dtype]  # y was rounded
    assert (dx.double() - rdx).norm() <= tol * rdx.norm()


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(5, 1), (37, 7), (4097, 13), (3, 5, 1000), (32768, 64), (8, 4100),
                                   (3, 100003)], ids=str)
def test_column_sum(shape, dtype):
    x = randn(shape, dtype, seed_of("colsum", shape, dtype))
    _dirty_allocator(x.numel() * 4)
    s = reduce_mod.column_sum(x)
    assert s.shape == (shape[-1],) and s.dtype == dtype
    assert_close(s, x.double().reshape(-1, shape[-1]).sum(0), dtype, f"column_sum {shape}")
    again = reduce_mod.column_sum(x)
    assert torch.equal(s, again), "column_sum must be deterministic"


def test_column_sum_of_expanded_and_empty():
    g = randn((64,), torch.float16, 3)
    s = reduce_mod.column_sum(g.expand(300, 64))  # stride 0, as autograd hands out
    assert_close(s, g.double() * 300, torch.float16, "column_sum expanded")
    assert torch.equal(reduce_mod.column_sum(torch.empty(0, 64, device="cuda")),
                       torch.zeros(64, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=dtype_id)
def test_backward_takes_strided_and_expanded_gradients(dtype):
    n = 1000
    wide = randn((64, n + 24), dtype, seed_of("wide", dtype))
    x = wide[:, 3:3 + n]  # neither contiguous nor 16-byte aligned
    dy = randn((n,), dtype, seed_of("dyrow", dtype)).expand(64, n)  # stride 0
    w = norm_weight(n, dtype, seed_of("w", dtype))
    dx, dw = rmsnorm_mod.rms_norm_backward(dy, x, w, 1e-6)
    _check([dx, dw], _grads(lambda x, w: F.rms_norm(x, (n,), w, 1e-6), dy, x, w), dtype, "rms strided")
    b = torch.zeros_like(w)
    outs = layernorm_mod.layer_norm_backward(dy, x, w, b, 1e-5)
    _check(outs, _grads(lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5), dy, x, w, b), dtype, "ln strided")
    y = torch.softmax(x.float(), -1).to(dtype)
    dxs = softmax_mod.softmax_backward(dy, y.t().contiguous().t())
    yd = y.double()
    assert_close(dxs, yd * (dy.double() - (dy.double() * yd).sum(-1, keepdim=True)), dtype, "softmax strided")


def test_backward_leading_dims_and_empty():
    x, dy, w, b = _inputs((2, 3, 5, 520), torch.float16, "nd")
    dx, dw = rmsnorm_mod.rms_norm_backward(dy, x, w, 1e-6)
    assert dx.shape == x.shape and dw.shape == w.shape
    _check([dx, dw], _grads(lambda x, w: F.rms_norm(x, (520,), w, 1e-6), dy, x, w), torch.float16, "rms 4-D")
    e = torch.empty((0, 64), dtype=torch.float16, device="cuda")
    ew = norm_weight(64, torch.float16, 1)
    edx, edw = rmsnorm_mod.rms_norm_backward(e, e, ew, 1e-6)
    assert edx.shape == (0, 64) and torch.equal(edw, torch.zeros_like(ew))
    edx, edw, edb = layernorm_mod.layer_norm_backward(e, e, ew, ew, 1e-5)
    assert edx.shape == (0, 64) and torch.equal(edb, torch.zeros_like(ew))
    assert softmax_mod.softmax_backward(e, e).shape == (0, 64)


def test_backward_nan_rows_as_torch():
    """A NaN in dy makes its row of dx NaN (through the row's dot product) and its column of
    dweight NaN, as in torch; the other rows and columns stay finite."""
    n = 1000
    x, dy, w, b = _inputs((16, n), torch.float32, "nan")
    dy[5, 17] = float("nan")
    dx, dw = rmsnorm_mod.rms_norm_backward(dy, x, w, 1e-6)
    rdx, rdw = _grads(lambda x, w: F.rms_norm(x, (n,), w, 1e-6), dy, x, w)
    assert torch.equal(torch.isnan(dx), torch.isnan(rdx)) and torch.equal(torch.isnan(dw), torch.isnan(rdw))
    dx, dw, db = layernorm_mod.layer_norm_backward(dy, x, w, b, 1e-5)
    refs = _grads(lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5), dy, x, w, b)
    for out, ref in zip((dx, dw, db), refs):
        assert torch.equal(torch.isnan(out), torch.isnan(ref))
    y = torch.softmax(x, -1)
    dxs = softmax_mod.softmax_backward(dy, y)
    assert torch.isnan(dxs[5]).all() and not torch.isnan(dxs[:5]).any()


# ------------------------------------------------------------------ forwards at any N


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES + [(9, 16384), (5, 16392), (8, 32768), (4, 32776)], ids=str)
def test_forwards_at_any_hidden_size(shape, dtype):
    x, _, w, b = _inputs(shape, dtype, "fwd")
    n = shape[-1]
    xd, wd, bd = x.double(), w.double(), b.double()
    rms = F.rms_norm(xd, (n,), wd, 1e-6)
    out = poison(shape, dtype)
    assert_close(rms_norm(x, w, 1e-6, out=out), rms, dtype, f"rms_norm {shape}")
    assert_close(rms_norm_silu(x, w, 1e-6, out=poison(shape, dtype)), F.silu(rms), dtype, f"rms_norm_silu {shape}")
    if n > 1:  # a row of one element has zero variance: every output is the bias
        assert_close(layer_norm(x, w, b, 1e-5, out=poison(shape, dtype)), F.layer_norm(xd, (n,), wd, bd, 1e-5),
                     dtype, f"layer_norm {shape}")
    assert_close(softmax(x, out=poison(shape, dtype)), torch.softmax(xd, -1), dtype, f"softmax {shape}")
    rows = shape[:-1]
    assert_close(row_sum(x, out=poison(rows, dtype)), xd.sum(-1), dtype, f"row_sum {shape}")
    assert torch.equal(row_max(x, out=poison(rows, dtype)), x.amax(-1))
    assert torch.equal(row_min(x, out=poison(rows, dtype)), x.amin(-1))


@pytest.mark.parametrize("n", [13, 4100, 100003])
def test_softmax_inf_and_nan_rows_as_torch(n):
    x = randn((6, n), torch.float32, seed_of("inf", n), scale=3.0)
    x[0, :n - 1] = -float("inf")  # a leading run of -inf (across chunks for long rows)
    x[1] = -float("inf")          # only -inf: NaN in torch
    x[2, n // 2] = float("inf")   # +inf: NaN
    x[3, n - 1] = float("nan")
    y = softmax(x)
    ref = torch.softmax(x.double(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    finite = ~torch.isnan(ref)
    torch.testing.assert_close(y.double()[finite], ref[finite], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", [4096, 65536])
def test_rms_norm_inf_in_a_long_row_as_torch(n):
    """An inf makes its row's sum of squares inf and rstd 0: its own output NaN, the rest
    of its row 0 (65536: walked in chunks). The reference is torch's rms_norm on the CPU in
    float64, the formula x·rsqrt(mean(x²) + eps)·w; torch's CUDA rms_norm of a float64
    tensor is not one here, as its statistics are a Welford mean and variance of x, where
    an inf makes the running mean NaN (inf - inf) and with it the whole row."""
    x = randn((3, n), torch.float32, seed_of("rinf", n))
    x[1, 100] = float("inf")
    w = norm_weight(n, torch.float32, 2)
    y = rms_norm(x, w, 1e-6).cpu()
    ref = F.rms_norm(x.double().cpu(), (n,), w.double().cpu(), 1e-6)
    assert torch.isnan(ref[1]).sum() == 1  # the reference is the formula's
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    assert torch.equal(y[1] == 0, ref[1] == 0)
    assert_close(y[[0, 2]], ref[[0, 2]], torch.float32, f"rms_norm rows without inf N={n}")
