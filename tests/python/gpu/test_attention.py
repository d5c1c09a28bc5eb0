"""FlashAttention (tegula.kernels.flash_attention) and flash decoding
(tegula.kernels.flash_decoding) against explicit masked softmax references, on the GPU.

The reference is built in float64 from the same (already rounded) fp16/bf16 inputs:
scores = q kᵀ · scale, masked to -inf where a query may not see a key, natural-log LSE
by torch.logsumexp, probabilities exp(scores - lse) (0 where masked), output = p v. The
mask matches the kernel's definition exactly (offset = Skv - Sq):

    visible(i, j) = j < Skv
                    and (not causal or j <= i + offset)                 # bottom-right aligned
                    and (window is None or j > i + offset - window)     # the last W keys

(a window is a causal sliding window: it needs causal=True). A row that sees no key must
give 0 and an LSE of -inf.
"""
import importlib
import math

import pytest
import torch
import torch.nn.functional as F

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import TOLERANCE, assert_argument_error, assert_close, dtype_id, randn, rel_err, seed_of
except ImportError:
    from _util import TOLERANCE, assert_argument_error, assert_close, dtype_id, randn, rel_err, seed_of

pytestmark = pytest.mark.gpu

fa = importlib.import_module("tegula.kernels.flash_attention")
fd = importlib.import_module("tegula.kernels.flash_decoding")
flash_attention = fa.flash_attention
flash_decode = fd.flash_decode

FP16, BF16 = torch.float16, torch.bfloat16
DEVICE = "cuda"
LSE_ATOL, LSE_RTOL = 2e-3, 1e-3   # the LSE is float32 and computed from exact fp32 mma products


def _randn(shape, dtype, seed):
    return randn(shape, dtype, seed, device=DEVICE)


# ---------------------------------------------------------------------------------------------
# Attention: reference and helpers
# ---------------------------------------------------------------------------------------------

def visible_mask(sq, skv, causal, window, device):
    """(Sq, Skv) bool: which keys each query sees, exactly as the kernel masks."""
    offset = skv - sq
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(skv, device=device)[None, :]
    vis = torch.ones(sq, skv, dtype=torch.bool, device=device)
    if causal:
        vis &= j <= i + offset
    if window:
        vis &= j > i + offset - window
    return vis


def _to_bhsd(t, layout):
    return t if layout == "bhsd" else t.transpose(1, 2)


def attention_reference(q, k, v, causal=False, window=None, layout="bshd", sm_scale=None):
    """float64 masked softmax attention; returns (out in q's layout, lse (B, H, Sq), visible)."""
    qh, kh, vh = (_to_bhsd(t, layout).double() for t in (q, k, v))
    H, Sq, D = qh.shape[1:]
    Hkv, Skv = kh.shape[1:3]
    kh = kh.repeat_interleave(H // Hkv, dim=1)
    vh = vh.repeat_interleave(H // Hkv, dim=1)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    vis = visible_mask(Sq, Skv, causal, window, device=q.device)
    s = (qh @ kh.transpose(-1, -2)) * scale
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                                  # -inf for a row that sees nothing
    p = torch.where(vis, torch.exp(s - lse[..., None]), torch.zeros((), dtype=s.dtype, device=s.device))
    out = p @ vh
    return _to_bhsd(out, layout), lse, vis


def make_qkv(B, H, Hkv, Sq, Skv, D, layout, dtype, *tag):
    if layout == "bshd":
        qs, kvs = (B, Sq, H, D), (B, Skv, Hkv, D)
    else:
        qs, kvs = (B, H, Sq, D), (B, Hkv, Skv, D)
    key = (B, H, Hkv, Sq, Skv, D, layout, dtype) + tag
    return (_randn(qs, dtype, seed_of("q", *key)), _randn(kvs, dtype, seed_of("k", *key)),
            _randn(kvs, dtype, seed_of("v", *key)))


def assert_lse_close(lse, ref_lse, what=""):
    assert lse.dtype == torch.float32, f"{what}: lse dtype {lse.dtype}"
    assert lse.shape == ref_lse.shape, f"{what}: lse shape {tuple(lse.shape)} != {tuple(ref_lse.shape)}"
    ref_empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), ref_empty), f"{what}: -inf LSE entries differ from the reference"
    assert not torch.isnan(lse).any(), f"{what}: NaN in lse"
    torch.testing.assert_close(lse[~ref_empty].double(), ref_lse[~ref_empty], atol=LSE_ATOL, rtol=LSE_RTOL,
                               msg=lambda m: f"{what}: lse differs from logsumexp of the masked scores\n{m}")


