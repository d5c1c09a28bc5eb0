"""w4a16_gemm without a GPU: the decode program (weight rows as the tensor-core M, K read in
k_slot's order, split-K) and the prefill program (B tiles dequantized into shared memory),
each simulated thread by thread on small ragged shapes for every weight format, against
torch computing x @ Wᵀ in float32 from the exactly dequantized W; extreme scales; the
generated code compiles for sm_90a and sm_80 at Llama-3-8B's MLP sizes; the entry point's
dispatch run end to end with simulated kernels; the quantization helpers; argument errors
naming the argument; the fake."""
import importlib

import pytest
import torch

import tegula
import tegula.testing as tt

dg = importlib.import_module("tegula.kernels.dequant_gemm")

# Tiles small enough to simulate; 64 weight rows (decode) and 64 token rows (prefill) keep
# sm_90a on wgmma (its smallest M).
DECODE_TILE = dict(block_N=64, block_K=64, chunk_K=64, num_stages=2, threads=128, combine_N=64, combine_threads=64)
# A stage of several dequantize-and-mma chunks (what DECODE_CONFIG does at 256 / 128).
DECODE_CHUNKED = dict(DECODE_TILE, block_K=128, chunk_K=32)
PREFILL_TILE = dict(block_M=64, block_N=32, block_K=64, num_stages=2, threads=128)
# Unit roundoff of the output dtype: W is rounded once to it (the scale multiply) and y once.
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
# ... and outputs in the subnormal range round to a fixed grid: half its step.
SUBNORMAL_HALF_STEP = {torch.float16: 2.0 ** -25, torch.bfloat16: 2.0 ** -134}


def make_weights(N, K, group_size, fmt, dtype, gen, scale_exp=None):
    """(qweight, scales, zeros) of random codes: fmt "int4", "int4_zeros", "fp4_e8m0" or
    "fp4_e4m3". scale_exp: every scale 2^scale_exp (extreme-scale tests)."""
    G = -(-K // (K if group_size == -1 else group_size))
    q = dg.pack_int4(torch.randint(0, 16, (N, K), generator=gen))
    zeros = None
    if fmt.startswith("int4"):
        s = torch.rand(N, G, generator=gen) * 0.1 + 0.01
        if scale_exp is not None:
            s = torch.full((N, G), 2.0 ** scale_exp)
        scales = s.to(dtype)
        if fmt == "int4_zeros":
            zeros = torch.randint(0, 16, (N, G), generator=gen, dtype=torch.uint8)
    elif fmt == "fp4_e8m0":
        e = torch.randint(120, 130, (N, G), generator=gen) if scale_exp is None else torch.full((N, G), 127 + scale_exp)
        scales = e.to(torch.uint8).view(torch.float8_e8m0fnu)
    else:
        scales = (torch.rand(N, G, generator=gen) * 2 + 0.05).to(torch.float8_e4m3fn)
    return q, scales, zeros


def assert_matches(out, x, q, scales, zeros, group_size, weight_format, what=""):
    """|out - ref| within one rounding of W and one of y to x's dtype (see UNIT)."""
    assert not torch.isnan(out.float()).any(), f"{what}: an output element was never written (still poisoned)"
    w = dg.dequantize(q, scales, zeros, group_size, weight_format)
    ref = x.float() @ w.t()
    bound = UNIT[x.dtype] * (ref.abs() + x.float().abs() @ w.abs().t()) * 1.01 + SUBNORMAL_HALF_STEP[x.dtype]
    err = (out.float() - ref).abs()
    assert (err <= bound).all(), f"{what}: max error {err.max().item():.3g}, worst excess {(err - bound).max():.3g}"


def _formats(fmt):
    """(weight_format, scale kind, zero dtype) of a make_weights format for dtype x."""
    return {"int4": ("int4", "dtype", None), "int4_zeros": ("int4", "dtype", "uint8"),
            "fp4_e8m0": ("fp4", "e8m0", None), "fp4_e4m3": ("fp4", "e4m3", None)}[fmt]


def _run(M, N, K, group_size, fmt, dtype, target, path, splits=1, seed=0, scale_exp=None, float32_scales=False):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=gen).to(dtype)
    q, scales, zeros = make_weights(N, K, group_size, fmt, dtype, gen, scale_exp)
    if float32_scales:
        scales = scales.float()
    weight_format, kind, zero_dtype = _formats(fmt)
    if float32_scales:
        kind = "float32"
    group = K if group_size == -1 else group_size
    common = dict(weight_format=weight_format, scale=kind, zero_dtype=zero_dtype, dtype=dg.dtype_name(dtype))
    if path == "decode":
        program = dg.decode_program(M, N, K, group, splits, **common, **DECODE_TILE)
    else:
        program = dg.prefill_program(M, N, K, group, **common, **PREFILL_TILE, splits=splits)
    kernel = tegula.compile(program, out_idx=[-1], target=target)
    z = zeros if zeros is not None else torch.zeros(1, dtype=torch.uint8)
    magic = dg.magic_value(weight_format, zeros is not None, dg.dtype_name(dtype))
    out = tt.simulate(kernel, x, q, scales, z, magic)
    return out, x, q, scales, zeros, weight_format


