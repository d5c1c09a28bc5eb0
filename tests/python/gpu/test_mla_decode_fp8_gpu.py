"""MLA decode over an FP8 (float8_e4m3fn) KV cache on the GPU, against float64 attention
over the dequantized cache (kv_scale x the 8-bit values): contiguous and paged, float16 and
bfloat16 queries, 16 to 128 heads, ragged lengths (0, not a multiple of the page, past the
cache), NaN in the unused tail, the outputs' memory poisoned with NaN before each launch.
With a power-of-two scale the conversion is exact, so the FP8 program must agree with the
16-bit program run over the dequantized cache to within float32 rounding."""
import importlib
import math

import pytest
import torch

try:
    from ._util import TOLERANCE, assert_close, seed_of
except ImportError:
    from _util import TOLERANCE, assert_close, seed_of

pytestmark = pytest.mark.gpu

mla = importlib.import_module("tegula.kernels.mla_decode")
W, DV, PAGE = 576, 512, 64
F8 = torch.float8_e4m3fn


def poison_allocator():
    """Fills memory the caching allocator is about to hand out with NaN, in its large pool
    and in its small one (blocks under 1 MiB, where most outputs land): an output element
    the kernel fails to write stays NaN."""
    big = torch.full((64 << 20,), float("nan"), device="cuda")
    small = [torch.full((n << 10,), float("nan"), device="cuda") for n in (1, 4, 16, 64, 128, 255) for _ in range(8)]
    del big, small


def reference(q, kv8, lens, kv_scale, sm_scale=None):
    scale = sm_scale if sm_scale is not None else 1 / math.sqrt(W)
    B, H, _ = q.shape
    out = torch.zeros((B, H, DV), dtype=torch.float64)
    lse = torch.full((B, H), -math.inf, dtype=torch.float64)
    q64, kv64 = q.double().cpu(), kv8.double().cpu() * kv_scale
    for b in range(B):
        n = min(int(lens[b]), kv8.shape[1])
        if n == 0:
            continue
        s = q64[b] @ kv64[b, :n].T * scale
        lse[b] = torch.logsumexp(s, dim=-1)
        out[b] = torch.softmax(s, dim=-1) @ kv64[b, :n, :DV]
    return out, lse


def make_inputs(B, H, S, dtype, tag, paged=False):
    if paged:
        S = -(-S // PAGE) * PAGE
    seed = seed_of(B, H, S, dtype, tag)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((B, H, W), generator=gen, device="cuda").to(dtype)
    # A cache quantized as a per-tensor scale would: amax at 448.
    kv = torch.randn((B, S, W), generator=gen, device="cuda")
    kv8 = (kv * (448 / kv.abs().max())).to(F8)
    cpu_gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, S + 1, (B,), generator=cpu_gen, dtype=torch.int32)
    lens[0] = 0
    if B > 1:
        lens[1] = S
    if B > 2:
        lens[2] = max(1, S - 37)
    if B > 3:
        lens[3] = S + 500
    return q, kv8, lens.cuda()


def poison_tail(kv, lens):
    for b in range(kv.shape[0]):
        kv[b, min(int(lens[b]), kv.shape[1]):] = float("nan")


