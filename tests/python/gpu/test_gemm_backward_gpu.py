"""matmul_backward against torch's autograd in float32: dA (NT, b read transposed in place),
dB (TN, a read transposed in place) and dbias, for every activation, with and without a
bias, on aligned, ragged, padded and decode shapes; every element written (poisoned
outputs through the explicit launches); NaN where torch gives NaN; gradients of any
strides; unwanted gradients not computed."""
import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu

try:
    from ._util import TOLERANCE, poison, randn, rel_err, seed_of
except ImportError:
    from _util import TOLERANCE, poison, randn, rel_err, seed_of

gemm = importlib.import_module("tegula.kernels.gemm")
gemm_bwd = importlib.import_module("tegula.kernels.gemm_backward")

DTYPES = [torch.float16, torch.bfloat16]
SHAPES = [
    (256, 384, 512),      # aligned, one tile column of dB's inner loop per 64 tokens
    (1024, 512, 768),
    (1000, 777, 513),     # ragged everywhere
    (1031, 1029, 1027),   # ragged and large enough that the operands are padded to 16-byte rows
    (16, 4096, 4096),     # decode: dA split-K, dB an outer product over 16 tokens
    (16, 777, 513),       # decode, ragged
]


def _inputs(M, N, K, dtype, seed, bias=True):
    a = randn((M, K), dtype, seed)
    b = randn((K, N), dtype, seed + 1, scale=max(K, 1) ** -0.5)   # keeps the pre-activation near 1
    dc = randn((M, N), dtype, seed + 2)
    return a, b, (randn((N,), dtype, seed + 3) if bias else None), dc


def _autograd(a, b, bias, activation, dc):
    """torch's gradients in float32 from the same rounded inputs, and the forward output c
    from tegula's matmul (what the autograd wrapper saves for relu)."""
    a32, b32 = a.float().requires_grad_(), b.float().requires_grad_()
    inputs = [a32, b32]
    z = a32 @ b32
    if bias is not None:
        inputs.append(bias.float().requires_grad_())
        z = z + inputs[-1]
    out = {"none": z, "relu": torch.relu(z), "gelu": torch.nn.functional.gelu(z, approximate="tanh")}[activation]
    grads = torch.autograd.grad(out, inputs, dc.float())
    with torch.no_grad():
        c = gemm.matmul(a, b, bias=bias, activation=activation)
    return list(grads) + [None] * (3 - len(grads)), c


def _mismatch(got, ref, dtype, what):
    """None when got matches ref (dtype, shape, no NaN, relative error within dtype's
    tolerance); else what differs."""
    if got is None:
        return f"{what}: missing"
    if got.dtype != dtype or got.shape != ref.shape:
        return f"{what}: {got.dtype} {tuple(got.shape)}"
    if torch.isnan(got).any():
        return f"{what}: NaN in the output"
    err = rel_err(got, ref)
    return None if err < TOLERANCE[dtype] else f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_plain_matmul_gradients(M, N, K, dtype):
    a, b, _, dc = _inputs(M, N, K, dtype, seed_of(M, N, K, dtype), bias=False)
    (ga, gb, _), _ = _autograd(a, b, None, "none", dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, False)
    assert not _mismatch(da, ga, dtype, "da")
    assert not _mismatch(db, gb, dtype, "db")
    assert dbias is None


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp16", "bf16"])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("M,N,K", [(512, 384, 256), (1000, 777, 513), (16, 777, 513)])
def test_epilogue_gradients(M, N, K, with_bias, activation, dtype):
    a, b, bias, dc = _inputs(M, N, K, dtype, seed_of(M, N, K, with_bias, activation, dtype), bias=with_bias)
    (ga, gb, gbias), c = _autograd(a, b, bias, activation, dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, with_bias, activation, c=c, bias=bias)
    assert not _mismatch(da, ga, dtype, "da")
    assert not _mismatch(db, gb, dtype, "db")
    if with_bias:
        assert not _mismatch(dbias, gbias, dtype, "dbias")
    else:
        assert dbias is None


