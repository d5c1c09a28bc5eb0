"""Programs whose generated code uses vector instructions, shared by cpu/test_vectors.py
and gpu/test_vectors_gpu.py: conversions between float types two at a time (CUDA's
__float22half2_rn, __half22float2, __float22bfloat162_rn, __bfloat1622float2,
__nv_cvt_float2_to_fp8x2, __nv_cvt_halfraw2_to_fp8x2, __nv_cvt_fp8x2_to_halfraw2) in a
global-to-global T.copy and in a T.Parallel loop between fragments, and T.vectorized loops
that become float4 / float2 accesses."""
import torch

import tegula.language as T

FLOAT8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
# (source, destination, the CUDA conversion of a pair, the first target that has it)
PAIRS = [
    ("float32", "float16", "__float22half2_rn", 80),
    ("float16", "float32", "__half22float2", 80),
    ("float32", "bfloat16", "__float22bfloat162_rn", 80),
    ("bfloat16", "float32", "__bfloat1622float2", 80),
    ("float32", "float8_e4m3fn", "__nv_cvt_float2_to_fp8x2", 89),
    ("float32", "float8_e5m2", "__nv_cvt_float2_to_fp8x2", 89),
    ("float16", "float8_e4m3fn", "__nv_cvt_halfraw2_to_fp8x2", 89),
    ("float16", "float8_e5m2", "__nv_cvt_halfraw2_to_fp8x2", 89),
    ("float8_e4m3fn", "float16", "__nv_cvt_fp8x2_to_halfraw2", 89),
    ("float8_e5m2", "float16", "__nv_cvt_fp8x2_to_halfraw2", 89),
    ("float8_e4m3fn", "float32", "__nv_cvt_fp8x2_to_halfraw2", 89),
    ("float8_e5m2", "float32", "__nv_cvt_fp8x2_to_halfraw2", 89),
]


def copy_program(M, src, dst):
    """B = A converted by one T.copy of global tensors (M ragged against a block's 256)."""

    @T.prim_func
    def convert(A: T.Tensor((M,), src), B: T.Tensor((M,), dst)):
        with T.Kernel(T.ceildiv(M, 256), threads=128) as bx:
            T.copy(A[bx * 256:bx * 256 + 256], B[bx * 256:bx * 256 + 256])

    return convert


def parallel_program(M, src, dst, per_thread=2):
    """B = A converted register to register: b[i] = a[i] between fragments of
    128 * per_thread elements (an odd per_thread leaves each thread one conversion alone)."""
    tile = 128 * per_thread

    @T.prim_func
    def convert(A: T.Tensor((M,), src), B: T.Tensor((M,), dst)):
        with T.Kernel(T.ceildiv(M, tile), threads=128) as bx:
            a = T.alloc_fragment((tile,), src)
            b = T.alloc_fragment((tile,), dst)
            T.copy(A[bx * tile:bx * tile + tile], a)
            for i in T.Parallel(tile):
                b[i] = a[i]
            T.copy(b, B[bx * tile:bx * tile + tile])

    return convert


def rows_program(rows, cols, src, dst):
    """B = A converted register to register over a (rows, cols) fragment: with cols = 3 a
    thread holds a row's elements under different guards, which stay conversions of one."""

    @T.prim_func
    def convert(A: T.Tensor((rows, cols), src), B: T.Tensor((rows, cols), dst)):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((rows, cols), src)
            b = T.alloc_fragment((rows, cols), dst)
            T.copy(A, a)
            for i, j in T.Parallel(rows, cols):
                b[i, j] = a[i, j]
            T.copy(b, B)

    return convert


def sample(n: int, dtype: str, gen: torch.Generator) -> torch.Tensor:
    """Values of dtype over its whole range and past the narrower types' (NaN, infinities,
    values that overflow float16 and the 8-bit floats, subnormals), in random places."""
    x = torch.randn(n, generator=gen, dtype=torch.float64) * torch.logspace(-9, 6, n, dtype=torch.float64)
    special = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e9, -70000.0, 65520.0, 448.0,
                            464.0, 465.0, -57344.0, 61440.0, 2.0 ** -10, 2.0 ** -17, 2.0 ** -25], dtype=torch.float64)
    where = torch.randperm(n, generator=gen)[:len(special)]
    x[where] = special[:len(where)]
    if dtype in FLOAT8_MAX:  # the 8-bit floats hold only what a conversion to them gives
        return expected(x, dtype)
    return x.to(getattr(torch, dtype))