def to_paged(kv, seed):
    B, S, _ = kv.shape
    per = -(-S // PAGE)
    padded = torch.full((B, per * PAGE, W), float("nan"), device=kv.device).to(kv.dtype)
    padded[:, :S] = kv
    pages = padded.reshape(B * per, PAGE, W)
    perm = torch.randperm(B * per, generator=torch.Generator().manual_seed(seed))
    shuffled = torch.empty_like(pages)
    shuffled[perm.cuda()] = pages
    return shuffled, perm.reshape(B, per).to(torch.int32).cuda()


CASES = [(4, 128, 1000, torch.float16), (3, 64, 700, torch.bfloat16), (5, 16, 300, torch.float16),
         (2, 32, 129, torch.bfloat16), (4, 128, 4096, torch.bfloat16), (8, 16, 4096, torch.float16),
         (6, 96, 250, torch.float16)]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-H{c[1]}-S{c[2]}-{str(c[3])[6:]}")
def test_mla_decode_fp8_matches_reference(case, paged):
    B, H, S, dtype = case
    kv_scale = 0.0071
    q, kv8, lens = make_inputs(B, H, S, dtype, "ref", paged)
    ref_out, ref_lse = reference(q, kv8, lens.cpu(), kv_scale)
    poison_tail(kv8, lens)
    poison_allocator()
    if paged:
        pages, table = to_paged(kv8, seed_of(case))
        out, lse = mla.mla_decode(q, pages, lens, block_table=table, return_lse=True, kv_scale=kv_scale)
    else:
        out, lse = mla.mla_decode(q, kv8, lens, return_lse=True, kv_scale=kv_scale)
    assert out.shape == (B, H, DV) and out.dtype == dtype and lse.dtype == torch.float32
    assert_close(out.cpu(), ref_out, dtype, f"mla_decode fp8 {case} paged={paged}")
    assert torch.equal(out[0].float().cpu(), torch.zeros(H, DV)), "a length-0 sequence gives zeros"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    assert (lse.cpu().double()[finite] - ref_lse[finite]).abs().max() < 1e-3


@pytest.mark.parametrize("convert", list(mla.CONVERTS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("H", [16, 128])
def test_fp8_program_equals_16_bit_program_over_the_dequantized_cache(H, dtype, convert, monkeypatch):
    """kv_scale a power of two: s x (an e4m3 value) is exact in 16 bits, and scaling the
    scores and the output by s in float32 is exact too, so the two programs differ only by
    the float32 rounding of the final divide. q ~ N(0, 1) and a cache at amax 448 make the
    scores large, the softmax peaked: a missed scale changes the output entirely."""
    monkeypatch.setattr(mla, "FP8_TUNING", {"convert": convert})
    mla.kernel_for.cache_clear()
    q, kv8, lens = make_inputs(6, H, 2000, dtype, "equal")
    for kv_scale in (1.0, 0.25):
        poison_allocator()
        out8, lse8 = mla.mla_decode(q, kv8, lens, return_lse=True, kv_scale=kv_scale,
                                    num_split=4)
        out16, lse16 = mla.mla_decode(q, (kv8.to(dtype) * kv_scale).to(dtype), lens, return_lse=True, num_split=4)
        # A rounding or two of the output dtype apart at most (the final divide's float32
        # rounding can tip the 16-bit rounding), far below a missed or doubled scale.
        tol = TOLERANCE[dtype]
        torch.testing.assert_close(out8, out16, rtol=tol, atol=tol * float(out16.abs().max()))
        torch.testing.assert_close(lse8, lse16, rtol=1e-5, atol=1e-5)


def test_mla_decode_fp8_split_invariance_scale_and_default():
    q, kv8, lens = make_inputs(3, 128, 900, torch.float16, "split")
    ref_out, _ = reference(q, kv8, lens.cpu(), 0.5, sm_scale=0.05)
    for s in (1, 3, 16):
        out = mla.mla_decode(q, kv8, lens, sm_scale=0.05, num_split=s, kv_scale=0.5)
        assert_close(out.cpu(), ref_out, torch.float16, f"mla_decode fp8 num_split={s}")
    ref_one, _ = reference(q, kv8, lens.cpu(), 1.0)   # kv_scale None means 1.0
    assert_close(mla.mla_decode(q, kv8, lens).cpu(), ref_one, torch.float16, "mla_decode fp8 kv_scale=None")


@pytest.mark.parametrize("bad, match", [
    (lambda q, kv, n: mla.mla_decode(q.to(F8), kv, n), r"\bq\b"),
    (lambda q, kv, n: mla.mla_decode(q, kv.to(torch.float8_e5m2), n), r"kv_cache"),
    (lambda q, kv, n: mla.mla_decode(q, kv.half(), n, kv_scale=0.5), r"kv_scale"),
    (lambda q, kv, n: mla.mla_decode(q, kv, n, kv_scale=-1.0), r"kv_scale"),
])
def test_mla_decode_fp8_bad_arguments(bad, match):
    q, kv8, lens = make_inputs(2, 16, 128, torch.float16, "bad")
    with pytest.raises(ValueError, match=match):
        bad(q, kv8, lens)


@pytest.mark.parametrize("tuning", [{"block_N": 64, "num_stages": 3}, {"block_N": 64, "num_stages": 2},
                                    {"block_N": 32, "num_stages": 2}, {"block_N": 32, "num_stages": 4},
                                    {"num_split": "default"}, {"convert": "bits"},
                                    {"convert": "bits", "block_N": 64, "num_stages": 2}], ids=str)
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_mla_decode_fp8_sweep_configs_agree(tuning, paged, monkeypatch):
    """Every configuration bench_mla.py --fp8 can sweep (FP8_TUNING) computes the same
    attention: 16 heads, lengths ragged against 32- and 64-key blocks."""
    monkeypatch.setattr(mla, "FP8_TUNING", dict(tuning))
    mla.kernel_for.cache_clear()
    try:
        q, kv8, lens = make_inputs(5, 16, 300, torch.float16, "sweep", paged)
        ref_out, _ = reference(q, kv8, lens.cpu(), 0.0071)
        poison_tail(kv8, lens)
        poison_allocator()
        if paged:
            pages, table = to_paged(kv8, 7)
            out = mla.mla_decode(q, pages, lens, block_table=table, kv_scale=0.0071)
        else:
            out = mla.mla_decode(q, kv8, lens, kv_scale=0.0071)
        assert_close(out.cpu(), ref_out, torch.float16, f"mla_decode fp8 {tuning} paged={paged}")
    finally:
        mla.kernel_for.cache_clear()
