"""The entry points of tegula.kernels behave like the torch functions they stand for, on the
inputs torch users actually pass, on the GPU:

- views: a tensor that starts off a 16-byte boundary (x[1:], a storage offset of 1-4
  elements) or is strided gives bit for bit what the aligned contiguous tensor gives (the
  entry point copies it first), for every tensor argument and for `out=`;
- empty extents (no rows, an empty last dimension, batch / sequence / KV length 0) give
  torch's result without a launch;
- NaN and inf: `isnan(out) == isnan(ref)` everywhere and the finite values close, with
  `ref` the torch function on float32 upcasts of the same inputs.
"""
import importlib

import pytest
import torch
import torch.nn.functional as F

import tegula.kernels as K

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import DTYPES, TOLERANCE, dtype_id, norm_weight, poison, randn, rel_err, seed_of
except ImportError:
    from _util import DTYPES, TOLERANCE, dtype_id, norm_weight, poison, randn, rel_err, seed_of

pytestmark = pytest.mark.gpu

fa = importlib.import_module("tegula.kernels.flash_attention")
fd = importlib.import_module("tegula.kernels.flash_decoding")
gemm = importlib.import_module("tegula.kernels.gemm")
HALF = [torch.float16, torch.bfloat16]


# --- the entry points as data: (make inputs, call, float32 torch reference) -----------------

def _x(shape, dtype, tag):
    return randn(shape, dtype, seed_of(tag, shape, dtype))


ROW_OPS = {
    "rms_norm": (lambda s, d: (_x(s, d, "x"), norm_weight(s[-1], d, 2)),
                 lambda x, w, **kw: K.rms_norm(x, w, 1e-6, **kw),
                 lambda x, w: F.rms_norm(x.float(), (x.shape[-1],), w.float(), 1e-6)),
    "rms_norm_silu": (lambda s, d: (_x(s, d, "x"), norm_weight(s[-1], d, 2)),
                      lambda x, w, **kw: K.rms_norm_silu(x, w, 1e-6, **kw),
                      lambda x, w: F.silu(F.rms_norm(x.float(), (x.shape[-1],), w.float(), 1e-6))),
    "layer_norm": (lambda s, d: (_x(s, d, "x"), norm_weight(s[-1], d, 2), _x(s[-1:], d, "b")),
                   lambda x, w, b, **kw: K.layer_norm(x, w, b, 1e-5, **kw),
                   lambda x, w, b: F.layer_norm(x.float(), (x.shape[-1],), w.float(), b.float(), 1e-5)),
    "softmax": (lambda s, d: (_x(s, d, "x"),),
                lambda x, **kw: K.softmax(x, **kw),
                lambda x: torch.softmax(x.float(), dim=-1)),
    "row_sum": (lambda s, d: (_x(s, d, "x"),),
                lambda x, **kw: K.row_sum(x, **kw),
                lambda x: x.float().sum(-1)),
    "row_max": (lambda s, d: (_x(s, d, "x"),),
                lambda x, **kw: K.row_max(x, **kw),
                lambda x: x.float().amax(-1)),
    "row_min": (lambda s, d: (_x(s, d, "x"),),
                lambda x, **kw: K.row_min(x, **kw),
                lambda x: x.float().amin(-1)),
    "add": (lambda s, d: (_x(s, d, "x"), _x(s, d, "y")),
            lambda x, y, **kw: K.add(x, y, **kw),
            lambda x, y: x.float() + y.float()),
    "add_row": (lambda s, d: (_x(s, d, "x"), _x(s[-1:], d, "y")),
                lambda x, y, **kw: K.add(x, y, **kw),
                lambda x, y: x.float() + y.float()),
    "transpose": (lambda s, d: (_x(s[-2:], d, "x"),),
                  lambda x, **kw: K.transpose(x, **kw),
                  lambda x: x.float().t()),
}


def _out_shape(op, args):
    x = args[0]
    if op.startswith("row_"):
        return x.shape[:-1]
    if op == "transpose":
        return (x.shape[1], x.shape[0])
    return x.shape


def misaligned(t, offset):
    """t's values in a view that starts `offset` elements into a fresh buffer."""
    buf = torch.empty(t.numel() + offset, dtype=t.dtype, device=t.device)
    v = buf[offset:].view(t.shape)
    v.copy_(t)
    return v


