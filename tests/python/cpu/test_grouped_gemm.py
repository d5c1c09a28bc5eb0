"""The grouped GEMM (kernels/expert_gemm.py) without a GPU: the Mixtral-shaped program
compiles for both instruction paths (on sm_90a with bulk tensor copies indexed by the tile
map and a producer warpgroup), its lowered code simulated thread by thread matches torch
on balanced, unbalanced, empty-expert, partially covered and ragged problems, with the
weight in both layouts, and the entry point's arguments are checked by name."""
import importlib

import pytest
import torch

import tegula
import tegula.testing as tt

gg = importlib.import_module("tegula.kernels.expert_gemm")
gemm = importlib.import_module("tegula.kernels.gemm")

# (target, pass configs, index_by_map) as kernel_for picks them: wgmma with its TMA path
# (simulated in its cp.async form) indexing by the map in place, the same target held to
# mma.sync, and sm_80, both binding the map's entry to names first.
PATHS = [("sm_90a", {}, True), ("sm_90a", gemm.MMA_SYNC, False), ("sm_80", {}, False)]
# Tiles small enough to simulate; 64 rows keep sm_90a on wgmma (its smallest M).
SMALL = dict(block_M=64, block_N=64, block_K=32, num_stages=2, threads=128, panel_size=2)


def small_kernel(target, configs, E, N, K, trans_w, dtype="float16", index_by_map=None, stage_c=False):
    if index_by_map is None:
        index_by_map = target == "sm_90a" and not configs
    return tegula.jit(out_idx=[-1], target=target, pass_configs=configs)(gg.grouped_gemm_program)(
        E, N, K, dtype=dtype, trans_w=trans_w, index_by_map=index_by_map, stage_c=stage_c, **SMALL)


