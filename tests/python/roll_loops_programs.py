"""Programs whose fragments do not fit a thread's registers (more than 255 words a thread),
shared by cpu/test_roll_loops.py and gpu/test_roll_loops_gpu.py: a row softmax and an RMS
norm holding a (block_M, N) float32 tile of whole rows, written as a TileLang author writes
them for short rows, run on long ones (roll_loops then rolls their per-element code)."""
import torch

import tegula.language as T


def wide_softmax(M, N, block_M, threads=128, dtype="float32"):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            rows = T.alloc_fragment((block_M, N), "float32")
            top = T.alloc_fragment((block_M,), "float32")
            total = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], rows)
            T.reduce_max(rows, top, dim=1)
            for i, j in T.Parallel(block_M, N):
                rows[i, j] = T.exp(rows[i, j] - top[i])
            T.reduce_sum(rows, total, dim=1)
            for i, j in T.Parallel(block_M, N):
                rows[i, j] = rows[i, j] / total[i]
            T.copy(rows, Y[bx * block_M, 0])
    return main


def wide_rms_norm(M, N, block_M, threads=128, eps=1e-6):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            rows = T.alloc_fragment((block_M, N), "float32")
            squares = T.alloc_fragment((block_M, N), "float32")
            scale = T.alloc_fragment((block_M,), "float32")
            T.copy(X[bx * block_M, 0], rows)
            for i, j in T.Parallel(block_M, N):
                squares[i, j] = rows[i, j] * rows[i, j]
            T.reduce_sum(squares, scale, dim=1)
            for i in T.Parallel(block_M):
                scale[i] = T.rsqrt(scale[i] / N + eps)
            for i, j in T.Parallel(block_M, N):
                rows[i, j] = rows[i, j] * scale[i] * W[j]
            T.copy(rows, Y[bx * block_M, 0])
    return main


def softmax_ref(x):
    return torch.softmax(x.double(), -1)


def rms_norm_ref(x, w, eps=1e-6):
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.double()
