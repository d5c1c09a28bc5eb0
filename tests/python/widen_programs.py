"""A program lowered on more threads than it declares (src/transform/widen_threads.h):
FlashAttention's forward pass on 128 x 128 tiles and one warpgroup, whose score and output
tiles need 256 registers a thread, ragged sequence lengths masked. Shared by
tests/python/cpu/test_widen_threads.py (interpreters) and tests/python/gpu/test_widen_threads_gpu.py."""
import math

import torch

import tegula
import tegula.language as T


def attention(seq, dim=128, block=128, threads=128, target="sm_90a", keep_threads=False):
    scale = 1.0 / math.sqrt(dim) * 1.44269504  # log2(e)

    @T.prim_func
    def attention(Q: T.Tensor((seq, dim), "float16"), K: T.Tensor((seq, dim), "float16"),
                  V: T.Tensor((seq, dim), "float16"), O: T.Tensor((seq, dim), "float16")):
        with T.Kernel(T.ceildiv(seq, block), threads=threads) as bx:
            Q_shared = T.alloc_shared((block, dim), "float16")
            K_shared = T.alloc_shared((block, dim), "float16")
            V_shared = T.alloc_shared((block, dim), "float16")
            acc_s = T.alloc_fragment((block, block), "float32")
            acc_s_cast = T.alloc_fragment((block, block), "float16")
            acc_o = T.alloc_fragment((block, dim), "float32")
            m = T.alloc_fragment((block,), "float32")
            m_prev = T.alloc_fragment((block,), "float32")
            alpha = T.alloc_fragment((block,), "float32")
            row_sum = T.alloc_fragment((block,), "float32")
            l = T.alloc_fragment((block,), "float32")
            T.copy(Q[bx * block, 0], Q_shared)
            T.clear(acc_o)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            for kb in T.Pipelined(T.ceildiv(seq, block), num_stages=1):
                T.copy(K[kb * block, 0], K_shared)
                T.copy(V[kb * block, 0], V_shared)
                for i, j in T.Parallel(block, block):
                    acc_s[i, j] = T.if_then_else(kb * block + j < seq, 0, -T.infinity("float32"))
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(block):
                    alpha[i] = T.exp2((m_prev[i] - m[i]) * scale)
                for i, j in T.Parallel(block, block):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(block):
                    l[i] = l[i] * alpha[i] + row_sum[i]
                for i, j in T.Parallel(block, dim):
                    acc_o[i, j] *= alpha[i]
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block, dim):
                acc_o[i, j] /= l[i]
            T.copy(acc_o, O[bx * block, 0])

    configs = {"tegula.keep_threads": True} if keep_threads else None
    return tegula.compile(attention, out_idx=[-1], target=target, pass_configs=configs)


def expected(q, k, v):
    """softmax(q kᵀ / sqrt(d)) v in float64."""
    s = q.double() @ k.double().T / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ v.double()