def offsets_of(counts, first=0):
    return torch.tensor([first] + [first + c for c in torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)


def torch_grouped(a, w, offsets, trans_w):
    """float32 per-expert products; rows outside every expert NaN (the kernel leaves them)."""
    c = torch.full((a.shape[0], w.shape[1] if trans_w else w.shape[2]), float("nan"))
    for e in range(w.shape[0]):
        lo, hi = offsets[e].item(), offsets[e + 1].item()
        c[lo:hi] = a[lo:hi].float() @ (w[e].float().t() if trans_w else w[e].float())
    return c


def assert_matches(out, ref, dtype):
    """Same unwritten rows (poisoned NaN), and the products within the output's rounding."""
    assert torch.equal(torch.isnan(out.float()), torch.isnan(ref)), "rows written outside the experts, or missed"
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(out.float().nan_to_num(), ref.nan_to_num(), rtol=tol, atol=tol * 8)


@pytest.mark.parametrize("trans_w", [False, True])
def test_mixtral_shape_compiles_with_tensor_copies_indexed_by_the_tile_map(trans_w):
    cfg = gg.grouped_config(8192, 14336, 4096, 8, wgmma=True)
    assert cfg["block_M"] == 128 and cfg["block_N"] == 256
    k = tegula.jit(out_idx=[-1], target="sm_90a")(gg.grouped_gemm_program)(8, 14336, 4096, trans_w=trans_w, **cfg)
    assert k.num_kernels == 2
    gemm_src = k.get_kernel_source().split("// ---- kernel 1 of 2")[1]
    assert "tma_load_2d(" in gemm_src and "tma_load_3d(" in gemm_src, "the A and W copies are not bulk tensor copies"
    assert "TileMap[" in gemm_src.split("tma_load_3d(")[1].split(";")[0], "the expert index is not read from the map"
    assert "setmaxnreg" in gemm_src and "wgmma_ss<128, 256, 64," in gemm_src
    assert all(len(k.cubin(i)) > 0 for i in range(2))


def test_mma_sync_path_compiles_for_sm80_with_a_cp_async_pipeline():
    cfg = gg.grouped_config(8192, 4096, 14336, 8, wgmma=False)
    k = tegula.jit(out_idx=[-1], target="sm_80")(gg.grouped_gemm_program)(8, 4096, 14336, trans_w=True,
                                                                          index_by_map=False, **cfg)
    src = k.get_kernel_source()
    assert "gemm_ss<" in src and "cp_async_16_pred" in src and "cp_async_wait<1>" in src and "wgmma" not in src
    assert len(k.cubin(1)) > 0


@pytest.mark.parametrize("target,configs,index_by_map", PATHS)
@pytest.mark.parametrize("trans_w", [False, True])
@pytest.mark.parametrize("counts", [[70, 0, 45], [0, 130, 1, 0, 64], [3] * 10, [200]])
def test_simulated_matches_torch(target, configs, index_by_map, trans_w, counts):
    E, N, K = len(counts), 72, 80
    g = torch.Generator().manual_seed(sum(counts) + E)
    offsets = offsets_of(counts)
    a = torch.randn(sum(counts) + 5, K, generator=g).half()    # 5 rows past the last expert
    w = torch.randn((E, N, K) if trans_w else (E, K, N), generator=g).half()
    out = tt.simulate(small_kernel(target, configs, E, N, K, trans_w, index_by_map=index_by_map), a, w, offsets)
    assert_matches(out, torch_grouped(a, w, offsets, trans_w), torch.float16)


@pytest.mark.parametrize("target,configs,index_by_map", PATHS)
@pytest.mark.parametrize("counts", [[70, 0, 45], [200, 64]])
def test_the_staged_epilogue_matches_torch(target, configs, index_by_map, counts):
    """stage_c: whole tiles through a shared tile (stored swizzled), an expert's last rows
    element by element."""
    E, N, K = len(counts), 64, 80
    g = torch.Generator().manual_seed(sum(counts))
    offsets = offsets_of(counts)
    a = torch.randn(sum(counts), K, generator=g).half()
    w = torch.randn((E, N, K), generator=g).half()
    kernel = small_kernel(target, configs, E, N, K, True, index_by_map=index_by_map, stage_c=True)
    assert "C_shared[swizzle_offset" in kernel.get_kernel_source()
    assert_matches(tt.simulate(kernel, a, w, offsets), torch_grouped(a, w, offsets, True), torch.float16)


@pytest.mark.parametrize("index_by_map", [True, False])
@pytest.mark.parametrize("trans_w", [False, True])
def test_ragged_extents_bf16_and_rows_before_the_first_expert(trans_w, index_by_map):
    """N and K not multiples of 8 (element-wise loads), offsets[0] > 0, bfloat16."""
    counts, E, N, K = [33, 64, 1], 3, 37, 45
    g = torch.Generator().manual_seed(7)
    offsets = offsets_of(counts, first=6)
    a = torch.randn(6 + sum(counts) + 2, K, generator=g).bfloat16()
    w = torch.randn((E, N, K) if trans_w else (E, K, N), generator=g).bfloat16()
    out = tt.simulate(small_kernel("sm_90a", {}, E, N, K, trans_w, "bfloat16", index_by_map), a, w, offsets)
    assert_matches(out, torch_grouped(a, w, offsets, trans_w), torch.bfloat16)


def test_offsets_out_of_range_are_clamped_not_written_past_c():
    """Offsets breaking the contract give unspecified rows, but every write stays in c (the
    simulator fails on an out-of-bounds access). Past both ends: clamped. Decreasing, so
    that experts 0 and 2 overlap (rows 10..29): two blocks store those rows, which the
    simulator reports as the race it is on a GPU."""
    E, N, K = 3, 64, 64
    a = torch.randn(50, K).half()
    w = torch.randn(E, K, N).half()
    out = tt.simulate(small_kernel("sm_80", {}, E, N, K, False), a, w,
                      torch.tensor([-20, 10, 30, 400], dtype=torch.int32))
    assert out.shape == (50, N)
    offsets = torch.tensor([-20, 30, 10, 400], dtype=torch.int32)
    with pytest.raises(tt.SimulationError) as info:
        tt.simulate(small_kernel("sm_80", {}, E, N, K, False), a, w, offsets)
    reports = [line.strip() for line in str(info.value).splitlines()[1:]]
    assert reports and all("which store lands is a race" in r or r.startswith("(stopped after") for r in reports), \
        reports
    out = tt.simulate(small_kernel("sm_80", {}, E, N, K, False), a, w, offsets, check=False)
    assert out.shape == (50, N)


def test_nan_in_one_expert_stays_in_its_rows():
    """A NaN in expert 1's weight poisons expert 1's rows only (K ragged: the last k step
    of expert 0 must not read expert 1's rows)."""
    E, N, K = 2, 64, 40
    a = torch.randn(128, K).half()
    w = torch.randn(E, K, N).half()
    w[1, 0, 0] = float("nan")
    offsets = offsets_of([64, 64])
    out = tt.simulate(small_kernel("sm_90a", {}, E, N, K, False), a, w, offsets)
    assert not torch.isnan(out[:64]).any()
    assert torch.isnan(out[64:, 0]).all() and not torch.isnan(out[64:, 1:]).any()


def test_grouped_config():
    assert gg.grouped_config(8192, 4096, 14336, 8, wgmma=True)["block_N"] == 256
    assert gg.grouped_config(8192, 14336, 4096, 8, wgmma=False) == dict(
        block_M=128, block_N=128, block_K=64, num_stages=3, threads=128, panel_size=8)
    assert gg.grouped_config(256, 14336, 4096, 8, wgmma=True)["block_M"] == 64
    assert gg.scan_passes(9) == ((1, 0), (2, 1), (4, 0), (8, 1))
    assert gg.scan_passes(1) == ()


a16 = torch.randn(10, 32).half()
w16 = torch.randn(2, 32, 16).half()
off = torch.tensor([0, 4, 10], dtype=torch.int32)


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda: gg.grouped_gemm(a16.float(), w16, off), ValueError, r"grouped_gemm: a must be a tensor of float16"),
    (lambda: gg.grouped_gemm(a16, w16.bfloat16(), off), ValueError, r"grouped_gemm: w must be a float16 tensor"),
    (lambda: gg.grouped_gemm(a16, w16, off.long()), ValueError, r"grouped_gemm: offsets must be an int32"),
    (lambda: gg.grouped_gemm(a16, w16, [0, 4, 10]), TypeError, r"grouped_gemm: offsets must be a torch\.Tensor"),
    (lambda: gg.grouped_gemm(a16, w16[0], off), ValueError, r"grouped_gemm: w must be 3-D"),
    (lambda: gg.grouped_gemm(a16, w16, off, trans_w=True), ValueError, r"grouped_gemm: w must have shape \(2, N, 32\)"),
    (lambda: gg.grouped_gemm(a16, w16[:, :8], off), ValueError, r"grouped_gemm: w must have shape \(2, 32, N\)"),
    (lambda: gg.grouped_gemm(a16, w16, off[:2]), ValueError, r"grouped_gemm: offsets must have shape \(3,\)"),
    (lambda: gg.grouped_gemm(a16, torch.zeros(1025, 32, 1).half(), off), ValueError,
     r"grouped_gemm: w must hold at most 1024 experts"),
    (lambda: gg.grouped_gemm(a16, w16, off, trans_w=1), TypeError, r"grouped_gemm: trans_w must be a bool"),
    (lambda: gg.grouped_gemm(a16, w16, off), ValueError, r"grouped_gemm: a must be a CUDA tensor"),
])
def test_argument_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
