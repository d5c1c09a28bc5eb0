"""Warp-specialised kernels in the shape of attention's backward (TileLang's
example_gqa_bwd): a row of log-sum-exp values copied into a 1-D shared buffer each
iteration, and a gemm too small for wgmma (32 rows: mma.sync) beside those on wgmma.
Shared by cpu/test_bulk_copies.py and gpu/test_bulk_copies_gpu.py; each builder returns
(prim_func, torch reference)."""
import torch

import tegula.language as T


def backward_like(B, N, D=64, block_M=64, block_N=32, stages=2):
    """Per sequence b and key tile bx (block_M rows of K):
      P = exp2(K_tile Q^T * scale - Lse[b])          (block_M x N, through half)
      dK[b, tile] = P Q                              (wgmma, P from registers)
      dQ[b] += P^T K_tile                            (mma.sync, 32-row tiles, atomics)
    """
    scale = 0.125

    @T.prim_func
    def main(Q: T.Tensor((B, N, D), "float16"), K: T.Tensor((B, N, D), "float16"), Lse: T.Tensor((B, N), "float32"),
             dQ: T.Tensor((B, N, D), "float32"), dK: T.Tensor((B, N, D), "float32")):
        with T.Kernel(T.ceildiv(N, block_M), B, threads=128) as (bx, b):
            K_s = T.alloc_shared((block_M, D), "float16")
            q_s = T.alloc_shared((block_N, D), "float16")
            lse_s = T.alloc_shared((block_N,), "float32")
            pT_s = T.alloc_shared((block_M, block_N), "float16")
            s = T.alloc_fragment((block_M, block_N), "float32")
            p = T.alloc_fragment((block_M, block_N), "float16")
            dk = T.alloc_fragment((block_M, D), "float32")
            dq = T.alloc_fragment((block_N, D), "float32")
            T.copy(K[b, bx * block_M: (bx + 1) * block_M, :], K_s)
            T.clear(dk)
            for k in T.Pipelined(T.ceildiv(N, block_N), num_stages=stages):
                T.copy(Q[b, k * block_N: (k + 1) * block_N, :], q_s)
                T.copy(Lse[b, k * block_N: (k + 1) * block_N], lse_s)
                T.clear(s)
                T.gemm(K_s, q_s, s, transpose_B=True)
                for i, j in T.Parallel(block_M, block_N):
                    s[i, j] = T.exp2(s[i, j] * scale - lse_s[j])
                T.copy(s, p)
                T.gemm(p, q_s, dk)
                T.copy(p, pT_s)
                T.clear(dq)
                T.gemm(pT_s, K_s, dq, transpose_A=True)
                for i, j in T.Parallel(block_N, D):
                    T.atomic_add(dQ[b, k * block_N + i, j], dq[i, j])
            T.copy(dk, dK[b, bx * block_M: (bx + 1) * block_M, :])

    def ref(Q, K, Lse):
        Qd, Kd = Q.double(), K.double()
        P = torch.exp2(Kd @ Qd.transpose(1, 2) * scale - Lse.double()[:, None, :]).half().double()
        return P.transpose(1, 2) @ Kd, P @ Qd  # dQ, dK

    return main, ref


def inputs(B, N, D, seed):
    g = torch.Generator().manual_seed(seed)
    Q = (torch.randn(B, N, D, generator=g) / 2).half()
    K = (torch.randn(B, N, D, generator=g) / 2).half()
    Lse = torch.rand(B, N, generator=g) * 2 + 1
    return Q, K, Lse
