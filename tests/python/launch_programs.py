"""Programs of the barriers between blocks (T.sync_grid) and of thread block clusters
(T.ClusterKernel, the cluster barrier and rank), shared by cpu/test_grid_cluster.py and
gpu/test_grid_cluster_gpu.py, with what torch says they compute."""
import torch

import tegula.language as T


def ceildiv(a, b):
    return (a + b - 1) // b


def mirror_program(N, block=64, threads=128, dynamic=False):
    """A = 2 X, a grid barrier, then A[j] += A[N-1-j], read inside a T.Parallel loop that a
    second barrier splits (TileLang's cooperative test, with an input): every block reads
    what another block wrote."""
    n = T.dynamic("n") if dynamic else N

    @T.prim_func
    def mirror(X: T.Tensor((n,), "float32"), A: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=threads) as bx:
            mirrored = T.alloc_fragment((block,), "float32")
            for i in T.Parallel(block):
                A[bx * block + i] = X[bx * block + i] * 2
            T.sync_grid()
            for i in T.Parallel(block):
                mirrored[i] = A[n - 1 - (bx * block + i)]
                T.sync_grid()
                A[bx * block + i] = A[bx * block + i] + mirrored[i]

    return mirror


def mirror_expected(x):
    return 2 * (x + x.flip(0))


def centre_program(N, block=128, threads=128):
    """Out = X - mean(X): each block sums its tile into a workspace, a grid barrier, then
    every block sums all the partial sums (a statistic of the whole tensor in one kernel)."""
    blocks = ceildiv(N, block)

    @T.prim_func
    def centre(X: T.Tensor((N,), "float32"), Out: T.Tensor((N,), "float32")):
        partial = T.alloc_global((blocks,), "float32")
        with T.Kernel(blocks, threads=threads) as bx:
            tile = T.alloc_fragment((1, block), "float32")
            part = T.alloc_fragment((1,), "float32")
            parts = T.alloc_fragment((1, blocks), "float32")
            total = T.alloc_fragment((1,), "float32")
            for i in T.Parallel(block):
                tile[0, i] = X[bx * block + i]
            T.reduce_sum(tile, part, dim=1)
            T.copy(part, partial[bx:bx + 1])
            T.sync_grid()
            for b in T.Parallel(blocks):
                parts[0, b] = partial[b]
            T.reduce_sum(parts, total, dim=1)
            for i in T.Parallel(block):
                Out[bx * block + i] = X[bx * block + i] - total[0] / N

    return centre


def centre_expected(x):
    return (x.double() - x.double().mean()).float()


def ranks_program(grid, cluster_dims, threads=64):
    """Out[by, bx] = (rank in the cluster, cluster size, cluster id along x and y)."""
    gx, gy = grid

    @T.prim_func
    def ranks(Out: T.Tensor((gy, gx, 4), "int32")):
        with T.ClusterKernel(gx, gy, threads=threads, cluster_dims=cluster_dims) as (bx, by):
            if T.get_thread_binding() == 0:
                Out[by, bx, 0] = T.block_rank_in_cluster()
                Out[by, bx, 1] = T.get_cluster_size()
                Out[by, bx, 2] = T.get_cluster_id(0)
                Out[by, bx, 3] = T.get_cluster_id(1)

    return ranks


def ranks_expected(grid, cluster_dims):
    gx, gy = grid
    cx, cy = cluster_dims[0], cluster_dims[1] if len(cluster_dims) > 1 else 1
    out = torch.empty((gy, gx, 4), dtype=torch.int32)
    for by in range(gy):
        for bx in range(gx):
            out[by, bx] = torch.tensor([bx % cx + (by % cy) * cx, cx * cy, bx // cx, by // cy])
    return out


def exchange_program(blocks, cluster, width=128, threads=128, split=False):
    """W = 2 X + 1, a cluster barrier (T.cluster_sync, or its halves with work between),
    then Out[b] = W[the next block of b's cluster]."""

    @T.prim_func
    def exchange(X: T.Tensor((blocks, width), "float32"), W: T.Tensor((blocks, width), "float32"),
                 Out: T.Tensor((blocks, width), "float32")):
        with T.ClusterKernel(blocks, threads=threads, cluster_dims=cluster) as bx:
            for i in T.Parallel(width):
                W[bx, i] = X[bx, i] * 2 + 1
            if split:
                T.cluster_arrive()
                for i in T.Parallel(width):
                    Out[bx, i] = 0
                T.cluster_wait()
            else:
                T.cluster_sync()
            partner = bx - bx % cluster + (T.block_rank_in_cluster() + 1) % cluster
            for i in T.Parallel(width):
                Out[bx, i] = W[partner, i]

    return exchange


def exchange_expected(x, cluster):
    w = 2 * x + 1
    partner = [b - b % cluster + (b % cluster + 1) % cluster for b in range(x.shape[0])]
    return w[partner]
