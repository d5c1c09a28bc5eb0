"""The scaled FP8 GEMM (kernels/scaled_gemm.py) on the GPU, against torch computing in float64
from the same 8-bit values and float32 scales (the dequantised operands a · scale_a and
b · scale_b are exact in float64): every scale kind, aligned, ragged and decode-shaped
(split-K) products at real sizes, fresh random inputs, the output poisoned with NaN; NaN in
an input propagates to its row; the entry point's dispatch and empty extents.

Tolerances (relative Frobenius error, float32 output so that only the summation is measured):
the block kind promotes every 128-wide K block into a float32 accumulator, so at most 128
products are summed at the tensor cores' reduced precision (Hopper's fp8 wgmma keeps about
14 bits of the running sum): BLOCK_TOL = 2e-4. The tensor and row kinds sum the whole K on
the tensor cores (torch's fast accumulation), whose error grows with K: TENSOR_TOL = 2e-3,
twice the 1e-3 the TileLang fp8 examples hold K = 8192 to (measured on an H200: 2.1e-3 at K
4096, 2.6e-3 at 8192, 3.1e-3 at 16384, against 1.7e-3 for torch._scaled_mm, which promotes;
the long-K test allows LONG_K_TOL = 5e-3 and shows the block kind at ~1.3e-4). A bfloat16 output adds its own
rounding (2^-9 relative, about 1.2e-3 in Frobenius norm for normal-ish values): + 4e-3.
The errors measured are printed (pytest -s) for comparing the kinds."""
import pytest
import torch

import tegula
from tegula.kernels import scaled_gemm as sg

pytestmark = pytest.mark.gpu

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
BLOCK_TOL, TENSOR_TOL, BF16_EXTRA, LONG_K_TOL = 2e-4, 2e-3, 4e-3, 5e-3


@pytest.fixture(autouse=True)
def needs_sm89():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("8-bit tensor-core instructions need sm_89 or newer")


