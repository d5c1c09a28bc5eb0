"""The scaled FP8 GEMM (kernels/scaled_gemm.py) without a GPU: for every scale kind (per
tensor, per row, DeepSeek-V3's per block) the one-kernel and split-K programs, interpreted
(`reference`) and simulated thread by thread as lowered for sm_90a's wgmma and sm_89's
mma.sync (`simulate`), agree with torch computing in float32 from the same 8-bit values and
scales, on ragged M and N and a K that is a multiple of 16 but not of the 128-wide block;
the generated source holds the wgmma k32 instruction and compiles; the block kind's paired
steps (two K blocks a pipelined step, `pair`), odd step counts included, and where their
waits stand (the first gemm's wait after the second's issue, before the first promotion;
ptxas adds no wait of its own, C7517); the tile rule; the argument errors name the
argument; the operator's fake gives the output's shape and dtype.

Tolerance: both sides sum exact products of 8-bit values (at most 2 x 4 significant bits
each, so every product and these short sums are exact in float32) and then multiply by the
scales in float32; they differ only in the order of a few float32 roundings, so a relative
1e-5 of the largest output (a few float32 ulps of it) bounds the difference, and a missed
or double-counted K block or a wrong scale index gives errors of order one."""
import importlib
import re

import pytest
import torch

import tegula
import tegula.testing as tt

sg = importlib.import_module("tegula.kernels.scaled_gemm")

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
SMALL = dict(block_M=64, block_N=64, block_K=128, num_stages=2, threads=128)
SMALL_SPLIT = dict(block_M=64, block_N=64, block_K=128, num_stages=2, threads=128, combine_M=16, combine_N=64,
                   combine_threads=64)


def operands(M, N, K, kind, seed, a_dtype=E4, b_dtype=E4):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(M, K, generator=g) * 2).to(a_dtype)
    b = (torch.randn(N, K, generator=g) * 2).to(b_dtype)
    sa_shape, sb_shape = sg.scale_shapes(kind, M, N, K)
    sa = torch.rand(sa_shape, generator=g) + 0.25
    sb = torch.rand(sb_shape, generator=g) + 0.25
    return a, b, sa, sb, torch.randn(N, generator=g)


def torch_reference(a, b, sa, sb, kind, bias=None):
    """float32 from the same values: each operand times its scale expanded to its elements."""
    M, K = a.shape
    N = b.shape[0]
    if kind == "tensor":
        ga, gb = sa.reshape(1, 1), sb.reshape(1, 1)
    elif kind == "row":
        ga, gb = sa.reshape(M, 1), sb.reshape(N, 1)
    else:
        ga = sa.repeat_interleave(128, 1)[:, :K]
        gb = sb.repeat_interleave(128, 0).repeat_interleave(128, 1)[:N, :K]
    c = (a.float() * ga) @ (b.float() * gb).T
    return c if bias is None else c + bias.float()


