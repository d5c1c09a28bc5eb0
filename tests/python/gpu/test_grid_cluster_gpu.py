"""The programs of launch_programs.py on the GPU, against torch: T.sync_grid in a
cooperative launch (blocks reading what other blocks wrote before the barrier), thread
block clusters (rank, shape, the cluster barrier ordering global memory), a cluster GEMM,
and the launcher's refusals: a cooperative grid larger than the GPU holds at once, and
cluster_dims that do not divide the grid of a call."""
import pytest
import torch

import launch_programs as lp
import tegula
import tegula.language as T
from helpers import rel_err

pytestmark = pytest.mark.gpu


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).cuda()


@pytest.mark.parametrize("N", [1024, 1000, 64 * 132])
def test_grid_barrier_exchanges_between_blocks(N):
    kernel = tegula.compile(lp.mirror_program(N))
    x = randn(N, seed=N)
    a = torch.full((N,), float("nan"), device="cuda")
    kernel(x, a)
    torch.testing.assert_close(a.cpu(), lp.mirror_expected(x.cpu()), rtol=0, atol=0)


def test_grid_barrier_tilelang_cooperative_program():
    # TileLang's test_grid_sync: every element ends as N - 1 (the first phase overwrites A).
    N, block = 1024, 64

    @T.prim_func
    def kernel(A: T.Tensor((N), T.float32)):
        with T.Kernel(T.ceildiv(N, block), threads=128) as bx:
            A_local = T.alloc_fragment((block), dtype=T.float32)
            n_idx = bx * block
            for i in T.Parallel(block):
                A[n_idx + i] = n_idx + i
            T.sync_grid()
            for i in T.Parallel(block):
                A_local[i] = A[N - n_idx - i - 1]
                T.sync_grid()
                A[n_idx + i] = A[n_idx + i] + A_local[i]

    a = torch.rand(N, device="cuda")
    tegula.compile(kernel)(a)
    assert torch.equal(a, torch.full_like(a, N - 1))


@pytest.mark.parametrize("N", [4096, 1000, 65536 + 77])
def test_grid_barrier_after_a_reduction(N):
    kernel = tegula.compile(lp.centre_program(N), out_idx=[-1])
    x = randn(N, seed=N + 1)
    out = kernel(x)
    assert rel_err(out.cpu(), lp.centre_expected(x.cpu())) < 1e-5


def test_cooperative_grid_too_large_is_refused():
    kernel = tegula.compile(lp.mirror_program(0, dynamic=True))
    x = randn(64 * 40, seed=3)
    a = torch.empty_like(x)
    kernel(x, a)  # 40 blocks: resident at once
    torch.testing.assert_close(a.cpu(), lp.mirror_expected(x.cpu()), rtol=0, atol=0)
    big = torch.zeros(64 * 100_000, device="cuda")
    with pytest.raises(ValueError, match=r"T.sync_grid needs every block of the grid resident on the GPU at once, "
                                         r"but the grid \(100000, 1, 1\) has 100000 blocks \(with n=6400000\)"):
        kernel(big, torch.empty_like(big))


@pytest.mark.parametrize("grid,cluster", [((8, 4), (2, 2)), ((8, 2), (4,)), ((6, 3), (3, 1, 1))])
def test_rank_in_cluster(grid, cluster):
    out = tegula.compile(lp.ranks_program(grid, cluster), out_idx=[-1])()
    assert torch.equal(out.cpu(), lp.ranks_expected(grid, cluster))


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("blocks,cluster", [(8, 4), (264, 2), (96, 8)])
def test_cluster_barrier_exchanges_within_a_cluster(blocks, cluster, split):
    kernel = tegula.compile(lp.exchange_program(blocks, cluster, split=split), out_idx=[-1])
    x = randn(blocks, 128, seed=blocks * cluster + split)
    w = torch.full_like(x, float("nan"))
    torch.testing.assert_close(kernel(x, w).cpu(), lp.exchange_expected(x.cpu(), cluster), rtol=0, atol=0)


def test_cluster_dims_must_divide_the_grid_of_a_call():
    n = T.dynamic("n")

    @T.prim_func
    def f(A: T.Tensor((n,), "float32")):
        with T.ClusterKernel(T.ceildiv(n, 64), threads=64, cluster_dims=2) as bx:
            for i in T.Parallel(64):
                A[bx * 64 + i] = T.block_rank_in_cluster()

    kernel = tegula.compile(f)
    a = torch.zeros(256, device="cuda")
    kernel(a)
    assert a.view(4, 64)[:, 0].tolist() == [0, 1, 0, 1]
    with pytest.raises(ValueError, match=r"cluster_dims=\(2, 1, 1\) must divide the grid, but this call's grid is "
                                         r"\(3, 1, 1\) \(with n=192\)"):
        kernel(torch.zeros(192, device="cuda"))


def test_cluster_gemm():
    # TileLang's test_cluster_launch kernel: a pipelined GEMM launched in clusters of 2.
    M = N = K = 1024
    bm, bn, bk = 128, 128, 32

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.ClusterKernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128, cluster_dims=(2, 1, 1)) as (bx, by):
            A_shared = T.alloc_shared((bm, bk), "float16")
            B_shared = T.alloc_shared((bk, bn), "float16")
            C_local = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_shared)
                T.copy(B[k * bk, bx * bn], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * bm, bx * bn])

    kernel = tegula.compile(gemm, out_idx=[-1])
    assert "__cluster_dims__(2, 1, 1)" in kernel.get_kernel_source()
    a, b = randn(M, K, seed=1).half(), randn(K, N, seed=2).half()
    c = kernel(a, b)
    assert rel_err(c.double().cpu(), (a.double() @ b.double()).cpu()) < 2e-3
