"""Programs whose T.atomic_add groups run as packed atomics (atomic_add_x4 for float,
atomic_add_x2 for half and bfloat16: the split-K and backward-pass epilogues that add a
tile into a global accumulator many blocks share), shared by cpu/test_packed_atomics.py
and gpu/test_packed_atomics_gpu.py.

Each builder returns a prim_func over X (splits, M, N) float32 and Y (M, N) of `dtype`;
block (bx, by, bz) adds `scale` times its tile of X[bz] into Y, so that Y ends as
Y0 + scale * X.sum(0) (`expected`). The values are small integers, exact in every dtype and
in any order of the adds."""
import torch

import tegula.language as T


def tile_from_shared(M, N, splits, dtype="float32", block_M=32, block_N=64, scale=2.0, threads=128):
    """T.atomic_add(Y[tile], shared): the region form of TileLang's dK/dV epilogue."""

    @T.prim_func
    def main(X: T.Tensor((splits, M, N), "float32"), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            f = T.alloc_fragment((block_M, block_N), "float32")
            s = T.alloc_shared((block_M, block_N), "float32")
            T.copy(X[bz, by * block_M, bx * block_N], f)
            for i, j in T.Parallel(block_M, block_N):
                f[i, j] = f[i, j] * scale
            T.copy(f, s)
            T.atomic_add(Y[by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N], s)

    return main


def element_from_fragment(M, N, splits, dtype="float32", block_M=32, block_N=64, scale=2.0, threads=128,
                          memory_order=None):
    """T.atomic_add(Y[i, j], f[i, j]) in a T.Parallel nest, the value a fragment's element."""

    @T.prim_func
    def main(X: T.Tensor((splits, M, N), "float32"), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            f = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(X[bz, by * block_M, bx * block_N], f)
            for i, j in T.Parallel(block_M, block_N):
                T.atomic_add(Y[by * block_M + i, bx * block_N + j], f[i, j] * scale, memory_order=memory_order)

    return main


def inputs(M, N, splits, dtype="float32", seed=0, device="cpu"):
    """X (small integers in [-8, 8]) and a starting Y (integers too, so nothing rounds)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-8, 9, (splits, M, N), generator=g).float()
    y = torch.randint(-4, 5, (M, N), generator=g).to(getattr(torch, dtype))
    return x.to(device), y.to(device)


def expected(x, y0, scale=2.0):
    return (y0.double() + scale * x.double().sum(0)).to(y0.dtype)