@pytest.mark.parametrize("M,N,K,group_size,fmt,dtype,target,path,splits", [
    (1, 64, 128, 128, "int4", torch.float16, "sm_90a", "decode", 1),
    (5, 72, 256, 64, "int4", torch.bfloat16, "sm_90a", "decode", 2),        # ragged N, two K slices
    (16, 64, 256, 32, "int4_zeros", torch.float16, "sm_80", "decode", 2),
    (3, 72, 200, 32, "fp4_e8m0", torch.bfloat16, "sm_90a", "decode", 1),    # ragged K (a partial step)
    (8, 64, 320, 16, "fp4_e4m3", torch.float16, "sm_90a", "decode", 3),     # slices of 2, 2 and 1 steps
    (5, 64, 256, -1, "int4", torch.float16, "sm_80", "decode", 1),          # one scale a row
    (40, 72, 256, 128, "int4", torch.float16, "sm_90a", "decode", 2),       # the decode program up to 64 tokens
    (64, 64, 128, 32, "fp4_e8m0", torch.bfloat16, "sm_80", "decode", 1),
    (40, 72, 256, 128, "int4", torch.float16, "sm_90a", "prefill", 1),
    (40, 64, 128, 32, "int4_zeros", torch.bfloat16, "sm_80", "prefill", 1),
    (17, 72, 256, 32, "fp4_e8m0", torch.float16, "sm_90a", "prefill", 1),
    (40, 64, 200, 16, "fp4_e4m3", torch.bfloat16, "sm_90a", "prefill", 1),
    (70, 72, 320, 32, "int4_zeros", torch.float16, "sm_90a", "prefill", 3),  # split-K prefill, ragged M and N
    (33, 64, 256, 128, "int4", torch.bfloat16, "sm_80", "prefill", 2),
])
def test_programs_simulated_match_torch(M, N, K, group_size, fmt, dtype, target, path, splits):
    out, x, q, scales, zeros, weight_format = _run(M, N, K, group_size, fmt, dtype, target, path, splits)
    assert out.shape == (M, N) and out.dtype == dtype
    assert_matches(out, x, q, scales, zeros, group_size, weight_format, f"{path} {fmt} {target}")


