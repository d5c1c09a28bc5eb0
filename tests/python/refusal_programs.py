"""Programs at the edges a random program generator found (tests/python/cpu/test_compile_refusals.py
compiles and interprets them, tests/python/gpu/test_compile_refusals_gpu.py runs them):
an attention tile whose P·V wgmma needs more registers than two blocks a SM leave a thread,
a GEMM tile no thread count can hold, reductions of bool fragments and 2-D local arrays."""
import torch

import tegula.language as T

LOG2E = 1.4426950408889634


def attention_program(seq_q, seq_kv, dim, block_M, block_N, threads, heads=2):
    """softmax(Q Kᵀ / sqrt(dim)) V for Q (heads, seq_q, dim), K and V (heads, seq_kv, dim),
    fp16, one block per block_M query rows of a head, an online softmax over block_N keys."""
    scale = LOG2E / dim ** 0.5

    @T.prim_func
    def attention(Q: T.Tensor((heads, seq_q, dim), "float16"), K: T.Tensor((heads, seq_kv, dim), "float16"),
                  V: T.Tensor((heads, seq_kv, dim), "float16"), O: T.Tensor((heads, seq_q, dim), "float16")):
        with T.Kernel(T.ceildiv(seq_q, block_M), heads, threads=threads) as (bx, by):
            Q_s = T.alloc_shared((block_M, dim), "float16")
            K_s = T.alloc_shared((block_N, dim), "float16")
            V_s = T.alloc_shared((block_N, dim), "float16")
            S = T.alloc_fragment((block_M, block_N), "float32")
            P = T.alloc_fragment((block_M, block_N), "float16")
            acc = T.alloc_fragment((block_M, dim), "float32")
            m = T.alloc_fragment((block_M,), "float32")
            m_prev = T.alloc_fragment((block_M,), "float32")
            rescale = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            denom = T.alloc_fragment((block_M,), "float32")
            T.copy(Q[by, bx * block_M:(bx + 1) * block_M, :], Q_s)
            T.fill(acc, 0)
            T.fill(denom, 0)
            T.fill(m, -1e30)
            for kb in T.Pipelined(T.ceildiv(seq_kv, block_N), num_stages=2):
                T.copy(K[by, kb * block_N:(kb + 1) * block_N, :], K_s)
                T.copy(V[by, kb * block_N:(kb + 1) * block_N, :], V_s)
                T.gemm(Q_s, K_s, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)
                T.copy(m, m_prev)
                T.reduce_max(S, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2((m_prev[i] - m[i]) * scale)
                for i, j in T.Parallel(block_M, dim):
                    acc[i, j] *= rescale[i]
                for i, j in T.Parallel(block_M, block_N):
                    S[i, j] = T.exp2(S[i, j] * scale - m[i] * scale)
                T.reduce_sum(S, row_sum, dim=1)
                for i in T.Parallel(block_M):
                    denom[i] = denom[i] * rescale[i] + row_sum[i]
                T.copy(S, P)
                T.gemm(P, V_s, acc, policy=T.GemmWarpPolicy.FullRow)  # MARK-pv
            for i, j in T.Parallel(block_M, dim):
                acc[i, j] /= denom[i]
            T.copy(acc, O[by, bx * block_M:(bx + 1) * block_M, :])

    return attention


def attention_reference(q, k, v):
    s = q.double() @ k.double().transpose(-1, -2) / q.shape[-1] ** 0.5
    return torch.softmax(s, dim=-1) @ v.double()


def wide_gemm_program(block_M, block_N, threads):
    """C (512 x 512, fp32) = A B over K = 64 in one block_M x block_N tile a block."""

    @T.prim_func
    def wide_gemm(A: T.Tensor((512, 64), "float16"), B: T.Tensor((64, 512), "float16"),
                  C: T.Tensor((512, 512), "float32")):
        with T.Kernel(512 // block_N, 512 // block_M, threads=threads) as (bx, by):
            A_s = T.alloc_shared((block_M, 32), "float16")
            B_s = T.alloc_shared((32, block_N), "float16")
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[by * block_M, k * 32], A_s)
                T.copy(B[k * 32, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)  # MARK-wide
            T.copy(C_f, C[by * block_M, bx * block_N])

    return wide_gemm


REDUCE_KINDS = ("sum", "abssum", "max", "min", "absmax")


def bool_reduce_program(kind, rows=16, cols=32):
    """Y[i] = the `kind` reduction of the bool row X[i, :] into a bool, through fragments."""

    @T.prim_func
    def bool_reduce(X: T.Tensor((rows, cols), "bool"), Y: T.Tensor((rows,), "bool")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_fragment((rows, cols), "bool")
            y = T.alloc_fragment((rows,), "bool")
            T.copy(X, x)
            getattr(T, "reduce_" + kind)(x, y, dim=1)
            T.copy(y, Y)

    return bool_reduce


def bool_reduce_expected(kind, x):
    """bool as the integers 0 and 1: max is any, min is all, a sum (of |x| = x) is any."""
    return x.all(dim=1) if kind == "min" else x.any(dim=1)


def local_2d_program(rows, cols):
    """Y[i, c] = sum over r of X[i, c] * r, through a per-thread rows x cols local array."""

    @T.prim_func
    def local_2d(X: T.Tensor((64, cols), "float32"), Y: T.Tensor((64, cols), "float32")):
        with T.Kernel(1, threads=64) as bx:
            acc = T.alloc_local((rows, cols), "float32")
            s = T.alloc_var("float32")
            for i in T.Parallel(64):
                for r in T.serial(rows):
                    for c in T.serial(cols):
                        acc[r, c] = X[i, c] * r
                for c in T.serial(cols):
                    s = 0.0
                    for r in T.serial(rows):
                        s += acc[r, c]
                    Y[i, c] = s

    return local_2d


def local_2d_expected(x, rows):
    return x.double() * (rows * (rows - 1) / 2)