def expected(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """torch's conversion of x, with CUDA's saturation for the 8-bit floats (out-of-range
    values, infinities included, become the largest finite one; torch gives NaN there)."""
    if dtype in FLOAT8_MAX:
        top = FLOAT8_MAX[dtype]
        x = x.double()
        x = torch.where(torch.isnan(x), x, x.clamp(-top, top))
    return x.to(getattr(torch, dtype))


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal element for element, NaN equal to NaN, -0.0 to 0.0's sign included."""
    a, b = a.double().cpu(), b.double().cpu()
    nan = torch.isnan(a)
    return bool(torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan], b[~nan])
                and torch.equal(torch.signbit(a[~nan]), torch.signbit(b[~nan])))


# ------------------------------------------------------------------ T.vectorized loops

def strided_copy_program(N, M, stride_a, stride_b):
    """B = A of (N, M) T.StridedTensors with strides (1, stride): each thread copies a
    column, contiguous in memory, in a T.vectorized loop."""

    @T.prim_func
    def copy(A: T.StridedTensor[(N, M), (1, stride_a), T.float32],
             B: T.StridedTensor[(N, M), (1, stride_b), T.float32]):
        with T.Kernel(M // 32, threads=32) as bx:
            col = bx * 32 + T.get_thread_binding()
            for row in T.vectorized(N):
                B[row, col] = A[row, col]

    return copy


def scaled_rows_program(N, M, K, out_dtype="float32"):
    """B[r, c] = A[r, c] * C[r, c // K] in a T.vectorized loop over c: C's element stays
    the same for K neighbours, so groups of up to K columns share one load of it."""

    @T.prim_func
    def scale(A: T.Tensor((N, M), "float32"), C: T.Tensor((N, M // K), "float32"),
              B: T.Tensor((N, M), out_dtype)):
        with T.Kernel(N // 32, threads=32) as bx:
            row = bx * 32 + T.get_thread_binding()
            for col in T.vectorized(M):
                B[row, col] = T.cast(A[row, col] * C[row, col // K], out_dtype)

    return scale


def assumed_program(M):
    """A row per thread, its width N dynamic: T.assume(N % 4 == 0) makes every row start
    16-byte aligned, and T.assume(i < N) drops the bounds test."""
    N = T.dynamic("N")

    @T.prim_func
    def copy(A: T.Tensor((M, N), T.float32), B: T.Tensor((M, N), T.float32)):
        with T.Kernel(1, threads=M):
            tid = T.get_thread_binding()
            T.assume(N % 4 == 0)
            for i in T.vectorized(4):
                T.assume(tid * 4 + i < N)
                B[tid, tid * 4 + i] = A[tid, tid * 4 + i] + 1.0

    return copy


def running_sum_program(M, K):
    """B[r] accumulated over a T.vectorized loop: each iteration reads what the previous
    wrote, which no vector can do; the loop stays a loop."""

    @T.prim_func
    def total(A: T.Tensor((M, K), T.float32), B: T.Tensor((M,), T.float32)):
        with T.Kernel(M // 32, threads=32) as bx:
            row = bx * 32 + T.get_thread_binding()
            B[row] = 0.0
            for k in T.vectorized(K):
                B[row] = B[row] + A[row, k]

    return total


def shifted_program(M):
    """B[r, i + 1] = B[r, i] * 2 in a T.vectorized loop over a thread's row: each lane reads
    its left neighbour's result, so the loop must keep its order."""

    @T.prim_func
    def shifted(A: T.Tensor((M, 8), T.float32), B: T.Tensor((M, 8), T.float32)):
        with T.Kernel(M // 32, threads=32) as bx:
            row = bx * 32 + T.get_thread_binding()
            for j in T.vectorized(8):
                B[row, j] = A[row, j]
            for i in T.vectorized(4):
                B[row, i + 1] = B[row, i] * 2.0

    return shifted


def rows_in_parallel_program(rows, cols):
    """B = 2 relu(A), a T.vectorized loop over each row inside a T.Parallel over rows."""

    @T.prim_func
    def rows_fn(A: T.Tensor((rows, cols), T.float32), B: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(rows):
                for j in T.vectorized(cols):
                    B[i, j] = T.max(A[i, j], 0.0) * 2.0

    return rows_fn


def guarded_rows_program(M, N, rows_kept, bM=64, bN=128, dtype="float16"):
    """B[r, c] = A[r, c] * 2 for the rows r < rows_kept (a runtime count), through a shared
    tile: each store sits under `if row < rows_kept:`, a condition the same for the
    consecutive columns one thread writes, so the stores stay 16-byte vectors under it.
    The rows past rows_kept keep B's old values."""

    @T.prim_func
    def guarded(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), kept: T.int32):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            S = T.alloc_shared((bM, bN), dtype)
            T.copy(A[by * bM, bx * bN], S)
            for i, j in T.Parallel(bM, bN):
                if by * bM + i < kept:
                    B[by * bM + i, bx * bN + j] = S[i, j] * 2

    return guarded


def guarded_rows_expected(a, b_before, kept):
    out = b_before.clone()
    out[:kept] = (a[:kept].float() * 2).to(a.dtype)
    return out