@pytest.mark.parametrize("M,N,K", [(8192, 1024, 1024), (4096, 4096, 4096)])
def test_the_bias_sums_over_many_row_slices(M, N, K):
    """Enough rows that the column sums are cut into slices and combined."""
    assert gemm_bwd.grad_row_splits(M, N, gemm.sm_count(torch.device("cuda"))) > 1
    a, b, bias, dc = _inputs(M, N, K, torch.bfloat16, seed_of(M, N, K), bias=True)
    (ga, gb, gbias), c = _autograd(a, b, bias, "gelu", dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, True, "gelu", c=c, bias=bias)
    assert not _mismatch(dbias, gbias, torch.bfloat16, "dbias")
    assert not _mismatch(da, ga, torch.bfloat16, "da")
    assert not _mismatch(db, gb, torch.bfloat16, "db")
    # The slices are added in a fixed order: the same bits every call.
    assert torch.equal(gemm_bwd.matmul_backward(dc, a, b, True, "gelu", c=c, bias=bias)[2], dbias)


# ---- every element written ----

@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("M,N,K", [(1000, 777, 520), (16, 4096, 4096), (4096, 4096, 16), (64, 776, 4104)])
def test_transposed_layouts_write_every_element(M, N, K, ta, tb):
    dtype = torch.float16
    s = seed_of(M, N, K, ta, tb)
    a, b = randn((M, K), dtype, s), randn((K, N), dtype, s + 1)
    a_st = a.t().contiguous() if ta else a
    b_st = b.t().contiguous() if tb else b
    layout = dict(trans_a=True, lda=M) if ta else {}
    if tb:
        layout["trans_b"] = True
    else:
        layout["ldb"] = N
    kernel = gemm.kernel_for(M, N, K, dtype, "bias", sms=gemm.sm_count(a.device), **layout,
                             **gemm_bwd.backward_config(M, N, K))
    bias = randn((N,), dtype, s + 2)
    c = poison((M, N), dtype)
    kernel.launch(a_st, b_st, bias, c)
    torch.cuda.synchronize()
    assert not _mismatch(c, a.float() @ b.float() + bias.float(), dtype, f"trans_a={ta} trans_b={tb}")


@pytest.mark.parametrize("activation,bias_grad", [("relu", True), ("gelu", True), ("gelu", False), ("none", True)])
@pytest.mark.parametrize("M,N", [(1000, 777), (8192, 1000), (16, 4100)])
def test_activation_grad_writes_every_element(M, N, activation, bias_grad):
    dtype = torch.float16
    s = seed_of(M, N, activation, bias_grad)
    dc, saved = randn((M, N), dtype, s), randn((M, N), dtype, s + 1)
    kernel = gemm_bwd.activation_grad_kernel_for(M, N, dtype, activation, bias_grad, gemm.sm_count(dc.device))
    dz, dbias = poison((M, N), dtype), poison((N,), dtype)
    if activation == "none":
        kernel(dc, dc, dc, dbias)
        ref = dc.float()
    else:
        kernel(dc, saved, dz, dbias)
        ref = (torch.ops.aten.threshold_backward(dc.float(), saved.float(), 0.0) if activation == "relu" else
               torch.ops.aten.gelu_backward(dc.float(), saved.float(), approximate="tanh"))
        assert not _mismatch(dz, ref, dtype, "dz")
    if bias_grad:
        assert not _mismatch(dbias, ref.half().float().sum(0), dtype, "dbias")
    else:
        assert torch.isnan(dbias).all(), "dbias written though not asked for"


# ---- NaN, strides, flags, empty extents ----

def test_nan_propagates_as_in_torch():
    M, N, K = 300, 200, 136
    a, b, bias, dc = _inputs(M, N, K, torch.float16, 5)
    dc[3, 7] = float("nan")
    a[11, 5] = float("nan")
    (ga, gb, gbias), c = _autograd(a, b, bias, "relu", dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, True, "relu", c=c)
    for got, ref, what in ((da, ga, "da"), (db, gb, "db"), (dbias, gbias, "dbias")):
        assert torch.equal(torch.isnan(got), torch.isnan(ref)), f"{what}: NaN pattern differs from torch's"
        finite = ~torch.isnan(ref)
        assert rel_err(got[finite], ref[finite]) < TOLERANCE[torch.float16], what