def check_attention(out, lse, q, k, v, dtype, causal=False, window=None, layout="bshd", sm_scale=None, what=""):
    ref, ref_lse, vis = attention_reference(q, k, v, causal, window, layout, sm_scale)
    assert out.shape == q.shape and out.dtype == dtype, f"{what}: output {tuple(out.shape)} {out.dtype}"
    assert_close(out, ref, dtype, what)
    assert_lse_close(lse, ref_lse, what)
    empty = ~vis.any(dim=-1)                                          # (Sq,) rows that see no key
    if empty.any():
        rows = _to_bhsd(out, layout)[:, :, empty]
        assert (rows == 0).all(), f"{what}: rows that see no key are not 0"
        assert torch.isneginf(lse[:, :, empty]).all(), f"{what}: rows that see no key have a finite lse"
    return vis


# (B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype): every head dim and dtype, both layouts,
# GQA (8/2) and MHA (4/4), aligned and ragged lengths, Sq != Skv both ways, sliding windows.
CASES = [
    # aligned lengths
    (2, 8, 2, 1024, 1024, 64, False, None, "bshd", FP16),
    (2, 8, 2, 1024, 1024, 64, True, None, "bshd", BF16),
    (1, 4, 4, 256, 256, 64, True, None, "bhsd", FP16),
    (1, 4, 4, 256, 256, 64, False, None, "bhsd", BF16),
    (1, 8, 2, 256, 256, 128, False, None, "bhsd", FP16),
    (1, 8, 2, 1024, 1024, 128, True, None, "bhsd", BF16),
    (2, 4, 4, 1024, 1024, 128, True, None, "bshd", FP16),
    (2, 4, 4, 256, 256, 128, False, None, "bshd", BF16),
    (1, 4, 4, 256, 256, 256, True, None, "bshd", FP16),
    (1, 8, 2, 256, 256, 256, False, None, "bshd", BF16),
    (2, 8, 2, 256, 256, 256, False, None, "bhsd", FP16),
    (1, 4, 4, 1024, 1024, 256, True, None, "bhsd", BF16),
    # ragged lengths (not multiples of any tile)
    (1, 4, 4, 1, 1, 64, False, None, "bshd", FP16),
    (2, 8, 2, 1, 1, 128, True, None, "bhsd", BF16),
    (2, 8, 2, 77, 77, 64, True, None, "bshd", FP16),
    (1, 4, 4, 77, 77, 256, False, None, "bhsd", BF16),
    (1, 8, 2, 300, 300, 128, False, None, "bshd", BF16),
    (2, 4, 4, 300, 300, 256, True, None, "bshd", FP16),
    (1, 8, 2, 1000, 1000, 64, False, None, "bhsd", BF16),
    (1, 4, 4, 1000, 1000, 128, True, None, "bhsd", FP16),
    # Sq != Skv: fewer queries than keys, and more (causal: the first Sq - Skv rows see nothing)
    (2, 8, 2, 100, 300, 64, False, None, "bshd", FP16),
    (2, 8, 2, 100, 300, 128, True, None, "bshd", BF16),
    (1, 4, 4, 300, 100, 64, False, None, "bhsd", FP16),
    (1, 4, 4, 300, 100, 128, True, None, "bhsd", FP16),
    (1, 8, 2, 1, 1000, 64, True, None, "bshd", FP16),
    (1, 4, 4, 1000, 77, 256, True, None, "bshd", BF16),
    # sliding windows
    (1, 4, 4, 300, 300, 64, True, 1, "bshd", FP16),
    (1, 4, 4, 300, 300, 128, True, 1, "bhsd", BF16),
    (2, 8, 2, 1024, 1024, 64, True, 64, "bshd", FP16),
    (1, 8, 2, 1000, 1000, 128, True, 64, "bshd", FP16),
    (1, 4, 4, 1000, 1000, 128, True, 200, "bhsd", BF16),
    (1, 4, 4, 256, 256, 256, True, 200, "bshd", FP16),
    (1, 8, 2, 100, 300, 64, True, 64, "bshd", BF16),
    (1, 4, 4, 300, 100, 128, True, 200, "bhsd", FP16),
]