def strided(t):
    """t's values in a view whose last dimension has stride 2."""
    buf = torch.empty(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    v = buf[..., ::2]
    v.copy_(t)
    return v


def make_view(t, kind):
    if kind == "strided":
        v = strided(t)
        assert not v.is_contiguous()
    else:
        v = misaligned(t, int(kind.split("-")[1]))
        if v.data_ptr() % 16 == 0:
            pytest.skip(f"{kind} is 16-byte aligned for {t.dtype}")
    torch.testing.assert_close(v, t, rtol=0, atol=0, equal_nan=True)
    return v


VIEWS = ["offset-1", "offset-2", "offset-3", "offset-4", "strided"]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("op", list(ROW_OPS))
def test_views_give_the_contiguous_result(op, view, dtype):
    make, call, ref = ROW_OPS[op]
    args = make((37, 520), dtype)
    expect = call(*args)
    for i in range(len(args)):
        viewed = list(args)
        viewed[i] = make_view(args[i], view)
        got = call(*viewed)
        assert torch.equal(got, expect), f"{op}: argument {i} as a {view} view changes the result"
    assert rel_err(expect.float(), ref(*args)) <= 4 * TOLERANCE[dtype]
    # out= as such a view: written through, and the view itself is what comes back.
    out = make_view(poison(_out_shape(op, args), dtype), view)
    got = call(*args, out=out)
    assert got is out and torch.equal(out, expect), f"{op}: out= as a {view} view"


EMPTY_SHAPES = [(0, 64), (4, 0), (0, 0), (2, 0, 64), (3, 2, 0)]


@pytest.mark.parametrize("shape", EMPTY_SHAPES, ids=str)
@pytest.mark.parametrize("op", list(ROW_OPS))
def test_empty_dimensions_give_torch_results(op, shape):
    make, call, ref = ROW_OPS[op]
    if op == "transpose":
        shape = shape[-2:]
    args = make(shape, torch.float16)
    if op in ("row_max", "row_min") and shape[-1] == 0:
        with pytest.raises((RuntimeError, IndexError)):  # torch 2.11 raises IndexError
            ref(*args)
        with pytest.raises(ValueError, match=rf"{op}: the last dimension of x is empty"):
            call(*args)
        return
    expect = ref(*args)
    got = call(*args)
    assert tuple(got.shape) == tuple(expect.shape) and got.dtype == torch.float16
    assert torch.equal(got.float(), expect), f"{op} {shape}: {got} != {expect}"


def assert_nan_like(out, ref, dtype, what):
    """NaN exactly where the reference has NaN, infinities equal, the rest close."""
    out = out.float()
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    nan, ref_nan = torch.isnan(out), torch.isnan(ref)
    assert torch.equal(nan, ref_nan), (f"{what}: NaN in {nan.sum().item()} places, the reference in "
                                       f"{ref_nan.sum().item()}; {(nan != ref_nan).sum().item()} differ")
    inf = torch.isinf(ref)
    assert torch.equal(out[inf], ref[inf]), f"{what}: infinities differ"
    finite = ~ref_nan & ~inf
    assert torch.isfinite(out[finite]).all(), f"{what}: an inf where the reference is finite"
    assert rel_err(out[finite], ref[finite].to(dtype).float()) <= 4 * TOLERANCE[dtype], what


def with_specials(x):
    """Row 1: a NaN; row 2: +inf; row 3: -inf; row 4: +inf and -inf; row 5: all -inf;
    row 6: NaN and inf; the other rows as they were."""
    x = x.clone()
    n = x.shape[-1]
    x[1, n // 3] = float("nan")
    x[2, n - 1] = float("inf")
    x[3, 0] = float("-inf")
    x[4, 5], x[4, n // 2] = float("inf"), float("-inf")
    x[5, :] = float("-inf")
    x[6, 7], x[6, 9] = float("nan"), float("inf")
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [1024, 520, 16], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("op", list(ROW_OPS))
def test_nan_and_inf_propagate_like_torch(op, n, dtype):
    make, call, ref = ROW_OPS[op]
    args = list(make((67, n), dtype))
    args[0] = with_specials(args[0])
    if op == "add":  # specials in y as well, other rows
        args[1] = with_specials(args[1].flip(0)).flip(0)
    out = call(*args)
    assert_nan_like(out, ref(*args), dtype, f"{op} n={n}")


# --- matmul ----------------------------------------------------------------------------------

def _matmul_ref(a, b, bias=None, activation="none"):
    c = a.float() @ b.float()
    if bias is not None:
        c = c + bias.float()
    if activation == "relu":
        c = torch.relu(c)
    if activation == "gelu":
        c = F.gelu(c, approximate="tanh")
    return c


@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
@pytest.mark.parametrize("view", VIEWS)
def test_matmul_views(view, dtype):
    M, N, K_ = 200, 136, 96
    a, b, bias = _x((M, K_), dtype, "a"), _x((K_, N), dtype, "b"), _x((N,), dtype, "bias")
    expect = gemm.matmul(a, b, bias, "relu")
    assert rel_err(expect.float(), _matmul_ref(a, b, bias, "relu")) <= 4 * TOLERANCE[dtype]
    for i in range(3):
        args = [a, b, bias]
        args[i] = make_view(args[i], view)
        assert torch.equal(gemm.matmul(*args, activation="relu"), expect), f"operand {i} as a {view} view"
    # A transposed operand (column-major storage), the common strided case.
    assert torch.equal(gemm.matmul(a.t().contiguous().t(), b.t().contiguous().t(), bias, "relu"), expect)


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("M,N,K", [(0, 64, 32), (64, 0, 32), (64, 48, 0), (0, 0, 0)], ids=str)
def test_matmul_empty_extents(M, N, K, activation):
    a, b = _x((M, K), torch.float16, "a"), _x((K, N), torch.float16, "b")
    bias = _x((N,), torch.float16, "bias")
    for with_bias in (None, bias):
        got = gemm.matmul(a, b, with_bias, activation)
        expect = _matmul_ref(a, b, with_bias, activation).half()
        assert got.shape == (M, N) and torch.equal(got, expect)


@pytest.mark.parametrize("activation", ["none", "relu"])
def test_matmul_nan_and_inf(activation):
    M, N, K_ = 130, 72, 200
    a, b, bias = _x((M, K_), torch.float16, "a"), _x((K_, N), torch.float16, "b"), _x((N,), torch.float16, "c")
    a[3, 17] = float("nan")
    a[5, 0] = float("inf")
    b[7, 9] = float("-inf")
    b[:, 11] = 0.0
    b[4, 11] = float("nan")
    out = gemm.matmul(a, b, bias, activation)
    assert_nan_like(out, _matmul_ref(a, b, bias, activation), torch.float16, f"matmul {activation}")


# --- attention -------------------------------------------------------------------------------

def sdpa_math(q, k, v, causal=False, layout="bshd", sm_scale=None):
    """torch's math path on float32 upcasts, in q's layout; GQA by repeating KV heads."""
    qh, kh, vh = ((t if layout == "bhsd" else t.transpose(1, 2)).float() for t in (q, k, v))
    g = qh.shape[1] // kh.shape[1]
    kh, vh = kh.repeat_interleave(g, dim=1), vh.repeat_interleave(g, dim=1)
    out = torch.ops.aten._scaled_dot_product_attention_math(qh, kh, vh, is_causal=causal, scale=sm_scale)[0]
    return out if layout == "bhsd" else out.transpose(1, 2)


def _qkv(B, H, Hkv, Sq, Skv, D, dtype, layout="bshd"):
    qs, ks = ((B, Sq, H, D), (B, Skv, Hkv, D)) if layout == "bshd" else ((B, H, Sq, D), (B, Hkv, Skv, D))
    return _x(qs, dtype, "q"), _x(ks, dtype, "k"), _x(ks, dtype, "v")


@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("S,D", [(256, 64), (200, 128), (77, 256)], ids=str)
def test_attention_nan_query_and_inf_key(S, D, causal, dtype):
    q, k, v = _qkv(2, 4, 2, S, S, D, dtype)
    q[0, 5, 1, D // 2] = float("nan")                  # one query row of head 1
    q[1, S - 1, 3, :] = float("nan")                   # the last query of head 3
    # Key 0 is seen by every query (also under the causal mask): +inf in one component
    # makes the score +inf (NaN row) where q's component is positive, -inf where negative.
    k[1, 0, 0, 3] = float("inf")
    out = fa.flash_attention(q, k, v, causal=causal)
    assert_nan_like(out, sdpa_math(q, k, v, causal), dtype, f"flash_attention S={S} D={D} causal={causal}")
    assert torch.isnan(out[0, 5, 1]).all() and not torch.isnan(out[0, 5, 0]).any()


def test_attention_fully_masked_rows_stay_zero_beside_nan_rows():
    """Causal with Sq > Skv: the first Sq - Skv queries see no key and give 0, also in a head
    whose other rows are NaN."""
    q, k, v = _qkv(1, 2, 2, 96, 40, 64, torch.float16)
    q[0, 90, 0, 0] = float("nan")
    out, lse = fa.flash_attention(q, k, v, causal=True, return_lse=True)
    assert (out[0, :56] == 0).all() and torch.isneginf(lse[0, :, :56]).all()
    assert torch.isnan(out[0, 90, 0]).all() and torch.isnan(lse[0, 0, 90])
    assert not torch.isnan(out[0, 56:, 1]).any() and not torch.isnan(out[0, :90, 0]).any()


@pytest.mark.parametrize("view", VIEWS)
def test_attention_views(view):
    q, k, v = _qkv(2, 4, 2, 130, 150, 64, torch.float16)
    expect = fa.flash_attention(q, k, v, causal=True)
    for i in range(3):
        args = [q, k, v]
        args[i] = make_view(args[i], view)
        assert torch.equal(fa.flash_attention(*args, causal=True), expect), f"argument {i} as a {view} view"
    # (B, H, S, D) storage read as "bshd": the usual non-contiguous case.
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert torch.equal(fa.flash_attention(qt, k, v, causal=True), expect)


@pytest.mark.parametrize("shape", [(0, 4, 2, 64, 64, 64), (2, 4, 2, 0, 64, 64), (2, 4, 2, 64, 0, 64),
                                   (2, 0, 0, 64, 64, 64), (2, 4, 2, 64, 64, 0)], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_empty_extents(shape, causal):
    q, k, v = _qkv(*shape, torch.float16)
    out, lse = fa.flash_attention(q, k, v, causal=causal, return_lse=True)
    B, H, _, Sq, Skv, D = shape
    assert out.shape == q.shape and lse.shape == (B, H, Sq) and lse.dtype == torch.float32
    if D > 0 and H > 0:
        ref = sdpa_math(q, k, v, causal and Skv > 0)
        assert torch.equal(out.float(), ref), "empty extent differs from torch"
    if Skv == 0:
        assert torch.isneginf(lse).all()


def decode_ref(q, k, v, lens):
    """Per sequence, SDPA's math path over its first len_b keys (float32 upcasts)."""
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    if q.numel() == 0:
        return out
    for b, n in enumerate(lens.tolist()):
        n = min(n, k.shape[1])
        if n > 0:
            out[b] = sdpa_math(q[b, None, None], k[b, None, :n], v[b, None, :n])[0, 0]
    return out


@pytest.mark.parametrize("dtype", HALF, ids=dtype_id)
def test_decode_nan_query_and_inf_key(dtype):
    B, H, Hkv, S, D = 3, 8, 2, 700, 128
    q, k, v = _x((B, H, D), dtype, "dq"), _x((B, S, Hkv, D), dtype, "dk"), _x((B, S, Hkv, D), dtype, "dv")
    lens = torch.tensor([700, 333, 0], dtype=torch.int32, device="cuda")
    q[0, 2, 7] = float("nan")
    k[1, 0, 1, 5] = float("inf")                      # seen by heads 4..7 of sequence 1
    k[1, 500, 0, :] = float("nan")                    # past sequence 1's length: never read
    out = fd.flash_decode(q, k, v, lens)
    assert_nan_like(out, decode_ref(q, k, v, lens), dtype, "flash_decode")
    assert torch.isnan(out[0, 2]).all() and (out[2] == 0).all()


@pytest.mark.parametrize("view", VIEWS)
def test_decode_views(view):
    B, H, Hkv, S, D = 2, 8, 2, 300, 64
    q, k, v = _x((B, H, D), torch.float16, "dq"), _x((B, S, Hkv, D), torch.float16, "dk"), \
        _x((B, S, Hkv, D), torch.float16, "dv")
    lens = torch.tensor([300, 123], dtype=torch.int32, device="cuda")
    expect = fd.flash_decode(q, k, v, lens)
    for i in range(3):
        args = [q, k, v]
        args[i] = make_view(args[i], view)
        assert torch.equal(fd.flash_decode(*args, lens), expect), f"argument {i} as a {view} view"


@pytest.mark.parametrize("shape", [(0, 8, 2, 64, 64), (2, 8, 2, 0, 64), (2, 0, 0, 64, 64), (2, 8, 2, 64, 0)],
                         ids=str)
def test_decode_empty_extents(shape):
    B, H, Hkv, S, D = shape
    q, k, v = _x((B, H, D), torch.float16, "dq"), _x((B, S, Hkv, D), torch.float16, "dk"), \
        _x((B, S, Hkv, D), torch.float16, "dv")
    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
    out = fd.flash_decode(q, k, v, lens)
    assert out.shape == (B, H, D) and torch.equal(out.float(), decode_ref(q, k, v, lens))


# --- argument errors that need a CUDA tensor beside the wrong one --------------------------------

def test_a_cpu_argument_beside_cuda_ones_is_named():
    x = _x((4, 64), torch.float16, "x")
    w = norm_weight(64, torch.float16, 1)
    with pytest.raises(ValueError, match=r"rms_norm: weight must be a CUDA tensor"):
        K.rms_norm(x, w.cpu())
    with pytest.raises(ValueError, match=r"add: y must be a CUDA tensor"):
        K.add(x, x.cpu())
    with pytest.raises(ValueError, match=r"softmax: out must be on"):
        K.softmax(x, out=torch.empty(4, 64, dtype=torch.float16))
    q, k, v = _qkv(1, 2, 2, 16, 16, 64, torch.float16)
    with pytest.raises(ValueError, match=r"flash_attention: v must be a CUDA tensor"):
        fa.flash_attention(q, k, v.cpu())
    with pytest.raises(ValueError, match=r"matmul: bias must be a CUDA tensor"):
        gemm.matmul(x, x.t(), bias=torch.zeros(4, dtype=torch.float16))