def quantised(M, N, K, kind, seed, a_dtype=E4, b_dtype=E4):
    """Operands quantised the way their scales say (DeepSeek-V3's per-token 1 x 128 and
    per-block 128 x 128 for the block kind), so that the fp8 values use their range."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=g, device="cuda")
    w = torch.randn(N, K, generator=g, device="cuda") * 0.05
    top = {E4: 448.0, E5: 57344.0}

    def quant(t, dtype, rows, cols):
        R, C = t.shape
        p = torch.zeros(-(-R // rows) * rows, -(-C // cols) * cols, device="cuda")
        p[:R, :C] = t
        v = p.view(p.shape[0] // rows, rows, p.shape[1] // cols, cols)
        s = v.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-4) / top[dtype]
        q = (v / s).to(dtype).view_as(p)[:R, :C].contiguous()
        return q, s.view(s.shape[0], s.shape[2])

    if kind == "tensor":
        a, sa = quant(x, a_dtype, M, K)
        b, sb = quant(w, b_dtype, N, K)
        return a, b, sa.reshape(()), sb.reshape(())
    if kind == "row":
        a, sa = quant(x, a_dtype, 1, K)
        b, sb = quant(w, b_dtype, 1, K)
        return a, b, sa.reshape(M, 1), sb.reshape(1, N)
    a, sa = quant(x, a_dtype, 1, 128)
    b, sb = quant(w, b_dtype, 128, 128)
    return a, b, sa.contiguous(), sb.contiguous()


def reference(a, b, sa, sb, bias=None):
    """float64 from the dequantised operands, the scale of each element expanded to it."""
    M, K = a.shape
    N = b.shape[0]
    if sa.numel() == 1 and sb.numel() == 1:
        ga, gb = sa.reshape(1, 1), sb.reshape(1, 1)
    elif sa.shape in ((M, 1), (M,)) and sb.shape in ((1, N), (N,)):
        ga, gb = sa.reshape(M, 1), sb.reshape(N, 1)
    else:
        ga = sa.repeat_interleave(128, 1)[:, :K]
        gb = sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]
    c = (a.double() * ga.double()) @ (b.double() * gb.double()).T
    return c if bias is None else c + bias.double()


def rel_err(out, ref):
    out = out.double()
    if not torch.isfinite(out).all():
        return float("inf")
    return ((out - ref).norm() / ref.norm()).item()


def launch_poisoned(M, N, K, kind, a, b, sa, sb, bias, out_dtype):
    """The planned program (tile and split-K as fp8_gemm would pick), launched into an output
    full of NaN: an element the kernel forgets to write stays NaN."""
    splits, tile = sg.plan(M, N, K, kind, sms=sg.sm_count(a.device))
    opts = dict(a_dtype=sg.FP8_NAMES[a.dtype], b_dtype=sg.FP8_NAMES[b.dtype], out_dtype=out_dtype,
                has_bias=bias is not None)
    if splits > 1:
        tile.pop("panel_size", None)
        program = sg.fp8_gemm_splitk_program(M, N, K, splits, kind, **opts, **tile)
    else:
        program = sg.fp8_gemm_program(M, N, K, kind, **opts, **tile)
    kernel = tegula.compile(program)
    out = torch.full((M, N), float("nan"), dtype=sg.OUT_DTYPES[out_dtype], device="cuda")
    sa_k, sb_k = sg.kernel_scales(kind, sa, sb, M, N)
    dummy = bias if bias is not None else torch.empty(N, dtype=out.dtype, device="cuda")
    kernel(a, b, sa_k, sb_k, dummy, out)
    return out


def tol(kind, out_dtype):
    base = BLOCK_TOL if kind == "block" else TENSOR_TOL
    return base + (BF16_EXTRA if out_dtype != "float32" else 0.0)


SHAPES = [(1024, 2048, 4096), (1000, 1500, 2000), (512, 7168, 2048), (16, 7168, 2048), (33, 1000, 4112),
          (1, 4096, 4096)]
SHAPE_IDS = ["aligned", "ragged", "wide", "decode16", "decode33-ragged", "decode1"]


@pytest.mark.parametrize("kind", sg.KINDS)
@pytest.mark.parametrize("M,N,K", SHAPES, ids=SHAPE_IDS)
def test_poisoned_output_against_float64(kind, M, N, K):
    a, b, sa, sb = quantised(M, N, K, kind, seed=M + N + K)
    bias = torch.randn(N, device="cuda")
    out = launch_poisoned(M, N, K, kind, a, b, sa, sb, bias, "float32")
    assert not torch.isnan(out).any(), "NaN in the output (unwritten?)"
    err = rel_err(out, reference(a, b, sa, sb, bias))
    print(f"\nfp8_gemm {kind} {M}x{N}x{K}: relative error {err:.2e}")
    assert err < tol(kind, "float32"), err


@pytest.mark.parametrize("kind", sg.KINDS)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_entry_point_half_outputs(kind, out_dtype):
    M, N, K = 777, 1300, 1040
    a, b, sa, sb = quantised(M, N, K, kind, seed=17, b_dtype=E5 if kind == "row" else E4)
    bias = torch.randn(N, device="cuda").to(sg.OUT_DTYPES[out_dtype])
    out = sg.fp8_gemm(a, b, sa, sb, bias, out_dtype=out_dtype)
    assert out.dtype == sg.OUT_DTYPES[out_dtype] and out.shape == (M, N)
    err = rel_err(out, reference(a, b, sa, sb, bias))
    assert err < tol(kind, out_dtype), err


def test_block_kind_more_accurate_than_whole_k_accumulation():
    # Long K, where the tensor cores' reduced-precision sum shows: each kind's error against
    # its own float64 reference (the two quantise the same values differently).
    M, N, K = 1024, 1024, 16384
    errs = {}
    for kind in ("tensor", "block"):
        a, b, sa, sb = quantised(M, N, K, kind, seed=3)
        out = sg.fp8_gemm(a, b, sa, sb, out_dtype="float32")
        errs[kind] = rel_err(out, reference(a, b, sa, sb))
    print(f"\nK={K}: relative error block {errs['block']:.2e}, tensor {errs['tensor']:.2e}")
    assert errs["block"] < BLOCK_TOL and errs["tensor"] < LONG_K_TOL and errs["block"] < errs["tensor"] / 10, errs


@pytest.mark.parametrize("kind", sg.KINDS)
def test_nan_propagates(kind):
    M, N, K = 300, 520, 528
    a, b, sa, sb = quantised(M, N, K, kind, seed=5)
    a.view(torch.uint8)[7, 100] = 0x7F    # NaN in both 8-bit types
    b.view(torch.uint8)[11, 3] = 0x7F
    out = sg.fp8_gemm(a, b, sa, sb, out_dtype="float32")
    nan = torch.isnan(out)
    assert nan[7].all() and nan[:, 11].all()
    nan[7] = False
    nan[:, 11] = False
    assert not nan.any()


def test_nan_scale_propagates():
    M, N, K = 256, 384, 640
    a, b, sa, sb = quantised(M, N, K, "block", seed=6)
    sa[9, 2] = float("nan")
    out = sg.fp8_gemm(a, b, sa, sb, out_dtype="float32")
    assert torch.isnan(out[9]).all() and not torch.isnan(out[10:]).any()


def test_mixed_fp8_types_and_strided_inputs():
    M, N, K = 500, 600, 704
    a, b, sa, sb = quantised(M, N, K, "row", seed=8, a_dtype=E5, b_dtype=E4)
    wide = torch.empty(M, K + 16, dtype=a.dtype, device="cuda")
    wide[:, :K] = a
    out = sg.fp8_gemm(wide[:, :K], b, sa, sb, out_dtype="float32")   # a strided view: copied first
    assert rel_err(out, reference(a, b, sa, sb)) < TENSOR_TOL


def test_empty_extents():
    a = torch.empty(0, 64, dtype=E4, device="cuda")
    b = torch.empty(32, 64, dtype=E4, device="cuda")
    one = torch.ones((), device="cuda")
    assert sg.fp8_gemm(a, b, one, one).shape == (0, 32)
    bias = torch.randn(32, device="cuda").to(torch.bfloat16)
    out = sg.fp8_gemm(torch.empty(4, 0, dtype=E4, device="cuda"), torch.empty(32, 0, dtype=E4, device="cuda"),
                      one, one, bias)
    assert torch.equal(out, bias.expand(4, 32))


def test_agrees_with_torch_scaled_mm():
    # torch._scaled_mm's per-tensor product of the same values (b read as b.t(), column-major).
    M, N, K = 2048, 2048, 2048
    a, b, sa, sb = quantised(M, N, K, "tensor", seed=9)
    try:
        want = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError) as exc:
        pytest.skip(f"torch._scaled_mm unavailable here: {exc}")
    out = sg.fp8_gemm(a, b, sa, sb)
    assert rel_err(out, want.double()) < TENSOR_TOL + 2 * BF16_EXTRA