def _case_id(c):
    B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype = c
    parts = [f"b{B}h{H}kv{Hkv}", f"q{Sq}k{Skv}", f"d{D}", "causal" if causal else "full"]
    if window:
        parts.append(f"w{window}")
    return "-".join(parts + [layout, dtype_id(dtype)])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_flash_attention_matches_masked_softmax(case):
    B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype = case
    q, k, v = make_qkv(B, H, Hkv, Sq, Skv, D, layout, dtype)
    out, lse = flash_attention(q, k, v, causal=causal, window=window, layout=layout, return_lse=True)
    assert lse.shape == (B, H, Sq)
    check_attention(out, lse, q, k, v, dtype, causal, window, layout, what=_case_id(case))


def test_rows_that_see_no_key_are_zero_with_lse_minus_inf():
    """Causal with Sq = 300 > Skv = 100: query i sees keys j <= i - 200, so rows 0..199 see none."""
    q, k, v = make_qkv(2, 4, 2, 300, 100, 64, "bshd", FP16, "empty")
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    assert (out[:, :200] == 0).all(), "rows 0..199 see no key and must be 0"
    assert torch.isneginf(lse[:, :, :200]).all(), "rows 0..199 see no key and must have lse -inf"
    assert (out[:, 200:].abs().amax(dim=-1) > 0).all() and torch.isfinite(lse[:, :, 200:]).all()
    check_attention(out, lse, q, k, v, FP16, causal=True, what="Sq>Skv causal")


def test_return_lse_false_gives_just_the_output():
    q, k, v = make_qkv(1, 8, 2, 300, 300, 64, "bshd", FP16, "nolse")
    out = flash_attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor)
    out2, _ = flash_attention(q, k, v, causal=True, return_lse=True)
    assert torch.equal(out, out2)


@pytest.mark.parametrize("sm_scale,D,dtype,causal", [(0.5, 64, FP16, True), (0.03, 128, BF16, False)],
                         ids=["peaky-0.5-d64-fp16-causal", "flat-0.03-d128-bf16"])
def test_custom_sm_scale(sm_scale, D, dtype, causal):
    """0.5 with D=64 gives scores of std 4: the online max rescaling is exercised hard."""
    q, k, v = make_qkv(2, 8, 2, 300, 1000, D, "bshd", dtype, "scale")
    out, lse = flash_attention(q, k, v, causal=causal, sm_scale=sm_scale, return_lse=True)
    check_attention(out, lse, q, k, v, dtype, causal, sm_scale=sm_scale, what=f"sm_scale={sm_scale}")
    default = flash_attention(q, k, v, causal=causal)
    assert rel_err(default, out) > 10 * TOLERANCE[dtype], "sm_scale was ignored"


