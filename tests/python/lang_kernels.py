"""Small kernels that exercise one part of the language each, shared by the compile-only
tests (tests/python/cpu/test_language_compile.py) and the GPU tests
(tests/python/gpu/test_language.py). Each is written the TileLang way."""
import tegula
import tegula.language as T


def column_sums(M, N, block_m=16, threads=128, target="auto"):
    """S[j] += sum_i X[i, j] through T.atomic_add from every block."""

    @T.prim_func
    def col_sum(X: T.Tensor((M, N), "float32"), S: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bx:
            for i, j in T.Parallel(block_m, N):
                if bx * block_m + i < M:
                    T.atomic_add(S[j], X[bx * block_m + i, j])

    return tegula.compile(col_sum, target=target)


def serial_row_sums(M, N, target="auto"):
    """One block a row: every thread walks the row in a T.serial loop into a T.alloc_var,
    then the sign depends on the block index (an `if` on kernel values)."""

    @T.prim_func
    def row_sum(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=32) as bx:
            acc = T.alloc_var("float32")
            acc = 0.0
            for k in T.serial(N):
                acc += X[bx, k]
            if bx % 2 == 0:
                Y[bx] = acc
            else:
                Y[bx] = -acc

    return tegula.compile(row_sum, target=target)


def math_mix(M, N, dtype="float32", block=(32, 64), target="auto"):
    """Elementwise use of the math intrinsics through a fragment."""
    bm, bn = block

    @T.prim_func
    def mix(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            x = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[by * bm, bx * bn], x)
            for i, j in T.Parallel(bm, bn):
                v = x[i, j]
                x[i, j] = (T.max(T.abs(v), 0.5) + T.sqrt(T.abs(v)) + T.exp2(v * 0.5) - T.log2(T.abs(v) + 1.0)
                           + T.min(v, 0.0) + T.if_then_else(v > 0, 1.0, -1.0) + T.exp(-T.abs(v)) * T.log(2.0)
                           + T.rsqrt(v * v + 1.0))
            T.copy(x, Y[by * bm, bx * bn])

    return tegula.compile(mix, out_idx=[-1], target=target)


def math_mix_reference(x):
    import torch

    v = x.float()
    return (torch.clamp(v.abs(), min=0.5) + v.abs().sqrt() + torch.exp2(v * 0.5) - torch.log2(v.abs() + 1.0)
            + torch.clamp(v, max=0.0) + torch.where(v > 0, 1.0, -1.0) + torch.exp(-v.abs()) * torch.log(
                torch.tensor(2.0)) + torch.rsqrt(v * v + 1.0))


def staged_copy(M, N, block=(64, 64), target="auto"):
    """global -> shared -> fragment -> global, with T.fill / T.clear and an unrolled loop."""
    bm, bn = block

    @T.prim_func
    def staged(X: T.Tensor((M, N), "float16"), Y: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=256) as (bx, by):
            tile = T.alloc_shared((bm, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            T.copy(X[by * bm:(by + 1) * bm, bx * bn:(bx + 1) * bn], tile)
            for r in T.unroll(2):
                for i, j in T.Parallel(bm, bn):
                    acc[i, j] += tile[i, j]
            ones = T.alloc_fragment((bm, bn), "float32")
            T.fill(ones, 1.0)
            for i, j in T.Parallel(bm, bn):
                acc[i, j] = acc[i, j] + ones[i, j]
            T.copy(acc, Y[by * bm, bx * bn])

    return tegula.compile(staged, out_idx=[-1], target=target)


def batched_row_stats(B, M, N, target="auto"):
    """3-D grid; reduce_min, reduce_absmax and reduce_abssum, one with clear=False."""

    @T.prim_func
    def stats(X: T.Tensor((B, M, N), "float32"), O: T.Tensor((B, M, 3), "float32")):
        with T.Kernel(1, M, B, threads=64) as (bx, by, bz):
            x = T.alloc_fragment((1, N), "float32")
            mn = T.alloc_fragment((1,), "float32")
            amax = T.alloc_fragment((1,), "float32")
            asum = T.alloc_fragment((1,), "float32")
            T.copy(X[bz, by, 0], x)
            T.reduce_min(x, mn, dim=1)
            T.reduce_absmax(x, amax, dim=1)
            T.fill(asum, 100.0)
            T.reduce_abssum(x, asum, dim=1, clear=False)
            for i in T.Parallel(1):
                O[bz, by, 0] = mn[i]
                O[bz, by, 1] = amax[i]
                O[bz, by, 2] = asum[i]

    return tegula.compile(stats, out_idx=[-1], target=target)


def scaled_add(N, target="auto"):
    """A scalar argument and a dynamic length."""
    n = T.dynamic("n")

    @T.prim_func
    def axpy(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"), alpha: T.float32,
             Z: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, N), threads=128) as bx:
            for i in T.Parallel(N):
                Z[bx * N + i] = alpha * X[bx * N + i] + Y[bx * N + i]

    return tegula.compile(axpy, out_idx=[-1], target=target)


def gemm_relu_program(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float32", num_stages=3,
                      threads=128):
    """The tensor-core milestone's example: a pipelined, swizzled GEMM with a ReLU epilogue."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.use_swizzle(panel_size=4)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            for i, j in T.Parallel(block_M, block_N):
                C_local[i, j] = T.max(C_local[i, j], 0)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def gemm_variant_program(M, N, K, block_M=64, block_N=64, block_K=32, transpose_A=False, transpose_B=False,
                         a_in_registers=False, dtype="float16", accum_dtype="float32", threads=128, num_stages=2):
    """C = op(A) @ op(B) with A or B stored transposed, A optionally staged through a
    fragment (the register-A gemm attention uses for P @ V), any accumulator type."""
    a_shape, a_tile = ((K, M), (block_K, block_M)) if transpose_A else ((M, K), (block_M, block_K))
    b_shape, b_tile = ((N, K), (block_N, block_K)) if transpose_B else ((K, N), (block_K, block_N))
    policy = T.GemmWarpPolicy.FullRow if a_in_registers else T.GemmWarpPolicy.Square

    @T.prim_func
    def gemm(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared(a_tile, dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            if a_in_registers:
                A_local = T.alloc_fragment((block_M, block_K), dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                if transpose_A:
                    T.copy(A[k * block_K, by * block_M], A_shared)
                else:
                    T.copy(A[by * block_M, k * block_K], A_shared)
                if transpose_B:
                    T.copy(B[bx * block_N, k * block_K], B_shared)
                else:
                    T.copy(B[k * block_K, bx * block_N], B_shared)
                if a_in_registers:
                    T.copy(A_shared, A_local)
                    T.gemm(A_local, B_shared, C_local, transpose_B=transpose_B, policy=policy)
                else:
                    T.gemm(A_shared, B_shared, C_local, transpose_A=transpose_A, transpose_B=transpose_B,
                           policy=policy)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def swizzled_transpose_program(M, N, block_M=64, block_N=64, annotate=True):
    """Y = Xᵀ through a shared tile that T.annotate_layout asks to be swizzled: the tile is
    written along rows and read along columns."""

    @T.prim_func
    def transpose(X: T.Tensor((M, N), "float16"), Y: T.Tensor((N, M), "float16")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            tile = T.alloc_shared((block_M, block_N), "float16")
            out = T.alloc_fragment((block_N, block_M), "float16")
            if annotate:
                T.annotate_layout({tile: T.make_swizzled_layout(tile)})
            T.copy(X[by * block_M, bx * block_N], tile)
            for i, j in T.Parallel(block_N, block_M):
                out[i, j] = tile[j, i]
            T.copy(out, Y[bx * block_N, by * block_M])

    return transpose


def two_kernels_program(M, N):
    """Two `with T.Kernel` blocks over a `T.alloc_global` workspace: C = flip(2 A, 1) + 1."""

    @T.prim_func
    def two(A: T.Tensor((M, N), "float32"), C: T.Tensor((M, N), "float32")):
        D = T.alloc_global((M, N), "float32")
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                D[bx, j] = A[bx, j] * 2
        with T.Kernel(M, threads=64) as bx:
            for j in T.Parallel(N):
                C[bx, j] = D[bx, N - 1 - j] + 1

    return two
