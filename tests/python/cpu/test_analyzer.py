"""tegula.tools.Analyzer without a GPU: its FLOPs and bytes equal the closed-form counts of
what the shipped kernels execute (GEMM and split-K GEMM, attention forward causal and not,
RMSNorm, flash decoding with per-sequence lengths), occupancy equals a hand computation,
the roofline fractions follow from a given time, and the roofline plot puts each kernel
at its coordinates. The counting rules are in src/analysis/work_counts.h."""
import importlib
import math

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

from tegula.tools import Analyzer  # noqa: E402
from tegula.tools import hardware  # noqa: E402
from tegula.tools.analyzer import AnalysisResult  # noqa: E402
from tegula.tools.roofline_plot import plot_roofline  # noqa: E402

gemm = importlib.import_module("tegula.kernels.gemm")
fa = importlib.import_module("tegula.kernels.flash_attention")
fd = importlib.import_module("tegula.kernels.flash_decoding")
rmsnorm = importlib.import_module("tegula.kernels.rmsnorm")
transpose_module = importlib.import_module("tegula.kernels.matrix_transpose")
from tegula.kernels._common import plan_rows  # noqa: E402


def cdiv(a, b):
    return -(-a // b)


# ---- GEMM ----

# (M, N, K): aligned, ragged in every extent, and narrower than one tile.
GEMM_SHAPES = [(256, 256, 256), (1000, 1000, 1000), (300, 500, 136), (64, 80, 48)]
TILE = dict(block_M=128, block_N=128, block_K=64, num_stages=3, threads=128)


def gemm_counts(M, N, K, bM, bN, bK, epilogue="none"):
    """What matmul_program executes, block by block (float16 operands, 2 bytes):
    - tensor FLOPs: every (N tile, M tile) block runs ceil(K/bK) products of bM x bN x bK,
      whole tiles even at a ragged edge (the copies zero-fill): 2·bM·bN·bK each;
    - A: each block reads its rows' in-bounds part of A, all K columns, so every column of
      tiles reads all of A once: ceil(N/bN)·M·K elements; B likewise ceil(M/bM)·K·N;
    - C: each element stored once; the epilogue reads Bias[col] for every row of a block's
      tile (ragged rows too: the read is masked by the column only): ceil(M/bM)·bM·N;
    - CUDA-core FLOPs: the epilogue's + bias and max(·, 0) per element of every whole tile."""
    tiles_m, tiles_n = cdiv(M, bM), cdiv(N, bN)
    bias, act = epilogue.startswith("bias"), epilogue.replace("bias_", "").replace("bias", "none")
    per_element = int(bias) + (1 if act == "relu" else 0)
    return dict(
        tensor=tiles_m * tiles_n * cdiv(K, bK) * 2 * bM * bN * bK,
        cuda=per_element * tiles_m * bM * tiles_n * bN,
        loads={"A": 2 * tiles_n * M * K, "B": 2 * tiles_m * K * N, **({"Bias": 2 * tiles_m * bM * N} if bias else {})},
        stores={"C": 2 * M * N},
        dram=2 * (M * K + K * N + M * N) + (2 * N if bias else 0))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("M,N,K", GEMM_SHAPES)
def test_gemm_counts_equal_closed_form(M, N, K, target):
    kernel = tegula.compile(gemm.matmul_program(M, N, K, **TILE), out_idx=[-1], target=target)
    r = Analyzer.analysis(kernel, compile=False)
    want = gemm_counts(M, N, K, 128, 128, 64)
    assert r.tensor_flops == want["tensor"]
    assert r.cuda_flops == want["cuda"] == 0
    (k,) = r.kernels
    assert k.loads == want["loads"]
    assert k.stores == want["stores"]
    assert r.load_bytes == sum(want["loads"].values()) and r.store_bytes == 2 * M * N
    assert r.dram_bytes == want["dram"]
    assert k.grid == (cdiv(N, 128), cdiv(M, 128))


@pytest.mark.parametrize("epilogue", ["bias", "bias_relu"])
def test_gemm_epilogue_counts_bias_reads_and_flops(epilogue):
    M, N, K = 300, 200, 128
    kernel = tegula.compile(gemm.matmul_program(M, N, K, epilogue=epilogue, **TILE), out_idx=[-1], target="sm_80")
    r = Analyzer.analysis(kernel, compile=False)
    want = gemm_counts(M, N, K, 128, 128, 64, epilogue)
    assert (r.tensor_flops, r.cuda_flops) == (want["tensor"], want["cuda"])
    assert r.kernels[0].loads == want["loads"]
    assert r.dram_bytes == want["dram"]


def test_split_k_sums_its_two_kernels_and_reports_each():
    """Kernel 1: each (N tile, M tile, slice) block runs its slice's k-steps (the last slice
    the remainder); its fp32 partial tile goes to Partial (in-bounds part). Kernel 2: each
    combine tile reads every slice's partial and adds it (splits adds per element of the
    whole tile), then stores C."""
    M, N, K, splits = 16, 1000, 4096, 5
    bM, bN, bK, cM, cN = 64, 128, 64, 16, 128
    program = gemm.matmul_splitk_program(M, N, K, splits, block_M=bM, block_N=bN, block_K=bK, combine_M=cM,
                                         combine_N=cN)
    r = Analyzer.analysis(tegula.compile(program, out_idx=[-1], target="sm_80"), compile=False)
    steps = cdiv(K, bK)
    assert len(r.kernels) == 2
    first, second = r.kernels
    assert first.tensor_flops == cdiv(M, bM) * cdiv(N, bN) * steps * 2 * bM * bN * bK
    assert first.loads == {"A": 2 * cdiv(N, bN) * M * K, "B": 2 * cdiv(M, bM) * K * N}
    assert first.stores == {"Partial": 4 * splits * M * N}
    assert second.loads == {"Partial": 4 * splits * M * N}
    assert second.stores == {"C": 2 * M * N}
    assert second.cuda_flops == splits * cdiv(M, cM) * cM * cdiv(N, cN) * cN
    assert r.tensor_flops == first.tensor_flops and r.cuda_flops == second.cuda_flops
    assert r.load_bytes == first.load_bytes + second.load_bytes
    assert "gemm_splitk_kernel0" in str(r) and "total" in str(r)


# ---- attention forward ----

def attention_counts(B, H, Sq, Skv, D, causal, bM, bN):
    """What flash_attention_program executes, block by block. Block bx of a head takes
    query rows from q0 (the last tiles first when causal) and loops over key tiles
    0 .. ceil(hi / bN) - 1, hi = min(Skv, q0 + bM + Skv - Sq) when causal, else Skv. Per
    key tile: two products bM x bN x D (Q Kᵀ, P V); the online softmax's FLOPs: scale
    factor exp2((m_prev - m)·s) 3 and denominator l·scale + sum 2 per row, the output's
    rescale 1 per (row, D), the probabilities exp2(x·s - m·s) 4 per score, the row max
    bN per row (accumulated, clear=False) and the row sum bN - 1 per row; the causal mask
    is a select (no FLOPs). After the loop: 1 / l (1 per row), acc_o times it (1 per
    (row, D)) and the log-sum-exp
    (log2(l) + m·s) / log2(e): 4 per row. Bytes: Q's in-bounds rows once, each key tile's
    in-bounds rows of K and V, the output's and the log-sum-exp's in-bounds rows."""
    nq = cdiv(Sq, bM)
    tensor = cuda = q_rows = kv_rows = 0
    for bx in range(nq):
        q0 = ((nq - 1 - bx) if causal else bx) * bM
        hi = min(Skv, q0 + bM + Skv - Sq) if causal else Skv
        tiles = max(0, cdiv(hi, bN))
        tensor += tiles * 2 * (2 * bM * bN * D)
        cuda += tiles * bM * (5 + D + 4 * bN + bN + bN - 1) + bM * D + bM + 4 * bM
        q_rows += max(0, min(bM, Sq - q0))
        kv_rows += sum(min(bN, Skv - t * bN) for t in range(tiles))
    heads = B * H
    return dict(tensor=heads * tensor, cuda=heads * cuda,
                loads={"Q": heads * q_rows * D * 2, "K": heads * kv_rows * D * 2, "V": heads * kv_rows * D * 2},
                stores={"Output": heads * q_rows * D * 2, "Lse": heads * q_rows * 4})


ATTENTION_CASES = [
    # (B, H, Sq, Skv, D, causal, layout, block_M, block_N)
    (1, 2, 256, 256, 64, False, "bhsd", 64, 64),
    (2, 3, 300, 300, 64, True, "bshd", 64, 64),
    (1, 2, 200, 333, 128, True, "bhsd", 128, 64),
    (1, 1, 100, 250, 64, False, "bshd", 64, 128),
]


@pytest.mark.parametrize("B,H,Sq,Skv,D,causal,layout,bM,bN", ATTENTION_CASES)
def test_attention_counts_equal_closed_form(B, H, Sq, Skv, D, causal, layout, bM, bN):
    program = fa.flash_attention_program(B, H, H, Sq, Skv, D, is_causal=causal, layout=layout, block_M=bM,
                                         block_N=bN, threads=128, num_stages=2)
    r = Analyzer.analysis(tegula.compile(program, out_idx=[3, 4], target="sm_80"), compile=False)
    want = attention_counts(B, H, Sq, Skv, D, causal, bM, bN)
    assert r.tensor_flops == want["tensor"]
    assert r.cuda_flops == want["cuda"]
    assert r.kernels[0].loads == want["loads"]
    assert r.kernels[0].stores == want["stores"]


def test_causal_attention_counts_each_blocks_own_key_tiles():
    """Causal does about half the products of the full kernel, by tiles: the exact count is
    the number of (query tile, key tile) pairs at or below the diagonal."""
    B, H, S, D, bM, bN = 1, 1, 512, 64, 64, 64
    counts = {}
    for causal in (False, True):
        program = fa.flash_attention_program(B, H, H, S, S, D, is_causal=causal, block_M=bM, block_N=bN)
        counts[causal] = Analyzer.analysis(tegula.compile(program, out_idx=[3, 4], target="sm_80"),
                                           compile=False).tensor_flops
    tiles = S // bM
    assert counts[False] == tiles * tiles * 4 * bM * bN * D
    assert counts[True] == tiles * (tiles + 1) // 2 * 4 * bM * bN * D


def test_attention_on_sm90a_counts_like_sm80():
    """The warp-specialised, bulk-copy form is counted from the program without bulk copies:
    the same elements move."""
    program = fa.flash_attention_program(1, 2, 2, 384, 384, 128, is_causal=True, block_M=128, block_N=128,
                                         threads=256)
    results = [Analyzer.analysis(tegula.compile(program, out_idx=[3, 4], target=t), compile=False)
               for t in ("sm_80", "sm_90a")]
    assert results[1].kernels[0].threads == 384  # the producer warpgroup is launched too
    for a, b in zip(results, results[1:]):
        assert (a.tensor_flops, a.cuda_flops, a.kernels[0].loads, a.kernels[0].stores) == \
            (b.tensor_flops, b.cuda_flops, b.kernels[0].loads, b.kernels[0].stores)


# ---- RMSNorm ----

def rms_counts(M, N):
    """What rms_norm_program executes for M rows of N (plan_rows' tiles), per block of blk_m
    rows, fragments n_pad wide: squares 1 per element, the sum n_pad - 1 per row (n_pad per
    row per chunk when chunks > 1: it accumulates), then x·rsqrt(ss·(1/N) + eps)·w 5 per
    element, over the whole padded tile. Bytes: X's in-bounds elements once (twice with
    chunks: the second pass re-reads), W's N elements for every row of every block (ragged
    blocks too), Y's elements once."""
    plan = plan_rows(N, 2)
    blk, pad, chunks = plan.blk_m, plan.n_pad, plan.chunks
    blocks = cdiv(M, blk)
    reduce = blk * (pad if chunks > 1 else pad - 1)
    per_block = chunks * (blk * pad + reduce + 5 * blk * pad)
    return dict(cuda=blocks * per_block, loads={"X": 2 * M * N * (2 if chunks > 1 else 1), "W": 2 * blocks * blk * N},
                stores={"Y": 2 * M * N}, grid=(blocks,))


@pytest.mark.parametrize("M,N", [(1000, 4096), (1001, 500), (7, 4000), (3, 20000), (513, 8)])
def test_rms_norm_counts_equal_closed_form(M, N):
    kernel = rmsnorm.kernel_for(N, torch.float16, 1e-6)
    r = Analyzer(kernel, (M, N), (N,), (M, N), compile=False).calculate(device="H100 SXM")
    want = rms_counts(M, N)
    assert r.tensor_flops == 0
    assert r.cuda_flops == want["cuda"]
    assert r.kernels[0].loads == want["loads"] and r.kernels[0].stores == want["stores"]
    assert r.kernels[0].grid == want["grid"]
    # DRAM: X, W and Y once each (the chunked second pass re-reads X: capped at its size).
    assert r.dram_bytes == 4 * M * N + 2 * N
    assert r.bound == "memory"


def test_dynamic_size_from_tensors_shapes_or_name():
    kernel = rmsnorm.kernel_for(4096, torch.float16, 1e-6)
    by_name = Analyzer(kernel, m=300, compile=False).kernels
    by_shape = Analyzer(kernel, (300, 4096), (4096,), (300, 4096), compile=False).kernels
    x = torch.zeros(300, 4096, dtype=torch.float16)
    by_tensor = Analyzer(kernel, x, x[0], x, compile=False).kernels
    assert by_name == by_shape == by_tensor
    with pytest.raises(ValueError, match=r"dynamic size 'm' \(dimension 0 of 'X'\).*m=<int>"):
        Analyzer(kernel, compile=False)
    with pytest.raises(ValueError, match=r"argument 'W' must have shape \(4096,\), got \(4000,\)"):
        Analyzer(kernel, (300, 4096), (4000,), (300, 4096), compile=False)
    with pytest.raises(ValueError, match="'m' is 300 elsewhere, but dimension 0 of 'Y' is 301"):
        Analyzer(kernel, (300, 4096), (4096,), (301, 4096), compile=False)
    with pytest.raises(TypeError, match="names no dynamic size"):
        Analyzer(kernel, n=3, compile=False)


# ---- data-dependent bounds: flash decoding ----

def test_flash_decode_counts_each_sequences_key_tiles_from_its_length():
    """Each (sequence, KV head) reads the key tiles covering its length (64 rows each, the
    cache's end masked) split over num_split blocks; K and V alike."""
    B, H, Hkv, L, D, splits = 4, 8, 2, 512, 64, 3
    split, _ = fd.kernels_for(B, H, Hkv, L, D, splits, "float16", None)
    lens = torch.tensor([512, 100, 1, 300], dtype=torch.int32)
    r = Analyzer(split, (B, H, D), (B, L, Hkv, D), (B, L, Hkv, D), lens, compile=False).calculate()
    rows = sum(min(L, cdiv(int(n), 64) * 64) for n in lens)
    loads = r.kernels[0].loads
    assert loads["K"] == loads["V"] == rows * Hkv * D * 2
    assert loads["seqlens"] == B * Hkv * splits * 4  # one length read per block
    with pytest.raises(ValueError, match="values of 'seqlens': pass the tensor itself"):
        Analyzer(split, (B, H, D), (B, L, Hkv, D), (B, L, Hkv, D), (B,), compile=False)


# ---- occupancy ----

def test_occupancy_matches_hand_computation():
    sm90, sm80 = hardware.TARGETS["sm_90a"], hardware.TARGETS["sm_80"]
    # 8 warps of 128 registers: 4096 a warp, 4 warps per register partition -> 16 warps ->
    # 2 blocks; 98352 + 1024 reserved bytes, rounded to 128 = 99456 -> 233472 // 99456 = 2.
    o = hardware.occupancy(sm90, threads=256, registers=128, smem_bytes=98352)
    assert (o.blocks_per_sm, o.warps_per_sm, o.limited_by) == (2, 16, "registers")
    assert o.limits == {"blocks": 32, "threads": 8, "registers": 2, "shared memory": 2}
    assert o.fraction == 16 / 64
    # 4 warps of 255 registers: 8160 -> 8192 a warp, 2 per partition -> 8 warps -> 2 blocks.
    o = hardware.occupancy(sm80, threads=128, registers=255, smem_bytes=0)
    assert (o.blocks_per_sm, o.limited_by) == (2, "registers")
    # 32 warps of 65 registers: 2080 -> 2304 a warp, 73728 for the block > 65536: no launch.
    assert hardware.occupancy(sm80, threads=1024, registers=65, smem_bytes=0).blocks_per_sm == 0
    # Shared memory: 100 KiB + 1 KiB reserved -> one block on sm_80 (164 KiB), two on sm_90a.
    assert hardware.occupancy(sm80, 128, 32, 100 * 1024).limits["shared memory"] == 1
    assert hardware.occupancy(sm90, 128, 32, 100 * 1024).limits["shared memory"] == 2
    # Threads: 64 warps an SM, 1024-thread blocks -> 2.
    o = hardware.occupancy(sm90, threads=1024, registers=32, smem_bytes=0)
    assert (o.blocks_per_sm, o.limited_by, o.fraction) == (2, "threads", 1.0)


def test_kernel_occupancy_uses_its_registers_smem_and_threads():
    kernel = tegula.compile(gemm.matmul_program(512, 512, 512, **TILE), out_idx=[-1], target="sm_80")
    (k,) = Analyzer(kernel).kernels
    assert k.registers is not None and 16 <= k.registers <= 255
    assert k.smem_bytes == kernel._lowered_all[0].smem_bytes > 0
    assert k.occupancy == hardware.occupancy(hardware.TARGETS["sm_80"], 128, k.registers, k.smem_bytes)
    assert k.fragment_registers == kernel.register_usage().peak


# ---- the roofline from a given time ----

def test_fractions_bound_and_ridge_from_a_given_time():
    M, N = 32768, 4096
    rms = Analyzer(rmsnorm.kernel_for(N, torch.float16, 1e-6), m=M, compile=False).calculate()
    ms, copy = 0.1, 3000.0
    r = rms.with_time(ms, device="H100 SXM", copy_bandwidth=copy)
    assert r.copy_source == "given" and r.device == hardware.DEVICES["H100 SXM"]
    assert r.gbs == pytest.approx(r.dram_bytes / (ms * 1e-3) / 1e9)
    assert r.bandwidth_fraction == pytest.approx(r.dram_bytes / (ms * 1e-3) / (copy * 1e9))
    assert r.cuda_fraction == pytest.approx(r.cuda_flops / (ms * 1e-3) / 67.0e12)
    assert r.bound == "memory" and r.peak_fraction == pytest.approx(r.bandwidth_fraction)
    assert r.arithmetic_intensity < r.ridge
    assert "memory bound" in str(r) and "of copy bandwidth" in str(r)

    mm = Analyzer.analysis(tegula.compile(gemm.matmul_program(4096, 4096, 4096, **TILE), out_idx=[-1],
                                          target="sm_90a"), compile=False)
    r = mm.with_time(0.2, device="H100 SXM", copy_bandwidth=copy)
    assert r.tensor_fraction == pytest.approx(2 * 4096 ** 3 / 0.2e-3 / 989.5e12)
    assert r.bound == "compute" and r.peak_fraction == pytest.approx(r.compute_fraction)
    assert r.arithmetic_intensity >= r.ridge
    assert r.roofline_ms == pytest.approx(2 * 4096 ** 3 / 989.5e9)
    with pytest.raises(ValueError, match="no peak numbers"):
        mm.with_time(1.0, device="NVIDIA H100 PCIe")
    with pytest.raises(ValueError, match="time_ms must be a positive number"):
        mm.with_time(0)


def test_analysis_takes_a_prim_func_and_a_target():
    program = gemm.matmul_program(256, 256, 256, **TILE)
    r = Analyzer.analysis(program, target="sm_80", compile=False)
    assert r.target == "sm_80" and r.device == hardware.DEVICES["A100"]
    assert r.tensor_flops == gemm_counts(256, 256, 256, 128, 128, 64)["tensor"]
    with pytest.raises(TypeError, match="a compiled kernel"):
        Analyzer(object())


def _device_model(name, target):
    """TileLang's carver.arch.CUDA("cuda") as it stands on a GPU machine (made here without
    querying a driver)."""
    from tegula.carver.arch import CUDA

    dev = object.__new__(CUDA)
    dev.name, dev.target, dev.platform = name, target, "CUDA"
    return dev


@pytest.mark.parametrize("name,target,spec", [("NVIDIA H100 80GB HBM3", "sm_90a", "H100 SXM"),
                                              ("NVIDIA A100-SXM4-80GB", "sm_80", "A100")])
def test_analysis_takes_the_device_positionally_as_tilelang_does(name, target, spec):
    # examples/analyze: Analyzer.analysis(kernel.get_tir(...), CUDA("cuda")).
    program = gemm.matmul_program(300, 500, 136, **TILE)
    r = Analyzer.analysis(program, _device_model(name, target), compile=False)
    assert r.target == target and r.device == hardware.DEVICES[spec]
    assert r.total_flops == gemm_counts(300, 500, 136, 128, 128, 64)["tensor"]
    with pytest.raises(TypeError, match="given twice"):
        Analyzer.analysis(program, _device_model(name, target), device="h100", compile=False)


@pytest.mark.parametrize("shape", [(2, 16, 9, 7, 24, 3, 1, 1, 1), (4, 32, 32, 32, 64, 3, 1, 1, 1)])
def test_a_program_with_views_is_counted(shape):
    # examples/analyze/example_conv_analyze.py: the filter and the output are read and
    # written through views (T.Tensor(shape, dtype, buf.data)).
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    import view_programs as vp

    N, C, H, W, F, K, S, D, P = shape
    prog, _ = vp.convolution(*shape, block_M=32, block_N=32, block_K=32)
    r = Analyzer.analysis(prog, _device_model("NVIDIA H100 80GB HBM3", "sm_90a"), compile=False)
    OH, OW = (H + 2 * P - D * (K - 1) - 1) // S + 1, (W + 2 * P - D * (K - 1) - 1) // S + 1
    assert r.total_flops == cdiv(N * OH * OW, 32) * cdiv(F, 32) * cdiv(K * K * C, 32) * 2 * 32 ** 3


def test_profiler_roofline_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tests/python/gpu/test_analyzer_gpu.py times it")
    kernel = tegula.compile(gemm.matmul_program(256, 256, 256, **TILE), out_idx=[-1], target="sm_80")
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        kernel.get_profiler().roofline()


# ---- the plot ----

def _results():
    """(label, result with a given time) for a GEMM, an RMSNorm and a transpose."""
    mm = Analyzer.analysis(tegula.compile(gemm.matmul_program(2048, 2048, 2048, **TILE), out_idx=[-1],
                                          target="sm_90a"), compile=False)
    rms = Analyzer(rmsnorm.kernel_for(4096, torch.float16, 1e-6), m=16384, compile=False).calculate()
    tr = Analyzer(transpose_module.kernel_for(4096, 4096, torch.float16), compile=False).calculate()
    times = {"matmul": 0.05, "rms_norm": 0.06, "transpose": 0.03}
    return [(name, r.with_time(times[name], device="H100 SXM", copy_bandwidth=3000.0))
            for name, r in (("matmul", mm), ("rms_norm", rms), ("transpose", tr))]


def test_plot_puts_each_kernel_at_its_intensity_and_measured_tflops(tmp_path):
    pytest.importorskip("matplotlib")
    labeled = _results()
    out = tmp_path / "roofline.png"
    plot = plot_roofline([r for _, r in labeled], out=str(out), labels=[n for n, _ in labeled])
    assert out.stat().st_size > 10_000
    mm, rms, tr = (r for _, r in labeled)
    # GEMM: 2·2048³ FLOPs over A, B and C once (2 bytes each) in 0.05 ms.
    assert [p.label for p in plot.points] == ["matmul", "rms_norm"]
    assert plot.points[0].intensity == pytest.approx(2 * 2048 ** 3 / (3 * 2048 * 2048 * 2))
    assert plot.points[0].tflops == pytest.approx(2 * 2048 ** 3 / 0.05e-3 / 1e12)
    assert plot.points[1].intensity == pytest.approx(rms.flops / rms.dram_bytes)
    assert plot.points[1].tflops == pytest.approx(rms.flops / 0.06e-3 / 1e12)
    assert all(p.measured for p in plot.points)
    assert plot.unplotted == [("transpose", f"no FLOPs, {tr.bandwidth_fraction:.0%} of copy bandwidth")]
    assert tr.bandwidth_fraction == pytest.approx(2 * 4096 * 4096 * 2 / 0.03e-3 / 3000e9)
    ax = plot.figure.axes[0]
    (dots,) = [c for c in ax.collections if len(c.get_offsets())]
    drawn = [v for xy in dots.get_offsets().tolist() for v in xy]
    assert drawn == pytest.approx([v for p in plot.points for v in (p.intensity, p.tflops)])
    assert plot.roofs == {"tensor TFLOP/s": 989.5, "fp32 TFLOP/s": 67.0, "copy GB/s": 3000.0, "HBM GB/s": 3350.0}
    # The roof: level at the tensor peak past the ridge, rising with the copy bandwidth below.
    roof = ax.lines[0]
    x, y = roof.get_xdata(), roof.get_ydata()
    assert y[-1] == pytest.approx(989.5) and y[0] == pytest.approx(x[0] * 3.0)


def test_untimed_points_sit_on_the_roof():
    pytest.importorskip("matplotlib")
    results = [r.with_time(None, device="H100 SXM", copy_bandwidth=3000.0) for _, r in _results()[:2]]
    plot = plot_roofline(results)
    mm, rms = plot.points
    assert not mm.measured and mm.tflops == pytest.approx(989.5)            # compute bound: the peak
    assert rms.tflops == pytest.approx(rms.intensity * 3.0)                  # memory bound: bw x intensity


def test_combine_sums_programs_launched_together():
    B, H, Hkv, L, D, splits = 2, 4, 2, 256, 64, 2
    split, combine = fd.kernels_for(B, H, Hkv, L, D, splits, "float16", None)
    lens = torch.tensor([256, 70], dtype=torch.int32)
    a = Analyzer(split, (B, H, D), (B, L, Hkv, D), (B, L, Hkv, D), lens, compile=False).calculate()
    b = Analyzer(combine, (B, H, splits, D), (B, H, splits), compile=False).calculate()
    both = AnalysisResult.combine([a, b], name="flash_decode")
    assert both.name == "flash_decode" and len(both.kernels) == 2
    assert both.flops == a.flops + b.flops and both.dram_bytes == a.dram_bytes + b.dram_bytes
    assert math.isclose(both.with_time(0.01, device="H200", copy_bandwidth=4000.0).gbs,
                        both.dram_bytes / 0.01e-3 / 1e9)


def test_bench_dry_run_writes_the_table_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import argparse

    from tegula.cli import bench as bench_cli

    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    out = tmp_path / "roof.png"
    args = parser.parse_args(["--dry-run", "--quick", "--kernel", "rms_norm", "--kernel", "transpose",
                              "--out", str(out)])
    assert bench_cli.run(args) == 0
    text = capsys.readouterr().out
    assert "rms_norm" in text and "transpose" in text and "memory" in text and out.stat().st_size > 10_000
    if not torch.cuda.is_available():
        assert bench_cli.run(parser.parse_args(["--quick"])) == 1
        assert "no CUDA GPU here" in capsys.readouterr().err


# ---- the per-block rule against the lowered code's own masks ----

ROW_KERNELS = [
    ("rmsnorm", (4096, torch.float16, 1e-6), 37), ("rmsnorm", (500, torch.float16, 1e-6), 37),
    ("rmsnorm", (20000, torch.float16, 1e-6), 3), ("rmsnorm", (1001, torch.float16, 1e-6), 5),
    ("row_softmax", (3000, torch.float16), 9), ("layernorm", (777, torch.float16, 1e-5), 11),
    ("elementwise", (1000, torch.float16, True), 13), ("reduce", (999, torch.float16, "sum"), 17),
    ("matrix_transpose", (300, 200, torch.float16), None),
]


@pytest.mark.parametrize("module,args,m", ROW_KERNELS, ids=lambda v: str(v))
def test_per_block_bytes_equal_the_final_codes_thread_by_thread(module, args, m):
    """The per-block count's in-bounds rule is what the lowered code does: counting the
    final stage thread by thread (its vector accesses under its own masks) moves the same
    bytes of every tensor. (These kernels give each element access to one thread; where the
    lowered code repeats one access in several threads, a replicated fragment or a
    statement outside T.Parallel, the per-block count keeps the program's one access.)"""
    from tegula.tools import analyzer

    kernel = importlib.import_module("tegula.kernels." + module).kernel_for(*args)
    lowered = kernel._lowered_all[0]
    values = {} if m is None else {"m": m}
    per_block = analyzer.count(lowered, values)
    per_thread = analyzer.count(lowered, values, stage="final", per_thread=True)
    assert per_block.loads and (per_block.loads, per_block.stores) == (per_thread.loads, per_thread.stores)


def test_branches_and_flat_indices_in_a_nest_are_enumerated_exactly():
    """A guard coupling two loop variables and a flattened index are not per-dimension
    intervals: the count enumerates the nest's points, block by block. Brute force over
    every block and point gives the same numbers: loads where the guard holds and X's index
    is inside X, stores where it holds and the flat index is inside Y (which a ragged column
    past N can still be), one multiply wherever the guard holds."""
    import tegula.language as T

    N, t = 50, 32

    @T.prim_func
    def upper(X: T.Tensor((N, N), "float32"), Y: T.Tensor((N * N,), "float32")):
        with T.Kernel(cdiv(N, t), cdiv(N, t), threads=128) as (bx, by):
            for i, j in T.Parallel(t, t):
                if by * t + i <= bx * t + j:
                    Y[(by * t + i) * N + bx * t + j] = X[by * t + i, bx * t + j] * 2.0

    r = Analyzer.analysis(tegula.compile(upper, target="sm_80"), compile=False)
    taken = loads = stores = 0
    for bx in range(cdiv(N, t)):
        for by in range(cdiv(N, t)):
            for i in range(t):
                for j in range(t):
                    row, col = by * t + i, bx * t + j
                    if row <= col:
                        taken += 1
                        loads += row < N and col < N
                        stores += 0 <= row * N + col < N * N
    assert r.cuda_flops == taken
    assert r.kernels[0].loads == {"X": 4 * loads} and r.kernels[0].stores == {"Y": 4 * stores}
    assert stores > loads  # ragged columns of the flat index land inside Y


def test_a_nest_too_large_to_enumerate_is_estimated_from_a_sample_of_blocks(monkeypatch):
    """The convolution's im2col masks padding with a guard the count cannot split into
    intervals, so its points are enumerated; past DENSE_LIMIT a seeded sample of the blocks
    is, and says so. The estimate lands near the exact count, and the FLOPs stay exact."""
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    import view_programs as vp
    from tegula.tools import analyzer

    prog, _ = vp.convolution(4, 32, 32, 32, 64, 3, 1, 1, 1, block_M=32, block_N=32, block_K=32)
    device = _device_model("NVIDIA H100 80GB HBM3", "sm_90a")
    exact = Analyzer.analysis(prog, device, compile=False)
    monkeypatch.setattr(analyzer, "DENSE_LIMIT", 32 * 32 * 16)  # 16 of the blocks
    sampled = Analyzer.analysis(prog, device, compile=False)
    assert not any("estimated" in n for n in exact.kernels[0].notes)
    assert any("estimated from 16 of" in n for n in sampled.kernels[0].notes)
    assert sampled.total_flops == exact.total_flops
    assert abs(sampled.load_bytes - exact.load_bytes) <= 0.1 * exact.load_bytes
