"""grouped_gemm (tegula.kernels.expert_gemm) against per-expert torch products in float32,
on the GPU: balanced, unbalanced and empty experts, rows outside every expert, aligned and
ragged extents, both weight layouts, fp16 and bf16, both instruction paths; and no host
synchronisation (it runs under torch's sync debug mode and captures in a CUDA graph)."""
import importlib

import pytest
import torch

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import assert_close, dtype_id, randn, seed_of
except ImportError:
    from _util import assert_close, dtype_id, randn, seed_of

pytestmark = pytest.mark.gpu

gg = importlib.import_module("tegula.kernels.expert_gemm")

DTYPES = [torch.float16, torch.bfloat16]


def _offsets(counts, first=0):
    bounds = [first]
    for c in counts:
        bounds.append(bounds[-1] + c)
    return torch.tensor(bounds, dtype=torch.int32, device="cuda")


def _inputs(M, K, N, E, dtype, trans_w, *tag):
    a = randn((M, K), dtype, seed_of("a", M, K, N, E, dtype, *tag))
    w = randn((E, N, K) if trans_w else (E, K, N), dtype, seed_of("w", M, K, N, E, dtype, *tag), scale=K ** -0.5)
    return a, w


def _reference(a, w, offsets, trans_w):
    """float64 per-expert products of the covered rows: (rows, c)."""
    bounds = offsets.tolist()
    rows = torch.arange(bounds[0], bounds[-1], device="cuda")
    ref = torch.cat([a[lo:hi].double() @ (w[e].double().t() if trans_w else w[e].double())
                     for e, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))])
    return rows, ref


# (counts per expert, rows before the first expert, rows after the last, K, N)
CASES = [
    ([128] * 8, 0, 0, 512, 1024),                 # balanced, tile-aligned
    ([300, 0, 17, 1, 0, 700, 64, 5], 0, 0, 512, 1024),   # unbalanced, empty experts
    ([1000], 0, 0, 256, 512),                     # one expert
    ([37, 45, 0, 90], 3, 11, 333, 1000),          # ragged K and N, rows outside the experts
    ([2, 1, 3, 0, 1, 2, 0, 1], 0, 0, 1024, 2048),  # decode: a few rows an expert (64-row tiles)
    ([256, 512, 128, 1024, 64, 384, 896, 640], 0, 0, 4096, 1792),  # prefill-like, 128 x 256 tiles on sm_90
]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("trans_w", [False, True], ids=["w_KN", "w_NK"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"E{len(c[0])}-M{sum(c[0])}-K{c[3]}-N{c[4]}")
def test_grouped_gemm_matches_per_expert_products(case, trans_w, dtype):
    counts, before, after, K, N = case
    E = len(counts)
    M = before + sum(counts) + after
    a, w = _inputs(M, K, N, E, dtype, trans_w)
    offsets = _offsets(counts, before)
    c = gg.grouped_gemm(a, w, offsets, trans_w=trans_w)
    assert c.shape == (M, N) and c.dtype == dtype
    rows, ref = _reference(a, w, offsets, trans_w)
    assert_close(c[rows], ref, dtype, f"grouped_gemm {case}")


@pytest.mark.parametrize("trans_w", [False, True], ids=["w_KN", "w_NK"])
def test_mma_sync_path_on_any_gpu(trans_w):
    counts, K, N = [200, 0, 77, 300], 512, 768
    a, w = _inputs(sum(counts), K, N, len(counts), torch.float16, trans_w, "mma")
    offsets = _offsets(counts)
    cfg = gg.grouped_config(a.shape[0], N, K, len(counts), wgmma=False)
    kernel = gg.kernel_for(len(counts), N, K, torch.float16, trans_w, mma_sync=True, **cfg)
    c = kernel(a, w, offsets)
    rows, ref = _reference(a, w, offsets, trans_w)
    assert_close(c[rows], ref, torch.float16, "grouped_gemm mma.sync")


def test_rows_of_the_next_expert_are_not_overwritten():
    """Expert 0's last tile covers rows of expert 1; each expert has a weight of its own
    constant, so a row written with the wrong expert's weight shows."""
    E, K, N = 3, 64, 256
    counts = [65, 130, 3]
    a = torch.ones(sum(counts), K, dtype=torch.float16, device="cuda")
    w = torch.stack([torch.full((K, N), float(e + 1) / K, dtype=torch.float16, device="cuda") for e in range(E)])
    c = gg.grouped_gemm(a, w, _offsets(counts))
    expect = torch.cat([torch.full((n, N), float(e + 1), device="cuda") for e, n in enumerate(counts)])
    assert torch.equal(c.float(), expect)


def test_nan_and_inf_propagate_within_their_expert():
    E, K, N = 2, 64, 128
    a = torch.randn(100, K, dtype=torch.float16, device="cuda")
    w = torch.randn(E, K, N, dtype=torch.float16, device="cuda")
    a[10, 3] = float("nan")
    w[1, 5, 7] = float("inf")
    c = gg.grouped_gemm(a, w, _offsets([50, 50]))
    ref = torch.cat([a[:50].float() @ w[0].float(), a[50:].float() @ w[1].float()])
    assert torch.equal(torch.isnan(c), torch.isnan(ref.half()))
    assert torch.equal(torch.isinf(c), torch.isinf(ref.half()))


def test_no_host_synchronisation_and_cuda_graph_capture():
    counts, K, N = [100, 0, 28, 300], 256, 512
    a, w = _inputs(sum(counts), K, N, len(counts), torch.float16, True, "graph")
    offsets = _offsets(counts)
    eager = gg.grouped_gemm(a, w, offsets, trans_w=True)    # compiles outside the checks
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = gg.grouped_gemm(a, w, offsets, trans_w=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = gg.grouped_gemm(a, w, offsets, trans_w=True)
    # New routing in the same buffers: the replay reads the offsets on the device.
    offsets.copy_(_offsets([28, 300, 0, 100]))
    graph.replay()
    torch.cuda.synchronize()
    rows, ref = _reference(a, w, offsets, True)
    assert torch.equal(again, eager)
    assert_close(captured[rows], ref, torch.float16, "grouped_gemm graph replay")


def test_empty_extents():
    w = torch.randn(2, 16, 8, dtype=torch.float16, device="cuda")
    empty = gg.grouped_gemm(torch.empty(0, 16, dtype=torch.float16, device="cuda"), w,
                            torch.zeros(3, dtype=torch.int32, device="cuda"))
    assert empty.shape == (0, 8)
    zeros = gg.grouped_gemm(torch.empty(5, 0, dtype=torch.float16, device="cuda"), w[:, :0],
                            torch.tensor([0, 2, 5], dtype=torch.int32, device="cuda"))
    assert zeros.shape == (5, 8) and torch.equal(zeros, torch.zeros_like(zeros))
    no_expert = gg.grouped_gemm(torch.randn(5, 16, dtype=torch.float16, device="cuda"), w[:0],
                                torch.zeros(1, dtype=torch.int32, device="cuda"))
    assert no_expert.shape == (5, 8)


def test_strided_views_are_read():
    counts, K, N = [40, 60], 128, 256
    a_wide = randn((100, 2 * K), torch.float16, 5)
    w = randn((2, N, K), torch.float16, 6, scale=K ** -0.5)
    a = a_wide[:, ::2]
    offsets = _offsets(counts)
    c = gg.grouped_gemm(a, w, offsets, trans_w=True)
    rows, ref = _reference(a, w, offsets, True)
    assert_close(c[rows], ref, torch.float16, "grouped_gemm strided a")
