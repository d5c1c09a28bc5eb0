"""Programs with the T.gemm operand forms of TileLang's DeepSeek examples: a region of a
shared buffer (sparse MLA: T.gemm(Q_shared[:, :D], KV_shared, S) then
T.gemm(Q_shared[:, D:], K_tail, S)) and A in registers with transpose_A (the DSA indexer
backward), shared by the CPU and GPU tests (cpu/test_gemm_regions.py,
gpu/test_gemm_regions_gpu.py). Each returns (prim_func, torch reference of the inputs)."""
import tegula.language as T


def split_k(M, N, D, tail, block_M=64, block_N=64, threads=128, dtype="float16"):
    """S = Q K^T over a (M, D + tail) Q tile stored once in shared memory, read as its
    first D columns against K (N, D) and its last `tail` columns against K_tail (N, tail):
    two gemms into one accumulator, as the sparse MLA forward does."""
    W = D + tail

    @T.prim_func
    def main(Q: T.Tensor((M, W), dtype), K: T.Tensor((N, W), dtype), S: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            q = T.alloc_shared((block_M, W), dtype)
            kv = T.alloc_shared((block_N, D), dtype)
            kt = T.alloc_shared((block_N, tail), dtype)
            s = T.alloc_fragment((block_M, block_N), "float32")
            T.copy(Q[by * block_M, 0], q)
            T.copy(K[bx * block_N, 0], kv)
            T.copy(K[bx * block_N, D], kt)
            T.clear(s)
            T.gemm(q[:, :D], kv, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.gemm(q[:, D:], kt, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(s, S[by * block_M, bx * block_N])

    def ref(Q, K):
        return Q.double() @ K.double().T

    return main, ref


def region_as_b(M, N, D, tail, block_M=64, threads=128, dtype="float16"):
    """dKV = P^T Q over the two column ranges of one Q tile: Q_shared[:, :D] and
    Q_shared[:, D:] as B (K x N, N-major), offset along N (sparse MLA's backward), with A
    transposed from shared memory."""
    W = D + tail

    @T.prim_func
    def main(P: T.Tensor((M, N), dtype), Q: T.Tensor((M, W), dtype), O: T.Tensor((N, D), "float32"),
             Ot: T.Tensor((N, tail), "float32")):
        with T.Kernel(1, threads=threads):
            p = T.alloc_shared((M, N), dtype)
            q = T.alloc_shared((M, W), dtype)
            o = T.alloc_fragment((N, D), "float32")
            ot = T.alloc_fragment((N, tail), "float32")
            T.copy(P, p)
            T.copy(Q, q)
            T.gemm(p, q[:, :D], o, transpose_A=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            T.clear(ot)
            T.gemm(p, q[:, D:], ot, transpose_A=True, policy=T.GemmWarpPolicy.FullCol)
            T.copy(o, O)
            T.copy(ot, Ot)

    def ref(P, Q):
        full = P.double().T @ Q.double()
        return full[:, :D], full[:, D:]

    return main, ref


def sub_rectangle(M, N, K, r0, c0, rows, cols, threads=128, dtype="float16"):
    """C = A[r0:r0+M, c0:c0+K] @ B[k-rows of a bigger buffer]: a region offset along both
    dimensions of each operand (A from row r0, column c0; B from row c0, column 16)."""

    @T.prim_func
    def main(A: T.Tensor((rows, cols), dtype), B: T.Tensor((cols, N + 16), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            a = T.alloc_shared((rows, cols), dtype)
            b = T.alloc_shared((cols, N + 16), dtype)
            c = T.alloc_fragment((M, N), "float32")
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a[r0:r0 + M, c0:c0 + K], b[c0:c0 + K, 16:16 + N], c, clear_accum=True)
            T.copy(c, C)

    def ref(A, B):
        return A.double()[r0:r0 + M, c0:c0 + K] @ B.double()[c0:c0 + K, 16:16 + N]

    return main, ref


def pipelined_regions(M, N, D, tail, block_N=32, threads=128, dtype="float16", stages=2):
    """The sparse MLA loop shape: Q (M, D + tail) loaded once, K blocks pipelined through
    staged buffers, each iteration S = Q[:, :D] K^T + Q[:, D:] K_tail^T then O += S-cast V
    with V = K[:, :D]; the output is sum over blocks of S_i K_i[:, :D]."""
    W = D + tail

    @T.prim_func
    def main(Q: T.Tensor((M, W), dtype), K: T.Tensor((N, W), dtype), O: T.Tensor((M, D), "float32")):
        with T.Kernel(1, threads=threads):
            q = T.alloc_shared((M, W), dtype)
            kv = T.alloc_shared((block_N, D), dtype)
            kt = T.alloc_shared((block_N, tail), dtype)
            s = T.alloc_fragment((M, block_N), "float32")
            s_sh = T.alloc_shared((M, block_N), dtype)
            o = T.alloc_fragment((M, D), "float32")
            T.copy(Q, q)
            T.clear(o)
            for i in T.Pipelined(T.ceildiv(N, block_N), num_stages=stages):
                T.copy(K[i * block_N, 0], kv)
                T.copy(K[i * block_N, D], kt)
                T.gemm(q[:, :D], kv, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)
                T.gemm(q[:, D:], kt, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(s, s_sh)
                T.gemm(s_sh, kv, o, policy=T.GemmWarpPolicy.FullRow)
            T.copy(o, O)

    def ref(Q, K):
        import torch

        q, k = Q.double(), K.double()
        nb = (N + block_N - 1) // block_N
        out = torch.zeros(M, D, dtype=torch.float64)
        for i in range(nb):
            kb = torch.zeros(block_N, W, dtype=torch.float64)
            rows = k[i * block_N:(i + 1) * block_N]
            kb[:rows.shape[0]] = rows
            s = (q @ kb.T).to(getattr(torch, dtype)).double()
            out += s @ kb[:, :D]
        return out

    return main, ref


def register_a_transposed(BS, HQ, D, threads=128, dtype="bfloat16", policy="Square"):
    """TileLang's DSA indexer backward: G = S^T K with S a gemm's result cast to `dtype` in
    registers (BS x HQ, the accumulator of S = X W^T) and transpose_A=True, so the gemm
    reads S^T (HQ x BS) from registers: dQ = S^T K (HQ x D)."""

    @T.prim_func
    def main(X: T.Tensor((BS, D), dtype), W: T.Tensor((HQ, D), dtype), K: T.Tensor((BS, D), dtype),
             G: T.Tensor((HQ, D), "float32")):
        with T.Kernel(1, threads=threads):
            x = T.alloc_shared((BS, D), dtype)
            w = T.alloc_shared((HQ, D), dtype)
            k = T.alloc_shared((BS, D), dtype)
            s = T.alloc_fragment((BS, HQ), "float32")
            s_cast = T.alloc_fragment((BS, HQ), dtype)
            g = T.alloc_fragment((HQ, D), "float32")
            T.copy(X, x)
            T.copy(W, w)
            T.copy(K, k)
            T.gemm(x, w, s, transpose_B=True, clear_accum=True)
            T.copy(s, s_cast)
            T.gemm(s_cast, k, g, transpose_A=True, clear_accum=True, policy=getattr(T.GemmWarpPolicy, policy))
            T.copy(g, G)

    def ref(X, W, K):
        import torch

        s = (X.double() @ W.double().T).to(getattr(torch, dtype)).double()
        return s.T @ K.double()

    return main, ref
