"""Kernels whose gemms run on two instructions on sm_90a: wgmma for those that fit a
warpgroup, mma.sync for one that does not (a 32-row tile), sharing a shared-memory
operand that wgmma keeps in its 128-byte panels. Shared by cpu/test_mixed_gemm.py and
gpu/test_mixed_gemm_gpu.py. Each returns (prim_func, torch reference of the inputs)."""
import torch

import tegula.language as T


def shared_operand_two_paths(M, L, D, S=32, threads=256):
    """Attention-backward's dQ pattern: P = K Q^T per block of S rows of Q (M x S, on
    wgmma), then dQ = P^T K (S x D, too few rows for a warpgroup: mma.sync), reading K's
    shared tile, which the first gemm's wgmma keeps in panels when D * 2 > 128 bytes.
    L (rows of Q) may be ragged."""

    @T.prim_func
    def main(K: T.Tensor((M, D), "float16"), Q: T.Tensor((L, D), "float16"),
             P: T.Tensor((M, L), "float32"), dQ: T.Tensor((L, D), "float32")):
        with T.Kernel(T.ceildiv(L, S), threads=threads) as b:
            K_s = T.alloc_shared((M, D), "float16")
            Q_s = T.alloc_shared((S, D), "float16")
            P_s = T.alloc_shared((M, S), "float16")
            p = T.alloc_fragment((M, S), "float32")
            dq = T.alloc_fragment((S, D), "float32")
            T.copy(K, K_s)
            T.copy(Q[b * S, 0], Q_s)
            T.gemm(K_s, Q_s, p, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(p, P[0, b * S])
            T.copy(p, P_s)
            T.gemm(P_s, K_s, dq, transpose_A=True, clear_accum=True)
            T.copy(dq, dQ[b * S, 0])

    def ref(K, Q):
        p = K.double() @ Q.double().T
        return p, p.to(torch.float16).double().T @ K.double()

    return main, ref