def assert_matches_torch(kernel, M, N, K, kind, seed, a_dtype=E4, b_dtype=E4, runs=(tt.reference, tt.simulate)):
    a, b, sa, sb, bias = operands(M, N, K, kind, seed, a_dtype, b_dtype)
    want = torch_reference(a, b, sa, sb, kind, bias)
    for run in runs:
        out = run(kernel, a, b, sa, sb, bias)
        assert not torch.isnan(out).any()
        torch.testing.assert_close(out, want, rtol=0, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("kind", sg.KINDS)
def test_wgmma_each_kind_ragged(kind):
    # M, N ragged against 64; K = 272 = 2 x 128 + 16: the last block is 16 wide (the rest zero).
    k = tegula.compile(sg.fp8_gemm_program(72, 136, 272, kind, a_dtype="float8_e4m3fn", b_dtype="float8_e5m2",
                                           out_dtype="float32", has_bias=True, **SMALL), out_idx=[-1],
                       target="sm_90a")
    src = k.get_kernel_source()
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" in src
    assert_matches_torch(k, 72, 136, 272, kind, seed=len(kind), b_dtype=E5)
    assert k.cubin()


@pytest.mark.parametrize("K", [272, 400])
def test_wgmma_block_pairs(K):
    # Two K blocks a step: K = 272 is 3 blocks (the last step's second block lies past K,
    # its promotion skipped), K = 400 is 4.
    k = tegula.compile(sg.fp8_gemm_program(72, 136, K, "block", out_dtype="float32", has_bias=True, pair=1,
                                           **SMALL), out_idx=[-1], target="sm_90a")
    assert_matches_torch(k, 72, 136, K, "block", seed=K)
    assert k.cubin()


def consumer_lines(k):
    ir = k.get_ir("final")
    body = ir[[m.start() for m in re.finditer(r"for k in serial", ir)][-1]:]
    return [line.strip() for line in body.splitlines()]


def test_planned_block_kernel_overlaps_promotion_with_the_second_gemm():
    splits, tile = sg.plan(4096, 7168, 2048, "block", wgmma=True, sms=132)
    assert splits == 1 and tile["pair"] == 1
    k = tegula.compile(sg.fp8_gemm_program(4096, 7168, 2048, "block", **tile), out_idx=[-1], target="sm_90a")
    lines = consumer_lines(k)

    def at(pattern):
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    issue0, issue1 = at(r"^wgmma_ss\(.*part\[0\]\)"), at(r"^wgmma_ss\(.*part1\[0\]\)")
    wait0, wait1 = at(r"^wgmma_wait\(part\[0\], 1\)"), at(r"^wgmma_wait\(part1\[0\], 0\)")
    promote0, promote1 = at(r"^acc\[0\] = acc\[0\] \+ part\[0\]"), at(r"^acc\[0\] = acc\[0\] \+ part1\[0\]")
    assert issue0 < issue1 < wait0 < promote0 < wait1 < promote1
    src = k.get_kernel_source()
    assert "tegula::wgmma_wait_regs<1, 64>(&part[0])" in src
    log = k._lowered.compile_log()
    assert "C7517" not in log and "serialized" not in log, log


@pytest.mark.parametrize("K", [592, 1136])
def test_pair_split_k_odd_slices(K):
    # 592: 5 K blocks in slices of 2, 2, 1 (the last one's second block lies past K);
    # 1136: 9 blocks in slices of 3 (each slice's last step reads the next slice's first
    # block, which only that slice may add).
    k = tegula.compile(sg.fp8_gemm_splitk_program(40, 100, K, 3, "block", out_dtype="float32", has_bias=True,
                                                  pair=1, **SMALL_SPLIT), out_idx=[-1], target="sm_90a")
    assert_matches_torch(k, 40, 100, K, "block", seed=13)
    assert k.cubin()


def test_pair_is_for_the_block_kind():
    with pytest.raises(ValueError, match="pair .* block kind only"):
        sg.fp8_gemm_program(64, 64, 256, "tensor", pair=1)


@pytest.mark.parametrize("kind", sg.KINDS)
def test_mma_sync_sm89(kind):
    k = tegula.compile(sg.fp8_gemm_program(80, 70, 144, kind, out_dtype="float32", has_bias=True, **SMALL),
                       out_idx=[-1], target="sm_89")
    src = k.get_kernel_source()
    assert "wgmma" not in src and "tegula::gemm_ss<" in src
    assert_matches_torch(k, 80, 70, 144, kind, seed=5)


@pytest.mark.parametrize("kind", ["tensor", "block"])
def test_split_k(kind):
    # 40 rows (decode-shaped), 5 K blocks in 3 slices (2, 2, 1): the short last slice too.
    k = tegula.compile(sg.fp8_gemm_splitk_program(40, 100, 592, 3, kind, out_dtype="float32", has_bias=True,
                                                  **SMALL_SPLIT), out_idx=[-1], target="sm_90a")
    assert k.num_kernels == 2
    assert_matches_torch(k, 40, 100, 592, kind, seed=9)


def test_promote_every_two_steps():
    # 5 k steps with a promotion every 2: the tail (one step) is added after the loop.
    k = tegula.compile(sg.fp8_gemm_program(64, 64, 592, "row", out_dtype="float32", has_bias=True, promote=2,
                                           **SMALL),
                       out_idx=[-1], target="sm_90a")
    assert_matches_torch(k, 64, 64, 592, "row", seed=11, runs=(tt.simulate,))
    assert k.cubin()


def test_bf16_output_rounds_once():
    k = tegula.compile(sg.fp8_gemm_program(64, 64, 128, "block", out_dtype="bfloat16", has_bias=True, **SMALL),
                       out_idx=[-1], target="sm_90a")
    a, b, sa, sb, bias = operands(64, 64, 128, "block", 3)
    bias = bias.to(torch.bfloat16)
    want = torch_reference(a, b, sa, sb, "block", bias)
    out = tt.simulate(k, a, b, sa, sb, bias)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want, rtol=2 ** -8, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("kind", sg.KINDS)
def test_planned_tiles_compile_for_sm90a(kind):
    for M, N, K in [(4096, 7168, 2048), (16, 7168, 2048)]:
        splits, tile = sg.plan(M, N, K, kind, wgmma=True, sms=132)
        program = (sg.fp8_gemm_splitk_program(M, N, K, splits, kind, **tile) if splits > 1 else
                   sg.fp8_gemm_program(M, N, K, kind, **tile))
        k = tegula.compile(program, out_idx=[-1], target="sm_90a")
        src = k.get_kernel_source()
        assert f"m64n{tile['block_N']}k32.f32.e4m3.e4m3" in src
        assert "setmaxnreg" in src and "tma_load" in src   # warp-specialised, bulk tensor copies
        assert k.cubin()


def test_plan_rule():
    assert sg.plan(4096, 4096, 4096, "tensor", wgmma=True)[1]["block_N"] == 256
    assert sg.plan(4096, 4096, 4096, "block", wgmma=True)[1] == sg.WGMMA_BLOCK
    assert sg.WGMMA_BLOCK["block_N"] == 128 and sg.WGMMA_BLOCK["pair"] == 1
    assert sg.plan(4096, 4096, 4096, "row", wgmma=True, promote=4)[1] == sg.WGMMA_PROMOTE
    assert sg.plan(512, 512, 4096, "tensor", wgmma=True)[1]["block_N"] == 128
    assert sg.plan(16, 7168, 2048, "block", wgmma=True, sms=132) == (4, sg.SPLIT_K_TILE)
    assert sg.plan(16, 7168, 256, "block", wgmma=True, sms=132)[0] == 1     # 2 steps: too short to split
    assert sg.plan(4096, 4096, 4096, "tensor", wgmma=False)[1] == sg.MMA_SYNC_TILE


def test_block_kind_needs_block_k_128():
    with pytest.raises(ValueError, match="block_K must be 128"):
        sg.fp8_gemm_program(64, 64, 256, "block", block_K=64)


# ---- argument checks (meta tensors: shapes and dtypes without memory) ----

def meta(shape, dtype=E4):
    return torch.empty(shape, dtype=dtype, device="meta")


def args(M=64, N=96, K=256, kind="tensor", **over):
    sa, sb = sg.scale_shapes(kind, M, N, K)
    base = dict(a=meta((M, K)), b=meta((N, K)), scale_a=meta(sa, torch.float32), scale_b=meta(sb, torch.float32))
    base.update(over)
    return base


BAD = [
    (dict(a=meta((64, 256), torch.bfloat16)), ValueError, "a must be a tensor of float8_e4m3fn/float8_e5m2"),
    (dict(b=[1, 2]), TypeError, "b must be a torch.Tensor"),
    (dict(b=meta((96, 128))), ValueError, r"b must have shape \(N, 256\)"),
    (dict(a=meta((64, 248)), b=meta((96, 248))), ValueError, "K .* multiple of 16"),
    (dict(scale_a=meta((1,), torch.float16)), ValueError, "scale_a must be a tensor of float32"),
    (dict(scale_a=meta((64, 3), torch.float32)), ValueError, "scale_a must have one element"),
    (dict(scale_a=meta((64, 1), torch.float32)), ValueError, r"scale_b must have shape \(96,\) or \(1, 96\)"),
    (dict(scale_a=meta((64, 2), torch.float32)), ValueError, r"scale_b must have shape \(1, 2\)"),
    (dict(bias=meta((96,), torch.float16)), ValueError, "bias must be a tensor of bfloat16"),
    (dict(bias=meta((95,), torch.bfloat16)), ValueError, r"bias must have shape \(96,\)"),
    (dict(out_dtype="float8_e4m3fn"), ValueError, "out_dtype must be one of"),
]


@pytest.mark.parametrize("over,error,message", BAD, ids=[m[:24] for _, _, m in BAD])
def test_argument_errors_name_the_argument(over, error, message):
    with pytest.raises(error, match=message):
        sg.check_fp8_gemm_args(**args(**over))


def test_devices():
    cpu = args(a=torch.zeros(64, 256).to(E4))
    with pytest.raises(ValueError, match="a must be a CUDA tensor"):
        sg.check_fp8_gemm_args(**cpu)
    with pytest.raises(ValueError, match="scale_b must be a CUDA tensor"):
        sg.fp8_gemm(**args(scale_b=torch.ones(1)))


@pytest.mark.parametrize("kind", sg.KINDS)
def test_scale_kinds_by_shape(kind):
    assert sg.check_fp8_gemm_args(**args(kind=kind))[3] == kind
    # torch's rowwise shapes (M, 1) and (1, N) too; a zero-dim per-tensor scale.
    assert sg.check_fp8_gemm_args(**args(scale_a=meta((64, 1), torch.float32),
                                         scale_b=meta((1, 96), torch.float32)))[3] == "row"
    assert sg.check_fp8_gemm_args(**args(scale_a=meta((), torch.float32)))[3] == "tensor"


@pytest.mark.parametrize("out_dtype", list(sg.OUT_DTYPES))
def test_fake(out_dtype):
    bias = meta((96,), sg.OUT_DTYPES[out_dtype])
    out = sg.fp8_gemm_fake(**args(kind="block", b=meta((96, 256), E5)), bias=bias, out_dtype=out_dtype)
    assert out.shape == (64, 96) and out.dtype == sg.OUT_DTYPES[out_dtype] and out.device.type == "meta"
    with pytest.raises(ValueError, match="K .* multiple of 16"):
        sg.fp8_gemm_fake(**args(a=meta((64, 8)), b=meta((96, 8))))


def test_kernel_for_dispatch_and_config():
    # Decode-shaped M runs split-K (two kernels); splits=1 and tile overrides reach the program.
    assert sg.kernel_for(16, 7168, 2048, "block", E4, E4, sms=132).num_kernels == 2
    assert sg.kernel_for(16, 7168, 2048, "block", E4, E4, sms=132, splits=1).num_kernels == 1
    k = sg.kernel_for(256, 256, 512, "tensor", E4, E5, "float16", True, sms=132, block_N=64, num_stages=2)
    assert k.num_kernels == 1 and "e4m3.e5m2" in k.get_kernel_source()