def test_explicit_tile_config():
    """**config reaches the kernel: a three-stage pipeline with smaller tiles is still exact."""
    q, k, v = make_qkv(1, 8, 2, 1000, 1000, 128, "bshd", FP16, "config")
    out, lse = flash_attention(q, k, v, causal=True, return_lse=True, block_M=64, block_N=64, threads=128,
                               num_stages=3)
    check_attention(out, lse, q, k, v, FP16, causal=True, what="block 64x64, 3 stages")


@pytest.mark.parametrize("overlap", [False, True], ids=["one-tile-at-a-time", "fa3-schedule"])
@pytest.mark.parametrize("case", [(1, 8, 2, 1000, 1000, 64, True, None, "bshd", BF16),
                                  (2, 4, 4, 300, 300, 128, False, None, "bhsd", FP16),
                                  (1, 4, 4, 1000, 77, 256, True, None, "bshd", FP16),
                                  (1, 8, 2, 1000, 1000, 128, True, 64, "bshd", BF16)], ids=_case_id)
def test_both_loop_schedules_match_masked_softmax(case, overlap):
    """overlap=True is FlashAttention-3's schedule of the key loop (the default on sm_90),
    overlap=False one tile at a time: each gives the masked softmax."""
    B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype = case
    q, k, v = make_qkv(B, H, Hkv, Sq, Skv, D, layout, dtype, "schedules")
    out, lse = flash_attention(q, k, v, causal=causal, window=window, layout=layout, return_lse=True,
                               overlap=overlap)
    check_attention(out, lse, q, k, v, dtype, causal, window, layout, what=f"overlap={overlap}")


@pytest.mark.parametrize("layout,dtype,causal", [("bshd", FP16, True), ("bhsd", BF16, False)],
                         ids=["bshd-fp16-causal", "bhsd-bf16-full"])
def test_non_dense_strides_with_contiguous_last_dim(layout, dtype, causal):
    """q narrowed out of a wider tensor (dim 2), k narrowed in the last dimension, v a transposed
    view: all have stride(-1) == 1 but are not contiguous; they are accepted and give the same result."""
    B, H, Hkv, Sq, Skv, D = 2, 8, 2, 300, 500, 64
    tag = (layout, dtype, causal)
    if layout == "bshd":
        q_big = _randn((B, Sq, H + 3, D), dtype, seed_of("qbig", *tag))
        q = q_big.narrow(2, 1, H)
        k = _randn((B, Skv, Hkv, 2 * D), dtype, seed_of("kbig", *tag)).narrow(3, D, D)
        v = _randn((B, Hkv, Skv, D), dtype, seed_of("vt", *tag)).transpose(1, 2)
    else:
        q_big = _randn((B, H, Sq + 50, D), dtype, seed_of("qbig", *tag))
        q = q_big.narrow(2, 25, Sq)
        k = _randn((B, Hkv, Skv, 2 * D), dtype, seed_of("kbig", *tag)).narrow(3, D, D)
        v = _randn((B, Skv, Hkv, D), dtype, seed_of("vt", *tag)).transpose(1, 2)
    for t in (q, k, v):
        assert t.stride(-1) == 1 and not t.is_contiguous()
    before = [t.clone() for t in (q, k, v)]
    out, lse = flash_attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    for t, b in zip((q, k, v), before):
        assert torch.equal(t, b), "an input was modified"
    check_attention(out, lse, q, k, v, dtype, causal, layout=layout, what="non-dense strides")
    dense = flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), causal=causal, layout=layout)
    assert torch.equal(out, dense)


# SDPA's causal mask is top-left aligned, which equals ours only when Sq == Skv.
SDPA_CASES = [
    (2, 8, 2, 100, 300, 64, False, "bshd", FP16),
    (1, 4, 4, 256, 256, 128, False, "bhsd", BF16),
    (2, 4, 4, 300, 300, 64, True, "bhsd", FP16),
    (1, 8, 2, 1024, 1024, 128, True, "bshd", BF16),
]