@pytest.mark.parametrize("M,N,K,group_size,fmt,dtype,target,splits,pipeline", [
    (5, 72, 520, 64, "int4", torch.bfloat16, "sm_90a", 2, "auto"),      # 4 chunks a stage, a ragged last stage
    (16, 64, 384, 32, "int4_zeros", torch.float16, "sm_80", 1, "auto"),
    (3, 64, 256, 16, "fp4_e4m3", torch.bfloat16, "sm_90a", 1, "legacy"),  # cp.async pipeline
    (9, 72, 512, 128, "fp4_e8m0", torch.float16, "sm_90a", 2, "auto"),  # a group spans several chunks
    (5, 72, 520, 64, "int4", torch.bfloat16, "sm_90a", 2, "mma"),       # the shipped pipeline: mma.sync
    (16, 64, 384, 32, "int4_zeros", torch.float16, "sm_90a", 1, "mma"),
    (9, 72, 512, 128, "fp4_e8m0", torch.bfloat16, "sm_90a", 2, "mma"),
    (3, 64, 256, 16, "fp4_e4m3", torch.float16, "sm_90a", 1, "mma"),
])
def test_decode_chunked_stages_simulated(M, N, K, group_size, fmt, dtype, target, splits, pipeline):
    """Stages of block_K columns run as several chunk_K dequantize-and-mma passes, on each
    pipeline (DECODE_JITS' pass configs)."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(M, K, generator=gen).to(dtype)
    q, scales, zeros = make_weights(N, K, group_size, fmt, dtype, gen)
    weight_format, kind, zero_dtype = _formats(fmt)
    program = dg.decode_program(M, N, K, group_size, splits, weight_format=weight_format, scale=kind,
                                zero_dtype=zero_dtype, dtype=dg.dtype_name(dtype), **DECODE_CHUNKED)
    configs = {"auto": {}, "legacy": dg.LEGACY, "mma": dg.MMA}[pipeline]
    kernel = tegula.compile(program, out_idx=[-1], target=target, pass_configs=configs)
    source = kernel.get_kernel_source()
    assert ("wgmma" in source) == (target == "sm_90a" and pipeline != "mma")
    # a register's two weights built by one 32-bit operation and stored whole
    assert "*reinterpret_cast<unsigned*>(&W_f[" in source
    z = zeros if zeros is not None else torch.zeros(1, dtype=torch.uint8)
    magic = dg.magic_value(weight_format, zeros is not None, dg.dtype_name(dtype))
    out = tt.simulate(kernel, x, q, scales, z, magic)
    assert_matches(out, x, q, scales, zeros, group_size, weight_format, f"chunked {fmt} {target} {pipeline}")
    # the program's meaning (the reference interpreter) agrees bit for bit
    assert torch.equal(tt.reference(kernel, x, q, scales, z, magic), out)


@pytest.mark.parametrize("post_scale", [True, False])
def test_decode_post_scale_both_ways(post_scale):
    """Scales after the mma (a second fp32 accumulator) or before (on the weights): both
    within the bound; the generated code differs as described."""
    gen = torch.Generator().manual_seed(8)
    M, N, K = 4, 64, 256
    x = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    q, scales, zeros = make_weights(N, K, 64, "int4_zeros", torch.bfloat16, gen)
    program = dg.decode_program(M, N, K, 64, 1, zero_dtype="uint8", dtype="bfloat16", post_scale=post_scale,
                                **DECODE_CHUNKED)
    kernel = tegula.compile(program, out_idx=[-1], target="sm_90a")
    assert ("(part[0] * " in kernel.get_kernel_source()) == post_scale
    out = tt.simulate(kernel, x, q, scales, zeros, dg.magic_value("int4", True, "bfloat16"))
    assert_matches(out, x, q, scales, zeros, 64, "int4", f"post_scale={post_scale}")


def test_decode_tile_errors():
    with pytest.raises(ValueError, match="post_scale"):
        dg.decode_program(1, 64, 256, 32, weight_format="fp4", scale="e8m0", post_scale=True)
    with pytest.raises(ValueError, match="post_scale"):
        dg.decode_program(1, 64, 256, 64, chunk_K=128, block_K=256, post_scale=True)
    with pytest.raises(ValueError, match="chunk_K"):
        dg.decode_program(1, 64, 256, 32, block_K=192, chunk_K=128)
    with pytest.raises(ValueError, match="chunk_K"):
        dg.decode_program(1, 64, 256, 32, block_K=128, chunk_K=48)


@pytest.mark.parametrize("fmt", ["int4_zeros", "fp4_e4m3"])
def test_decode_scales_read_from_global(monkeypatch, fmt):
    """Scales too many for the shared slice copy are read from global memory in the loop."""
    monkeypatch.setattr(dg, "SLICE_SCALE_BYTES", 0)
    out, x, q, scales, zeros, weight_format = _run(5, 72, 256, 16, fmt, torch.float16, "sm_90a", "decode", 2)
    assert_matches(out, x, q, scales, zeros, 16, weight_format, fmt)


@pytest.mark.parametrize("path", ["decode", "prefill"])
def test_float32_scales(path):
    out, x, q, scales, zeros, fmt = _run(5 if path == "decode" else 33, 64, 128, 32, "int4", torch.float16, "sm_90a",
                                         path, float32_scales=True)
    assert scales.dtype == torch.float32
    assert_matches(out, x, q, scales, zeros, 32, fmt, path)


@pytest.mark.parametrize("fmt,exp", [("int4", -20), ("int4", 20), ("fp4_e8m0", -20), ("fp4_e8m0", 20),
                                     ("int4_zeros", -20)])
def test_extreme_scales_bfloat16(fmt, exp):
    """Scales of 2^-20 and 2^20: bf16 holds the weights (fp16 would not hold 7 * 2^20)."""
    out, x, q, scales, zeros, weight_format = _run(3, 64, 128, 32, fmt, torch.bfloat16, "sm_90a", "decode",
                                                   scale_exp=exp)
    assert_matches(out, x, q, scales, zeros, 32, weight_format, f"2^{exp}")
    assert out.float().abs().max() > 0


@pytest.mark.parametrize("path", ["decode", "prefill"])
def test_extreme_small_scales_float16(path):
    """2^-20 is an fp16 subnormal, and so are the weights q 2^-20 (exact) and most outputs
    (rounded to the subnormal grid, half of 2^-24 at most)."""
    out, x, q, scales, zeros, fmt = _run(3 if path == "decode" else 20, 64, 128, 32, "int4", torch.float16,
                                         "sm_90a", path, scale_exp=-20)
    assert_matches(out, x, q, scales, zeros, 32, fmt, "2^-20")
    assert out.float().abs().max() > 0


def test_k_slots_cover_each_step_once():
    for block_K in (32, 64, 128, 256):
        cols = sorted(dg.k_column(j, block_K) for j in range(block_K))
        assert cols == list(range(block_K)), block_K
        # a lane's weights (q = (j % 8) // 2) lie in block_K / 32 consecutive words
        for q in range(4):
            words = {dg.k_slot(j, block_K)[0] for j in range(block_K) if (j % 8) // 2 == q}
            assert words == set(range(q * block_K // 32, (q + 1) * block_K // 32))
        # a register's two weights (k indices 2 i, 2 i + 1) are the codes 16 bits apart in
        # one word: nibbles p and p + 4 of the same word
        for j in range(0, block_K, 2):
            (w0, p0, e0), (w1, p1, e1) = dg.k_slot(j, block_K), dg.k_slot(j + 1, block_K)
            assert (w0, p0, e0, e1) == (w1, p1, 0, 1) and p0 < 4
            assert dg.k_column(j + 1, block_K) == dg.k_column(j, block_K) + 4


def test_decode_splits_rule():
    assert dg.decode_splits(14336, 4096, 132) == 1       # 112 tiles of 128 rows: unsplit
    assert dg.decode_splits(4096, 14336, 132) == 8       # 32 tiles: nearest two blocks an SM
    assert dg.decode_splits(4096, 4096, 132) == 4        # at least DECODE_MIN_STEPS steps a slice
    assert dg.decode_splits(14336, 4096, 132, block_N=64) == 1
    assert dg.decode_splits(4096, 14336, 132, block_N=64) == 4
    assert dg.decode_splits(12800, 4096, 132) == 1       # 100 tiles: three quarters of the SMs
    assert dg.decode_splits(12288, 4096, 132) == 3       # 96: under them, nearest two blocks an SM
    assert dg.decode_splits(64, 256, 132) == 1
    assert dg.prefill_splits(64, 4096, 4096, 132, block_M=64) == 4
    assert dg.prefill_splits(512, 4096, 4096, 132) == 1
    for N, K in [(4096, 14336), (14336, 4096), (1000, 4100)]:
        s = dg.decode_splits(N, K, 132)
        steps = -(-K // dg.DECODE_CONFIG["block_K"])
        per = -(-steps // s)
        assert (s - 1) * per < steps    # every slice non-empty


def test_decode_tile_narrows_where_the_slice_scales_do_not_fit():
    """128 rows by default; 64 where 128 rows of the slice's scales would pass shared
    memory's share (fp4 group 32 over an unsplit K of 4096: 128 groups a row), so the loop
    never reads a scale from global memory; a tile the caller names is kept."""
    bf16 = torch.bfloat16
    cfg, splits, pipeline = dg.decode_tile(1, 14336, 4096, bf16, 128, sms=132)
    assert (cfg["block_N"], cfg["threads"], splits, pipeline) == (128, 256, 1, "mma")
    cfg, splits, _ = dg.decode_tile(1, 14336, 4096, bf16, 32, "fp4", "e8m0", sms=132)
    assert (cfg["block_N"], cfg["threads"], splits) == (64, 128, 1)
    assert dg._decode_scales_fit(4096, 32, 1, cfg, "fp4", "e8m0", None, bf16)
    cfg, splits, _ = dg.decode_tile(1, 4096, 14336, bf16, 32, "fp4", "e8m0", sms=132)   # 8 slices: fits
    assert (cfg["block_N"], splits) == (128, 8)
    cfg, _, _ = dg.decode_tile(1, 14336, 4096, bf16, 32, "fp4", "e8m0", sms=132, block_N=128, threads=256)
    assert cfg["block_N"] == 128
    # off mma.sync, one warpgroup (two wgmma consumer warpgroups are refused)
    for pipeline in ("auto", "legacy"):
        cfg, splits, _ = dg.decode_tile(1, 4096, 14336, bf16, 128, sms=132, pipeline=pipeline)
        assert (cfg["block_N"], cfg["threads"], splits) == (64, 128, 4)
    with pytest.raises(ValueError, match="threads must be 128, or 256 with mma_sync=True"):
        dg.decode_program(1, 4096, 4096, 128, 1, **dg.DECODE_CONFIG)
    program = dg.decode_program(1, 14336, 4096, 32, 1, weight_format="fp4", scale="e8m0", dtype="bfloat16",
                                **dg.decode_tile(1, 14336, 4096, bf16, 32, "fp4", "e8m0", sms=132)[0])
    assert "S_blk[" in tegula.compile(program, out_idx=[-1], target="sm_90a", pass_configs=dg.MMA).get_kernel_source()


@pytest.mark.parametrize("M,N,K", [(1, 14336, 4096), (16, 4096, 14336), (64, 4096, 14336), (256, 4096, 14336)])
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_compiles_at_model_sizes(M, N, K, target):
    if M <= dg.DECODE_MAX_M:
        program = dg.decode_program(M, N, K, 128, dg.decode_splits(N, K, 132), **dg.DECODE_CONFIG, mma_sync=True)
    else:
        cfg = dg.prefill_config(M)
        splits = dg.prefill_splits(M, N, K, 132, cfg["block_M"], cfg["block_N"], cfg["block_K"])
        assert splits == {64: 4, 256: 2}[M]      # 32 and 64 tiles on 132 SMs
        program = dg.prefill_program(M, N, K, 128, **cfg, splits=splits)
    decode = M <= dg.DECODE_MAX_M
    # the decode program as w4a16_gemm compiles it: cp.async and mma.sync (DECODE_PIPELINE)
    kernel = tegula.compile(program, out_idx=[-1], target=target, pass_configs=dg.MMA if decode else {})
    assert len(kernel.cubin()) > 0
    source = kernel.get_kernel_source()
    assert ("wgmma" in source) == (target == "sm_90a" and not decode)
    assert "tma_load" not in source if decode else True
    if decode:
        assert dg.DECODE_PIPELINE == "mma"
        assert "*reinterpret_cast<unsigned*>(&W_f[" in source
        # the warp-specialised TMA pipeline on wgmma ("auto"): X's reordered tile is stored
        # by the threads and read by wgmma, so it is fenced; the boxes fit TMA's limit
        auto = tegula.compile(program, out_idx=[-1], target=target).get_kernel_source()
        assert ("fence_proxy_async" in auto) == ("tma_load" in auto) == ("wgmma" in auto) == (target == "sm_90a")


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_dequant_program_compiles_with_vector_stores(target):
    program = dg.dequant_program(14336, 4096, 128, dtype="bfloat16", **dg.DEQUANT_CONFIG)
    kernel = tegula.compile(program, out_idx=[-1], target=target)
    assert len(kernel.cubin()) > 0
    assert "Vec<bfloat16_t, 8>*>(&W[" in kernel.get_kernel_source()


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_legacy_pipeline_simulated(target):
    gen = torch.Generator().manual_seed(1)
    M, N, K = 5, 72, 256
    x = torch.randn(M, K, generator=gen).half()
    q, s, z = make_weights(N, K, 32, "int4_zeros", torch.float16, gen)
    program = dg.decode_program(M, N, K, 32, 2, zero_dtype="uint8", **DECODE_TILE)
    kernel = tegula.compile(program, out_idx=[-1], target=target, pass_configs=dg.LEGACY)
    assert "tma_load" not in kernel.get_kernel_source()
    out = tt.simulate(kernel, x, q, s, z, dg.magic_value("int4", True, "float16"))
    assert_matches(out, x, q, s, z, 32, "int4", f"legacy {target}")


def test_fp4_formats_compile():
    for fmt, kind in [("fp4", "e8m0"), ("fp4", "e4m3"), ("int4", "float32")]:
        program = dg.decode_program(1, 4096, 4096, 32, 2, weight_format=fmt, scale=kind, **dg.DECODE_CONFIG,
                                    mma_sync=True)
        assert len(tegula.compile(program, out_idx=[-1], target="sm_90a", pass_configs=dg.MMA).cubin()) > 0


# ---- the entry point, with every kernel simulated ----

@pytest.fixture
def simulated(monkeypatch):
    """kernel_for's real choice of program and split count, on small tiles, run by the
    simulator; records the calls."""
    calls = []

    def kernel_for(M, N, K, dtype, group_size, weight_format="int4", scale="dtype", zero_dtype=None, sms=None,
                   path=None, **config):
        path = path or ("decode" if M <= dg.DECODE_MAX_M else "prefill")
        common = dict(weight_format=weight_format, scale=scale, zero_dtype=zero_dtype, dtype=dg.dtype_name(dtype))
        if path == "decode":
            splits = dg.decode_splits(N, K, sms, DECODE_TILE["block_N"], DECODE_TILE["block_K"])
            program = dg.decode_program(M, N, K, group_size, splits, **common, **DECODE_TILE)
        else:
            splits = dg.prefill_splits(M, N, K, sms, PREFILL_TILE["block_M"], PREFILL_TILE["block_N"],
                                       PREFILL_TILE["block_K"])
            program = dg.prefill_program(M, N, K, group_size, **common, **PREFILL_TILE, splits=splits,
                                         combine_N=64, combine_threads=64)
        calls.append((path, splits))
        k = tegula.compile(program, out_idx=[-1], target="sm_90a")
        return lambda *args: tt.simulate(k, *args)

    monkeypatch.setattr(dg, "kernel_for", kernel_for)
    monkeypatch.setattr(dg, "PREFILL_MODE", "fused")
    return calls


def test_prefill_dequant_mode_simulated(monkeypatch):
    """PREFILL_MODE "dequant": dequant_program's W (simulated) times x through the gemm
    module's matmul (here torch in float32, rounded once, as the GEMM's fp32 accumulation)."""
    calls = []

    def dequant_kernel_for(N, K, dtype, group_size, weight_format="int4", scale="dtype", zero_dtype=None, **config):
        calls.append(config)
        program = dg.dequant_program(N, K, group_size, weight_format, scale, zero_dtype, dtype=dg.dtype_name(dtype),
                                     **dict(dict(block_N=16, block_K=128, threads=128), **config))
        k = tegula.compile(program, out_idx=[-1], target="sm_90a")
        return lambda *args: tt.simulate(k, *args)

    class Gemm:
        @staticmethod
        def matmul(a, b):
            assert b.stride(0) == 1            # W (N, K) read transposed in place
            return (a.float() @ b.float()).to(a.dtype)

    monkeypatch.setattr(dg, "dequant_kernel_for", dequant_kernel_for)
    monkeypatch.setattr(dg, "_gemm", lambda: Gemm)
    gen = torch.Generator().manual_seed(4)
    M, N, K = 20, 40, 200
    x = torch.randn(M, K, generator=gen).bfloat16()
    q, scales, zeros = make_weights(N, K, 32, "int4_zeros", torch.bfloat16, gen)
    out = dg._product(x, q, scales, zeros, 32, "int4", "dtype", sms=8, dequant_block_K=64)
    assert calls == [{"block_K": 64}]
    assert_matches(out, x, q, scales, zeros, 32, "int4", "dequant mode")
    with pytest.raises(ValueError, match="prefill_mode"):
        dg._product(x, q, scales, zeros, 32, "int4", "dtype", sms=8, prefill_mode="unfused")


@pytest.mark.parametrize("fmt,dtype,group_size,N,K", [("int4", torch.bfloat16, 32, 40, 200),
                                                      ("int4_zeros", torch.float16, 64, 72, 256),
                                                      ("fp4_e8m0", torch.bfloat16, 32, 33, 130),
                                                      ("fp4_e4m3", torch.float16, 16, 64, 256),
                                                      ("int4", torch.float16, -1, 24, 136)])
def test_dequant_program_is_exact(fmt, dtype, group_size, N, K):
    """dequant_program's W is the exact dequantized weight rounded once to x's dtype
    (ragged N and K, every format)."""
    gen = torch.Generator().manual_seed(6)
    q, scales, zeros = make_weights(N, K, group_size, fmt, dtype, gen)
    weight_format, kind, zero_dtype = _formats(fmt)
    group = K if group_size == -1 else group_size
    program = dg.dequant_program(N, K, group, weight_format, kind, zero_dtype, dtype=dg.dtype_name(dtype), block_N=16,
                                 block_K=128, threads=128)
    kernel = tegula.compile(program, out_idx=[-1], target="sm_90a")
    z = zeros if zeros is not None else torch.zeros(1, dtype=torch.uint8)
    out = tt.simulate(kernel, q, scales, z, dg.magic_value(weight_format, zeros is not None, dg.dtype_name(dtype)))
    ref = dg.dequantize(q, scales, zeros, group_size, weight_format).to(dtype)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("M,fmt,qdtype,zdtype", [(2, "int4_zeros", torch.int8, torch.int32),
                                                 (9, "int4_zeros", torch.uint8, torch.float16),
                                                 (20, "fp4_e8m0", torch.float4_e2m1fn_x2, None),
                                                 (4, "fp4_e8m0_uint8", torch.uint8, None)])
def test_entry_dispatch_simulated(simulated, M, fmt, qdtype, zdtype):
    gen = torch.Generator().manual_seed(3)
    N, K = 72, 512
    x = torch.randn(M, K, generator=gen).half()
    q, scales, zeros = make_weights(N, K, 32, fmt.replace("_uint8", ""), torch.float16, gen)
    if fmt.endswith("uint8"):
        scales = scales.view(torch.uint8)        # e8m0 bits as plain bytes
    if zdtype is not None:
        zeros = zeros.to(zdtype)                 # zero points as int32 or x's dtype
    q = q.view(qdtype)
    weight_format = fmt.split("_")[0]
    _, _, _, group, kind = dg.check_w4a16_gemm_args(x.to("meta"), q.to("meta"), scales.to("meta"),
                                                     None if zeros is None else zeros.to("meta"), 32, weight_format)
    out = dg._product(x, q, scales, zeros, group, weight_format, kind, sms=8)
    assert simulated[0][0] == ("decode" if M <= 16 else "prefill")
    assert simulated[0][1] > 1                    # 2 or 3 n tiles on 4 SMs: K is split
    assert_matches(out, x, q, scales, zeros, 32, weight_format, fmt)


def test_empty_extents_give_zeros():
    x = torch.randn(0, 64).half()
    q = torch.zeros(8, 32, dtype=torch.uint8)
    s = torch.ones(8, 2).half()
    out = dg._product(x, q, s, None, 32, "int4", "dtype", sms=4)
    assert out.shape == (0, 8)


# ---- helpers ----

def test_pack_int4_order_matches_the_language():
    q = torch.randint(-8, 8, (6, 20))
    packed = dg.pack_int4(q)
    assert packed.shape == (6, 10) and packed.dtype == torch.uint8
    assert torch.equal(tt.unpack_4bit(packed, "int4"), q.double())
    assert torch.equal(packed, tt.pack_4bit(q, "int4"))


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group_size", [32, 128, -1])
def test_quantize_int4_round_trip(symmetric, group_size):
    w = torch.randn(16, 256).half()
    q, s, z = dg.quantize_int4(w, group_size, symmetric=symmetric)
    G = 1 if group_size == -1 else 256 // group_size
    assert q.shape == (16, 128) and s.shape == (16, G) and s.dtype == torch.float16
    assert (z is None) == symmetric
    w_hat = dg.dequantize(q, s, z, group_size)
    # round to nearest: at most half a step (s / 2) off, plus the scale's own rounding
    step = s.float().repeat_interleave(256 if group_size == -1 else group_size, 1)
    assert ((w_hat - w.float()).abs() <= 0.5 * step * 1.01 + 8 * step * 2 ** -11).all()


@pytest.mark.parametrize("scale_format,group_size", [("e8m0", 32), ("e4m3", 16)])
def test_quantize_fp4_round_trip(scale_format, group_size):
    w = torch.randn(8, 128)
    q, s = dg.quantize_fp4(w, group_size, scale_format)
    assert s.dtype == (torch.float8_e8m0fnu if scale_format == "e8m0" else torch.float8_e4m3fn)
    # the codes are torch's float4_e2m1fn_x2 packing
    codes = tt.unpack_4bit(q.view(torch.float4_e2m1fn_x2), "float4_e2m1fn")
    w_hat = dg.dequantize(q, s, None, group_size, "fp4")
    sf = s.float().repeat_interleave(group_size, 1)
    assert torch.equal(w_hat, codes.float() * sf)
    # within half an e2m1 step (1 at most, times the scale), or for MX's scale, whose
    # |w| / s reaches 8, the saturation of (6, 8) to 6
    assert ((w_hat - w).abs() <= sf * (2.0 if scale_format == "e8m0" else 1.0) + 1e-6).all()


# ---- arguments ----

def _args(**over):
    a = dict(x=torch.randn(4, 64).half(), qweight=torch.zeros(8, 32, dtype=torch.uint8),
             scales=torch.ones(8, 2).half(), zeros=None, group_size=32, weight_format="int4")
    a.update(over)
    return a


@pytest.mark.parametrize("over,exc,names", [
    (dict(x=torch.randn(4, 64)), ValueError, "x"),
    (dict(x=[1.0]), TypeError, "x"),
    (dict(qweight=torch.zeros(8, 32, dtype=torch.int32)), ValueError, "qweight"),
    (dict(qweight=torch.zeros(8, 31, dtype=torch.uint8)), ValueError, "qweight"),
    (dict(x=torch.randn(4, 63).half(), qweight=torch.zeros(8, 31, dtype=torch.uint8)), ValueError, "qweight"),
    (dict(scales=torch.ones(8, 3).half()), ValueError, "scales"),
    (dict(scales=torch.ones(8, 2).bfloat16()), ValueError, "scales"),
    (dict(zeros=torch.zeros(8, 3, dtype=torch.uint8)), ValueError, "zeros"),
    (dict(zeros=torch.zeros(8, 2, dtype=torch.float64)), ValueError, "zeros"),
    (dict(group_size=0), ValueError, "group_size"),
    (dict(group_size=33), ValueError, "group_size"),
    (dict(group_size=32.0), TypeError, "group_size"),
    (dict(weight_format="int8"), ValueError, "weight_format"),
    (dict(weight_format="fp4"), ValueError, "scales"),                      # fp16 scales are not fp4's
    (dict(weight_format="fp4", scales=torch.ones(8, 2, dtype=torch.uint8),
          zeros=torch.zeros(8, 2, dtype=torch.uint8)), ValueError, "zeros"),
])
def test_argument_errors_name_the_argument(over, exc, names):
    a = _args(**over)
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in a.items()}
    with pytest.raises(exc, match=names):
        dg.check_w4a16_gemm_args(**meta)


def test_cpu_tensors_are_refused():
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        dg.w4a16_gemm(**_args())


@pytest.mark.parametrize("M", [1, 16, 40])
def test_fake_shapes(M):
    a = _args(x=torch.randn(M, 64, dtype=torch.bfloat16, device="meta"),
              qweight=torch.zeros(24, 32, dtype=torch.uint8, device="meta"),
              scales=torch.ones(24, 1, dtype=torch.float8_e4m3fn, device="meta"),
              group_size=-1, weight_format="fp4")
    out = dg.w4a16_gemm_fake(**a)
    assert out.shape == (M, 24) and out.dtype == torch.bfloat16 and out.device.type == "meta"
    with pytest.raises(ValueError, match="scales"):
        dg.w4a16_gemm_fake(**dict(a, scales=torch.ones(24, 2, dtype=torch.float8_e4m3fn, device="meta")))
