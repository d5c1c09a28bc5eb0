"""The same GEMM, RMSNorm and softmax written twice: in the eager @tegula.jit form (the
function is the kernel body, sizes from T.const, outputs from T.empty) and in the lazy
form (a function of the sizes returning a T.prim_func, out_idx on the output). Each pair
names its kernel alike, so the two compile to the same CUDA source, byte for byte.
Shared by tests/python/cpu/test_eager_jit.py and tests/python/gpu/test_eager_jit_gpu.py."""
import tegula
import tegula.language as T

LOG2E = 1.4426950408889634


# ---- GEMM: C = A @ B, pipelined, tensor cores (wgmma on sm_90a) ----

def eager_gemm(target="auto"):
    @tegula.jit(target=target)
    def gemm(A, B, block_M=128, block_N=128, block_K=64, dtype="float16", accum_dtype="float32", num_stages=3,
             threads=256):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), dtype)
        B: T.Tensor[[K, N], dtype]
        C = T.empty((M, N), dtype)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])
        return C

    return gemm


def lazy_gemm(target="auto"):
    @tegula.jit(out_idx=[-1], target=target)
    def gemm_program(M, N, K, block_M=128, block_N=128, block_K=64, dtype="float16", accum_dtype="float32",
                     num_stages=3, threads=256):
        @T.prim_func
        def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
                A_shared = T.alloc_shared((block_M, block_K), dtype)
                B_shared = T.alloc_shared((block_K, block_N), dtype)
                C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
                T.clear(C_local)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                    T.copy(A[by * block_M, k * block_K], A_shared)
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                    T.gemm(A_shared, B_shared, C_local)
                T.copy(C_local, C[by * block_M, bx * block_N])

        return gemm

    return gemm_program


# ---- RMSNorm over rows: Y = X / sqrt(mean(X²) + eps) * W; any number of rows ----

def eager_rms_norm(target="auto"):
    @tegula.jit(target=target)
    def rms_norm(X, W, eps=1e-6, blk_m=4, threads=128, dtype="float16"):
        M = T.dynamic("m")
        N = T.const("N")
        X: T.Tensor((M, N), dtype)
        W: T.Tensor((N,), dtype)
        Y = T.empty((M, N), dtype)
        inv_n = 1.0 / N
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            x = T.alloc_fragment((blk_m, N), dtype)
            sq = T.alloc_fragment((blk_m, N), "float32")
            ss = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m, 0], x)
            for i, j in T.Parallel(blk_m, N):
                sq[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
            T.reduce_sum(sq, ss, dim=1)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = T.cast(T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                                 * T.cast(W[j], "float32"), dtype)
            T.copy(x, Y[bx * blk_m, 0])
        return Y

    return rms_norm


def lazy_rms_norm(target="auto"):
    @tegula.jit(out_idx=[-1], target=target)
    def rms_norm_program(N, eps=1e-6, blk_m=4, threads=128, dtype="float16"):
        M = T.dynamic("m")
        inv_n = 1.0 / N

        @T.prim_func
        def rms_norm(X: T.Tensor((M, N), dtype), W: T.Tensor((N,), dtype), Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                x = T.alloc_fragment((blk_m, N), dtype)
                sq = T.alloc_fragment((blk_m, N), "float32")
                ss = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], x)
                for i, j in T.Parallel(blk_m, N):
                    sq[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
                T.reduce_sum(sq, ss, dim=1)
                for i, j in T.Parallel(blk_m, N):
                    x[i, j] = T.cast(T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                                     * T.cast(W[j], "float32"), dtype)
                T.copy(x, Y[bx * blk_m, 0])

        return rms_norm

    return rms_norm_program


# ---- softmax over rows, through exp2 ----

def eager_softmax(target="auto"):
    @tegula.jit(target=target)
    def softmax(X, blk_m=4, threads=128, dtype="float16"):
        M = T.dynamic("m")
        N = T.const("N")
        X: T.Tensor((M, N), dtype)
        Y = T.empty((M, N), dtype)
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            x = T.alloc_fragment((blk_m, N), dtype)
            s = T.alloc_fragment((blk_m, N), "float32")
            row_max = T.alloc_fragment((blk_m,), "float32")
            row_sum = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m, 0], x)
            for i, j in T.Parallel(blk_m, N):
                s[i, j] = T.cast(x[i, j], "float32") * LOG2E
            T.reduce_max(s, row_max, dim=1)
            for i, j in T.Parallel(blk_m, N):
                s[i, j] = T.exp2(s[i, j] - row_max[i])
            T.reduce_sum(s, row_sum, dim=1)
            for i, j in T.Parallel(blk_m, N):
                x[i, j] = T.cast(s[i, j] / row_sum[i], dtype)
            T.copy(x, Y[bx * blk_m, 0])
        return Y

    return softmax


def lazy_softmax(target="auto"):
    @tegula.jit(out_idx=[-1], target=target)
    def softmax_program(N, blk_m=4, threads=128, dtype="float16"):
        M = T.dynamic("m")

        @T.prim_func
        def softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                x = T.alloc_fragment((blk_m, N), dtype)
                s = T.alloc_fragment((blk_m, N), "float32")
                row_max = T.alloc_fragment((blk_m,), "float32")
                row_sum = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], x)
                for i, j in T.Parallel(blk_m, N):
                    s[i, j] = T.cast(x[i, j], "float32") * LOG2E
                T.reduce_max(s, row_max, dim=1)
                for i, j in T.Parallel(blk_m, N):
                    s[i, j] = T.exp2(s[i, j] - row_max[i])
                T.reduce_sum(s, row_sum, dim=1)
                for i, j in T.Parallel(blk_m, N):
                    x[i, j] = T.cast(s[i, j] / row_sum[i], dtype)
                T.copy(x, Y[bx * blk_m, 0])

        return softmax

    return softmax_program


# ---- T.ptr: parameters passed as pointers, made tensors by T.make_tensor ----

def pointer_gemm(target="auto"):
    """C = A @ B with A, B, C given as T.ptr parameters and their sizes as int constants
    (TileLang's test_jit2_gemm_ptr); C is written in place."""
    @tegula.jit(target=target)
    def gemm_ptr(A: T.ptr, B: T.ptr, C: T.ptr, M: int, N: int, K: int, dtype: T.dtype, out_dtype: T.dtype,
                 block_M: int = 64, block_N: int = 64, block_K: int = 32):
        A = T.make_tensor(A, (M, K), dtype)
        B = T.make_tensor(B, (K, N), dtype)
        C = T.make_tensor(C, (M, N), out_dtype)
        with T.Kernel(T.ceildiv(M, block_M), T.ceildiv(N, block_N), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), out_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=3):
                T.copy(A[bx * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, by * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[bx * block_M, by * block_N])

    return gemm_ptr


def pointer_scale(target="auto"):
    """y[i] = 2 x[i] + 1 over n elements, x and y T.ptr parameters; blocks of 128 with a
    guard, so n need not be a multiple of 128."""
    @tegula.jit(target=target)
    def scale(x: T.ptr, y: T.ptr(T.float32), n: int):
        x = T.make_tensor(x, (n,), T.float32)
        y = T.make_tensor(y, n, T.float32)
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    y[bx * 128 + i] = x[bx * 128 + i] * 2.0 + 1.0

    return scale