def test_a_nan_output_of_relu_passes_the_gradient():
    """torch's relu backward gates on output <= 0, so a NaN output lets the gradient through."""
    M, N, K = 128, 64, 64
    a, b, _, dc = _inputs(M, N, K, torch.float16, 9, bias=False)
    c = torch.relu(a.float() @ b.float()).half()
    c[:, 0] = float("nan")
    ref_dz = torch.ops.aten.threshold_backward(dc.float(), c.float(), 0.0)
    da, db, _ = gemm_bwd.matmul_backward(dc, a, b, False, "relu", c=c)
    assert not _mismatch(da, ref_dz @ b.float().t(), torch.float16, "da")
    assert not _mismatch(db, a.float().t() @ ref_dz, torch.float16, "db")


@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("make", ["transposed", "expanded", "sliced"])
def test_gradients_of_any_strides(make, with_bias):
    """Without a bias, a transposed dC goes straight to the GEMMs (read in place); with one,
    the bias-gradient kernel reads it first. a and b as transposed views make dA's B and
    dB's A plain row-major operands."""
    M, N, K = 520, 264, 200
    a, b, bias, dc = _inputs(M, N, K, torch.bfloat16, 13, bias=with_bias)
    if make == "transposed":
        dc = dc.t().contiguous().t()
    elif make == "expanded":
        dc = torch.ones((), dtype=dc.dtype, device="cuda").expand(M, N)   # the gradient of c.sum()
    else:
        dc = torch.cat([dc, dc], 1)[:, 1:N + 1]
    a_view, b_view = a.t().contiguous().t(), b.t().contiguous().t()   # saved operands that were transposed views
    (ga, gb, gbias), c = _autograd(a, b, bias, "none", dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a_view, b_view, with_bias, "none")
    assert not _mismatch(da, ga, torch.bfloat16, "da")
    assert not _mismatch(db, gb, torch.bfloat16, "db")
    if with_bias:
        assert not _mismatch(dbias, gbias, torch.bfloat16, "dbias")
    else:
        assert dbias is None


def test_only_the_wanted_gradients():
    M, N, K = 256, 128, 192
    a, b, bias, dc = _inputs(M, N, K, torch.float16, 17)
    (ga, gb, gbias), c = _autograd(a, b, bias, "gelu", dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, True, "gelu", c=c, bias=bias, needs=(True, False, False))
    assert db is None and dbias is None
    assert not _mismatch(da, ga, torch.float16, "da")
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, True, "gelu", c=c, bias=bias, needs=(False, False, True))
    assert da is None and db is None
    assert not _mismatch(dbias, gbias, torch.float16, "dbias")
    assert gemm_bwd.matmul_backward(dc, a, b, False, "none", needs=(False, False, True)) == (None, None, None)


@pytest.mark.parametrize("M,N,K", [(0, 64, 32), (48, 0, 32), (48, 64, 0)])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
def test_empty_extents(M, N, K, activation):
    a, b, bias, dc = _inputs(M, N, K, torch.float16, 21)
    (ga, gb, gbias), c = _autograd(a, b, bias, activation, dc)
    da, db, dbias = gemm_bwd.matmul_backward(dc, a, b, True, activation, c=c, bias=bias)
    torch.testing.assert_close(da.float(), ga)
    torch.testing.assert_close(db.float(), gb)
    torch.testing.assert_close(dbias.float(), gbias, rtol=2e-3, atol=2e-3)


def test_a_cpu_tensor_is_named():
    a, b, _, dc = _inputs(64, 32, 16, torch.float16, 1, bias=False)
    with pytest.raises(ValueError, match=r"matmul_backward: dc must be on cuda:0 \(the device of a\)|"
                                         r"matmul_backward: dc must be a CUDA tensor"):
        gemm_bwd.matmul_backward(dc.cpu(), a, b, False)
