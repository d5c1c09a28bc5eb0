"""FP8 activation quantization (tegula.kernels.fp8_quantization) on the GPU at real sizes:
q's bytes and the scales equal to the module's torch formula computed on the GPU from the
same input (per token, per 128-column group, ragged groups, chunked rows, both fp8 types,
UE8M0), outputs poisoned before the launch, zero rows, NaN and inf; the fused RMSNorm
against the formula on F.rms_norm in float32 (one-ulp tolerance, see the CPU test); the
entry points on 3-D and strided inputs, empty extents, and argument errors."""
import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu

FQ = importlib.import_module("tegula.kernels.fp8_quantization")
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"

SHAPES = [(4096, 7168), (16384, 2048), (1, 7168), (7, 4096), (33, 300), (3, 40000), (5, 13)]
GROUPS = [None, 128, "ragged"]


def sample(m, k, dtype, seed, specials=True):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, generator=gen, device="cuda") * 3
    x = x.to(dtype)
    if specials and m > 3:
        x[1] = 0
        x[2, k // 3] = float("nan")
        x[3, k - 1] = float("inf")
    return x


def poisoned(x, group_size, dtype):
    q, s = FQ._empty_outputs(x, group_size, dtype)
    q.view(torch.uint8).fill_(0x7F)
    s.fill_(float("nan"))
    return q, s


def assert_same(q, s, ref_q, ref_s):
    """Bit for bit but NaN's sign bit; NaN exactly where the formula has it."""
    nan = ref_q.float().isnan()
    assert torch.equal(q.float().isnan(), nan)
    assert torch.equal(q.view(torch.uint8)[~nan], ref_q.view(torch.uint8)[~nan])
    assert torch.equal(s.isnan(), ref_s.isnan())
    assert torch.equal(s.nan_to_num(-1.0), ref_s.nan_to_num(-1.0))


def group_of(group, k):
    if group == "ragged":
        # a last group of other width where the size allows one, else small groups
        return 128 if k % 128 else 4096 if k % 4096 and k > 4096 else 16
    return group


@pytest.mark.parametrize("ue8m0", [False, True], ids=["f32-scale", "ue8m0"])
@pytest.mark.parametrize("fp8", [E4M3, E5M2])
@pytest.mark.parametrize("group", GROUPS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_quantize_matches_the_formula(shape, group, fp8, ue8m0):
    m, k = shape
    group = group_of(group, k)
    for dtype in (torch.bfloat16, torch.float16, torch.float32) if m * k < 10 ** 6 else (torch.bfloat16,):
        x = sample(m, k, dtype, seed=m + k)
        q, s = poisoned(x, group, fp8)
        for kernel, args in FQ.quantize_fp8_launches("t", x, q, s, group, fp8, ue8m0):
            kernel(*args)
        assert_same(q, s, *FQ.quantize_fp8_reference(x, group, fp8, ue8m0))
        q2, s2 = FQ.quantize_fp8(x, group, fp8, ue8m0)
        assert torch.equal(q2.view(torch.uint8), q.view(torch.uint8)) and torch.equal(s2.nan_to_num(-1),
                                                                                      s.nan_to_num(-1))


def assert_close_fused(q, s, ref_q, ref_s):
    torch.testing.assert_close(s, ref_s, rtol=5e-7, atol=0, equal_nan=True)
    nan = ref_q.float().isnan()
    assert torch.equal(q.float().isnan(), nan)
    a = q.view(torch.uint8)[~nan].int()
    b = ref_q.view(torch.uint8)[~nan].int()
    assert (a != b).sum() <= max(2, a.numel() // 1000)
    assert ((a - b).abs() <= 1).all()


@pytest.mark.parametrize("ue8m0", [False, True], ids=["f32-scale", "ue8m0"])
@pytest.mark.parametrize("group", [None, 128], ids=str)
@pytest.mark.parametrize("shape", [(4096, 7168), (16384, 2048), (1, 7168), (7, 4096), (33, 384), (3, 40960)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_fused_norm_matches_the_float32_pipeline(shape, group, ue8m0):
    m, k = shape
    x = sample(m, k, torch.bfloat16, seed=k)
    w = (1 + 0.1 * torch.randn(k, device="cuda")).bfloat16()
    q, s = poisoned(x, group, E4M3)
    for kernel, args in FQ.rms_norm_quantize_fp8_launches("t", x, w, q, s, 1e-6, group, E4M3, ue8m0):
        kernel(*args)
    launched = q.clone()
    ref_q, ref_s = FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, group, E4M3, ue8m0)
    if ue8m0:
        # The fused sum of squares is added in another order than F.rms_norm's, so amax can
        # differ by an ulp; where amax / 448 sits on a power of two that ulp moves the
        # rounded-up scale by a factor of two (and every q of the group with it). Those
        # groups must be rare and exactly such ties; the others compare as usual.
        raw = FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, group, E4M3, False)[1]
        flipped = (s != ref_s) & ~ref_s.isnan()
        assert flipped.sum() <= max(1, flipped.numel() // 1000)
        tie = raw[flipped] / torch.exp2(torch.round(torch.log2(raw[flipped])))
        assert ((tie - 1).abs() < 1e-6).all() and ((s[flipped] / ref_s[flipped]).log2().abs() == 1).all()
        keep = ~flipped.repeat_interleave(k // s.shape[-1], -1)[..., :k] if group else ~flipped.expand(-1, k)
        q, ref_q, s, ref_s = q[keep], ref_q[keep], s[~flipped], ref_s[~flipped]
    assert_close_fused(q, s, ref_q, ref_s)
    q2, s2 = FQ.rms_norm_quantize_fp8(x, w, 1e-6, group, E4M3, ue8m0)
    assert torch.equal(q2.view(torch.uint8), launched.view(torch.uint8))


def test_entry_points_on_views_and_empty_extents():
    x = sample(6, 2 * 7168, torch.bfloat16, seed=1, specials=False).view(2, 3, -1)[..., 1:7169]  # strided, misaligned
    q, s = FQ.quantize_fp8(x, 128)
    assert q.shape == x.shape and s.shape == (2, 3, 56) and q.is_contiguous()
    ref = FQ.quantize_fp8_reference(x, 128)
    assert_same(q, s, *ref)
    w = torch.ones(7168, device="cuda", dtype=torch.float32)
    q, s = FQ.rms_norm_quantize_fp8(x, w, group_size=128)
    assert_close_fused(q, s, *FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, 128))
    empty = torch.empty(0, 4096, device="cuda", dtype=torch.bfloat16)
    q, s = FQ.quantize_fp8(empty, 128)
    assert q.shape == (0, 4096) and s.shape == (0, 32)
    with pytest.raises(ValueError, match="quantize_fp8: group_size 96 does not divide"):
        FQ.quantize_fp8(empty[:, :100], 96)
    with pytest.raises(ValueError, match="rms_norm_quantize_fp8: weight must be a CUDA tensor"):
        FQ.rms_norm_quantize_fp8(empty, torch.ones(4096))


def test_scales_are_the_correctly_rounded_quotient():
    """The formula on the GPU divides (torch's CUDA division by a Python number multiplies
    by 1 / 448 instead), so its scales, and the kernels', are amax / 448 rounded once."""
    x = sample(4096, 512, torch.float32, seed=9, specials=False)
    q, s = FQ.quantize_fp8(x, 128)
    amax = x.unflatten(-1, (4, 128)).abs().amax(-1).clamp(min=FQ.AMAX_FLOOR)
    assert torch.equal(s, (amax.double() / 448).float())
    assert_same(q, s, *FQ.quantize_fp8_reference(x, 128))


@pytest.mark.parametrize("k", [2880, 3000, 7168, 5120])
@pytest.mark.parametrize("fused", [False, True], ids=["quantize", "norm"])
def test_rows_of_many_blocks_are_each_written_by_their_own(k, fused):
    """Thousands of rows at once: gpt-oss's 2880 (a 96-thread tile whose last 32 threads once
    wrote part of the next row with their own scale) and DeepSeek-V3's 7168."""
    q, s, ref_q, ref_s = _launch((4096, k), None, fused, None)
    if fused:
        assert_close_fused(q, s, ref_q, ref_s)
    else:
        assert_same(q, s, ref_q, ref_s)


def _launch(shape, group, fused, tile):
    """The kernels of one call (the fused norm's when fused) at `tile` into poisoned outputs:
    (q, scales) and the formula's (q, scales)."""
    m, k = shape
    x = sample(m, k, torch.bfloat16, seed=k)
    q, s = poisoned(x, group, E4M3)
    if fused:
        w = (1 + 0.1 * torch.randn(k, device="cuda")).bfloat16()
        for kernel, args in FQ.rms_norm_quantize_fp8_launches("t", x, w, q, s, 1e-6, group, E4M3, False, tile):
            kernel(*args)
        return (q, s, *FQ.rms_norm_quantize_fp8_reference(x, w, 1e-6, group, E4M3, False))
    for kernel, args in FQ.quantize_fp8_launches("t", x, q, s, group, E4M3, False, tile):
        kernel(*args)
    return (q, s, *FQ.quantize_fp8_reference(x, group, E4M3, False))


@pytest.mark.parametrize("mode,shape,tile", [
    ("group", (4096, 2048), (64, 32)), ("group", (4096, 7168), (128, 32)), ("group", (16384, 4096), (32, 8)),
    ("token", (4096, 4096), (1, 32)), ("token", (4096, 2048), (2, 32)),
    ("norm-group", (4096, 7168), (1, 32)), ("norm-group", (4096, 2048), (2, 32)),
    # one-row tiles of 7168 without padding: 448, 224 and 896 threads, 128 of 56 elements
    ("token", (4096, 7168), (1, 16)), ("token", (4096, 7168), (1, 32)), ("token", (4096, 7168), (1, 8)),
    ("token", (4096, 7168), (1, 56))], ids=str)
def test_benchmark_tiles_match_the_formula(mode, shape, tile):
    """The tiles the benchmark sweeps give the default plan's results."""
    q, s, ref_q, ref_s = _launch(shape, None if mode == "token" else 128, mode == "norm-group", tile)
    if mode == "norm-group":
        assert_close_fused(q, s, ref_q, ref_s)
    else:
        assert_same(q, s, ref_q, ref_s)