@pytest.mark.parametrize("case", SDPA_CASES,
                         ids=lambda c: f"q{c[3]}k{c[4]}-d{c[5]}-{'causal' if c[6] else 'full'}-{c[7]}-{dtype_id(c[8])}")
def test_matches_torch_sdpa_in_fp32(case):
    B, H, Hkv, Sq, Skv, D, causal, layout, dtype = case
    q, k, v = make_qkv(B, H, Hkv, Sq, Skv, D, layout, dtype, "sdpa")
    out = flash_attention(q, k, v, causal=causal, layout=layout)
    qh, kh, vh = (_to_bhsd(t, layout).float() for t in (q, k, v))
    kh, vh = kh.repeat_interleave(H // Hkv, dim=1), vh.repeat_interleave(H // Hkv, dim=1)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False                     # a true fp32 reference
    try:
        with sdpa_kernel(SDPBackend.MATH):
            ref = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    assert_close(out, _to_bhsd(ref, layout), dtype, "vs torch SDPA fp32")


def _base_qkv(D=64, H=4, Hkv=4, dtype=FP16):
    q = _randn((1, 64, H, D), dtype, seed_of("errq", D, H))
    k = _randn((1, 64, Hkv, D), dtype, seed_of("errk", D, Hkv))
    v = _randn((1, 64, Hkv, D), dtype, seed_of("errv", D, Hkv))
    return q, k, v


ATTENTION_ERRORS = {
    "float32": (lambda q, k, v: flash_attention(q.float(), k.float(), v.float()), r"\bq\b.*float16"),
    "cpu-tensor": (lambda q, k, v: flash_attention(q.cpu(), k, v), r"\bq\b.*CUDA"),
    "not-a-tensor": (lambda q, k, v: flash_attention(q.tolist(), k, v), r"\bq\b.*torch\.Tensor"),
    "q-3d": (lambda q, k, v: flash_attention(q[0], k, v), r"\bq\b.*4-D"),
    "k-dtype": (lambda q, k, v: flash_attention(q, k.to(BF16), v), r"\bk\b.*dtype"),
    "v-shape": (lambda q, k, v: flash_attention(q, k, v[:, :32]), r"\bv\b.*shape"),
    "heads-not-multiple": (lambda q, k, v: flash_attention(q, *_base_qkv(Hkv=3)[1:]), r"heads"),
    "head-dim-40": (lambda q, k, v: flash_attention(*_base_qkv(D=40)), r"head dimension"),
    "bad-layout": (lambda q, k, v: flash_attention(q, k, v, layout="bsdh"), r"layout"),
    "window-0": (lambda q, k, v: flash_attention(q, k, v, causal=True, window=0), r"window"),
    "window-negative": (lambda q, k, v: flash_attention(q, k, v, causal=True, window=-3), r"window"),
    "window-not-causal": (lambda q, k, v: flash_attention(q, k, v, window=64), r"window.*causal=True"),
    "window-bool": (lambda q, k, v: flash_attention(q, k, v, causal=True, window=True), r"window"),
    "sm-scale-zero": (lambda q, k, v: flash_attention(q, k, v, sm_scale=0.0), r"sm_scale"),
}


@pytest.mark.parametrize("name", list(ATTENTION_ERRORS))
def test_flash_attention_argument_errors(name):
    call, pattern = ATTENTION_ERRORS[name]
    q, k, v = _base_qkv()
    assert_argument_error(lambda: call(q, k, v), pattern)


def test_memory_is_linear_in_sequence_length():
    """No Sq x Skv matrix: the peak allocation during a call is the output and LSE, nothing quadratic."""
    B, H, D = 1, 4, 64
    peaks = {}
    for S in (2048, 4096, 8192):
        q, k, v = make_qkv(B, H, H, S, S, D, "bshd", FP16, "mem")
        flash_attention(q, k, v, causal=True, return_lse=True)          # compile and warm up first
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out, lse = flash_attention(q, k, v, causal=True, return_lse=True)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        produced = out.numel() * out.element_size() + lse.numel() * lse.element_size()
        assert peak <= 4 * produced + (1 << 20), f"S={S}: peak {peak} B for {produced} B of results"
        scores = B * H * S * S * 4                                       # one float32 score matrix a head
        assert peak < scores // 8, f"S={S}: peak {peak} B is on the order of the {scores} B score matrices"
        peaks[S] = max(peak, 1)
        del q, k, v, out, lse
    assert peaks[8192] / peaks[2048] < 6, f"peak memory grows faster than linearly: {peaks}"


# ---------------------------------------------------------------------------------------------
# Flash decoding
# ---------------------------------------------------------------------------------------------

def decode_reference(q, k_cache, v_cache, lens, sm_scale=None):
    """Per sequence, softmax over its first len_b keys in float64; GQA by repeat_interleave."""
    B, H, D = q.shape
    Hkv = k_cache.shape[2]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    out = torch.empty(B, H, D, dtype=torch.float64, device=q.device)
    for b in range(B):
        n = int(lens[b])
        kb = k_cache[b, :n].double().repeat_interleave(H // Hkv, dim=1)   # (n, H, D)
        vb = v_cache[b, :n].double().repeat_interleave(H // Hkv, dim=1)
        s = torch.einsum("hd,nhd->hn", q[b].double(), kb) * scale
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, dim=-1), vb)
    return out


def make_decode_inputs(B, H, Hkv, S, D, dtype, lens_kind, *tag):
    key = (B, H, Hkv, S, D, dtype, lens_kind) + tag
    gen = torch.Generator().manual_seed(seed_of("lens", *key))
    lens = torch.randint(1, S + 1, (B,), generator=gen)
    if lens_kind == "one":
        lens[0] = 1
    elif lens_kind == "full":
        lens[0] = S
    elif lens_kind == "mixed":            # a length-1 entry, a full one, the rest random
        lens[0], lens[-1] = 1, S
    q = _randn((B, H, D), dtype, seed_of("dq", *key))
    k = _randn((B, S, Hkv, D), dtype, seed_of("dk", *key))
    v = _randn((B, S, Hkv, D), dtype, seed_of("dv", *key))
    for b in range(B):                     # whatever lies past a sequence's length must be ignored
        k[b, lens[b]:] = float("nan")
        v[b, lens[b]:] = float("nan")
    return q, k, v, lens.to(torch.int32).to(DEVICE)


# (B, H, Hkv, S_max, D, dtype, num_split, lens): GQA 32/8, MHA 8/8, MQA 16/1.
DECODE_CASES = [
    (1, 32, 8, 1000, 128, FP16, None, "full"),
    (5, 32, 8, 4096, 128, BF16, None, "mixed"),
    (5, 8, 8, 1000, 64, FP16, None, "mixed"),
    (1, 8, 8, 4096, 64, BF16, 3, "one"),
    (5, 16, 1, 4096, 128, FP16, 7, "mixed"),
    (1, 16, 1, 1000, 64, BF16, None, "random"),
    (5, 32, 8, 1000, 64, BF16, 1, "mixed"),
    (5, 16, 1, 1000, 128, FP16, 3, "mixed"),
    (5, 8, 8, 4096, 128, FP16, 7, "mixed"),
    (5, 32, 8, 300, 64, FP16, 16, "mixed"),     # more splits than the (at most 5) key blocks
    (1, 16, 1, 300, 128, BF16, 16, "full"),
    (5, 8, 8, 300, 128, BF16, 1, "mixed"),
]


def _decode_id(c):
    B, H, Hkv, S, D, dtype, split, lens = c
    return f"b{B}h{H}kv{Hkv}-s{S}-d{D}-{dtype_id(dtype)}-split{split or 'auto'}-{lens}"


@pytest.mark.parametrize("case", DECODE_CASES, ids=_decode_id)
def test_flash_decode_matches_reference(case):
    B, H, Hkv, S, D, dtype, split, lens_kind = case
    q, k, v, lens = make_decode_inputs(B, H, Hkv, S, D, dtype, lens_kind)
    out = flash_decode(q, k, v, lens, num_split=split)
    assert out.shape == (B, H, D) and out.dtype == dtype
    ref = decode_reference(q, k, v, lens.cpu())
    assert_close(out, ref, dtype, _decode_id(case))            # also: no NaN leaked from the cache tail
    if lens_kind in ("one", "mixed"):                          # one key: the output is that value row
        rep = v[0, 0].repeat_interleave(H // Hkv, dim=0)
        assert rel_err(out[0], rep) <= TOLERANCE[dtype]


def test_flash_decode_custom_sm_scale_and_split_invariance():
    q, k, v, lens = make_decode_inputs(5, 32, 8, 1000, 128, FP16, "mixed", "scale")
    out = flash_decode(q, k, v, lens, sm_scale=0.3, num_split=3)
    assert_close(out, decode_reference(q, k, v, lens.cpu(), sm_scale=0.3), FP16, "flash_decode sm_scale=0.3")
    one = flash_decode(q, k, v, lens, sm_scale=0.3, num_split=1)
    assert rel_err(out, one) <= TOLERANCE[FP16]


def _decode_base(H=8, Hkv=8, D=64, B=2, S=128):
    q = _randn((B, H, D), FP16, seed_of("deq", H, D))
    k = _randn((B, S, Hkv, D), FP16, seed_of("dek", Hkv, D))
    v = _randn((B, S, Hkv, D), FP16, seed_of("dev", Hkv, D))
    lens = torch.full((B,), S, dtype=torch.int32, device=DEVICE)
    return q, k, v, lens


DECODE_ERRORS = {
    "seqlens-int64": (lambda q, k, v, n: flash_decode(q, k, v, n.long()), r"cache_seqlens"),
    "seqlens-shape": (lambda q, k, v, n: flash_decode(q, k, v, torch.cat([n, n])), r"cache_seqlens"),
    "q-4d": (lambda q, k, v, n: flash_decode(q[:, None], k, v, n), r"\bq\b.*3-D"),
    "head-dim-mismatch": (lambda q, k, v, n: flash_decode(q, *_decode_base(D=128)[1:3], n), r"k_cache"),
    "heads-not-multiple": (lambda q, k, v, n: flash_decode(_decode_base(H=12)[0], k, v, n), r"heads"),
    "num-split-0": (lambda q, k, v, n: flash_decode(q, k, v, n, num_split=0), r"num_split"),
    "cpu-q": (lambda q, k, v, n: flash_decode(q.cpu(), k, v, n), r"\bq\b.*CUDA"),
}


@pytest.mark.parametrize("name", list(DECODE_ERRORS))
def test_flash_decode_argument_errors(name):
    call, pattern = DECODE_ERRORS[name]
    q, k, v, n = _decode_base()
    assert_argument_error(lambda: call(q, k, v, n), pattern)


def test_flash_decode_length_zero_and_past_the_cache():
    """A length of 0 gives zeros; a length past S_max counts as S_max (never reads past it)."""
    B, H, Hkv, S, D = 3, 8, 2, 300, 64
    q, k, v, _ = make_decode_inputs(B, H, Hkv, S, D, FP16, "random", "edge")
    k = torch.nan_to_num(k, nan=0.5)
    v = torch.nan_to_num(v, nan=0.5)
    lens = torch.tensor([0, S + 50, 7], dtype=torch.int32, device=DEVICE)
    out = flash_decode(q, k, v, lens)
    assert not torch.isnan(out).any()
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    ref = decode_reference(q[1:], k[1:], v[1:], torch.tensor([S, 7]))
    assert_close(out[1:], ref, FP16, "clamped lengths")
