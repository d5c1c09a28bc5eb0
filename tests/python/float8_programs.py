"""Programs with 8-bit float tensors (T.float8_e4m3fn, T.float8_e5m2), shared by
cpu/test_float8.py and gpu/test_float8_gpu.py: conversions of every pair through T.copy
(vectorised) and a T.Parallel loop, and a per-row quantisation as TileLang's fp8 cast
examples write it; fp8 gemms (gemm_program) and gemms the tensor cores have no 8-bit
form for (refused_gemm_program)."""
import torch

import tegula.language as T

FLOAT8 = ["float8_e4m3fn", "float8_e5m2"]
WIDE = ["float32", "float16", "bfloat16"]
PAIRS = [(a, b) for a in WIDE for b in FLOAT8] + [(b, a) for a in WIDE for b in FLOAT8] + \
    [("float8_e4m3fn", "float8_e5m2"), ("float8_e5m2", "float8_e4m3fn")]
FINITE_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def convert_program(M, src, dst, loop=False):
    """B = A converted (M ragged against the 128 threads' vectors)."""

    @T.prim_func
    def convert(A: T.Tensor((M,), src), B: T.Tensor((M,), dst)):
        with T.Kernel(T.ceildiv(M, 512), threads=128) as bx:
            if loop:
                a = T.alloc_fragment((512,), src)
                b = T.alloc_fragment((512,), dst)
                T.copy(A[bx * 512:bx * 512 + 512], a)
                for i in T.Parallel(512):
                    b[i] = a[i]
                T.copy(b, B[bx * 512:bx * 512 + 512])
            else:
                T.copy(A[bx * 512:bx * 512 + 512], B[bx * 512:bx * 512 + 512])

    return convert


def quantize_program(M, N, dst="float8_e4m3fn"):
    """Y = X / s in dst, s = max|X row| / max(dst) per row (at least 1e-4 / max)."""
    top = FINITE_MAX[dst]

    @T.prim_func
    def quantize(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), dst), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=128) as bx:
            x = T.alloc_fragment((N,), "float32")
            amax = T.alloc_fragment((1,), "float32")
            T.copy(X[bx, :], x)
            T.reduce_absmax(x, amax, dim=0)
            s = T.max(amax[0], 1e-4) / top
            for j in T.Parallel(N):
                Y[bx, j] = T.cast(x[j] / s, dst)
            S[bx] = s

    return quantize


def saturating(x: torch.Tensor, dtype: str) -> torch.Tensor:
    """torch's conversion with CUDA's __NV_SATFINITE: out-of-range values (infinities
    included) become the largest finite value; NaN stays NaN (torch gives NaN or inf)."""
    top = FINITE_MAX[dtype]
    x = x.double()
    clamped = torch.where(torch.isnan(x), x, x.clamp(-top, top))
    return clamped.to(getattr(torch, dtype))


def sample(n: int, dtype: str, gen: torch.Generator) -> torch.Tensor:
    """Values across the whole range of dtype and past the 8-bit ones', with NaN and inf
    where the type has them."""
    x = torch.randn(n, generator=gen, dtype=torch.float64) * torch.logspace(-8, 5, n, dtype=torch.float64)
    x[:4] = torch.tensor([0.0, -0.0, 448.0, 460.0], dtype=torch.float64)
    if dtype not in FLOAT8:
        x[4:7] = torch.tensor([float("nan"), float("inf"), -1e9], dtype=torch.float64)
        return x.to(getattr(torch, dtype))
    return saturating(x, dtype)


def special_values_program(dtype):
    """A[0:16] = T.infinity (T.max_value for float8_e4m3fn, which has no infinity),
    A[16:24] = T.max_value, A[24:32] = -T.infinity / T.min_value: literals of the type, not
    conversions (which saturate)."""
    top = "infinity" if dtype == "float8_e5m2" else "max_value"

    @T.prim_func
    def special(A: T.Tensor((32,), dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                if i < 16:
                    A[i] = getattr(T, top)(dtype)
                elif i < 24:
                    A[i] = T.max_value(dtype)
                else:
                    A[i] = -getattr(T, top)(dtype) if top == "infinity" else T.min_value(dtype)

    def expected():
        big = float("inf") if top == "infinity" else FINITE_MAX[dtype]
        vals = [big] * 16 + [FINITE_MAX[dtype]] * 8 + [-big] * 8
        return torch.tensor(vals).to(getattr(torch, dtype))

    return special, expected

def gemm_program(M, N, K, a_dtype, b_dtype=None, block_M=128, block_N=128, block_K=64, threads=128,
                 num_stages=2, accumulate_twice=False):
    """C = A Bᵀ in float32 (A: M x K, B: N x K of 8-bit floats), as TileLang's fp8 gemm
    examples write it; with accumulate_twice, each K block's product is added into a second
    accumulator (their "2xAcc"). M, N, K need not be multiples of the blocks."""
    b_dtype = b_dtype or a_dtype

    @T.prim_func
    def gemm(A: T.Tensor((M, K), a_dtype), B: T.Tensor((N, K), b_dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), a_dtype)
            B_shared = T.alloc_shared((block_N, block_K), b_dtype)
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            total = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            T.clear(total)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[bx * block_N, k * block_K], B_shared)
                if accumulate_twice:
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True, clear_accum=True)
                    for i, j in T.Parallel(block_M, block_N):
                        total[i, j] += C_local[i, j]
                else:
                    T.gemm(A_shared, B_shared, C_local, transpose_B=True)
            if accumulate_twice:
                T.copy(total, C[by * block_M, bx * block_N])
            else:
                T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def gemm_operands(M, N, K, a_dtype, b_dtype, gen: torch.Generator, device="cpu"):
    """Random A (M x K) and B (N x K) in the given 8-bit types, values of a few units."""
    a = (torch.randn(M, K, generator=gen) * 2).to(getattr(torch, a_dtype))
    b = (torch.randn(N, K, generator=gen) * 2).to(getattr(torch, b_dtype))
    return a.to(device), b.to(device)


def refused_gemm_program(a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", c_dtype="float32", K=64,
                         transpose_A=False, transpose_B=True, a_in_registers=False):
    """One 64 x 64 gemm of 8-bit operands in a form other than TileLang's fp8 programs use
    (the T.gemm line carries the mark MARK-gemm)."""
    a_shape = (K, 64) if transpose_A else (64, K)
    b_shape = (64, K) if transpose_B else (K, 64)

    @T.prim_func
    def refused(A: T.Tensor(a_shape, a_dtype), B: T.Tensor(b_shape, b_dtype), C: T.Tensor((64, 64), c_dtype)):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment(a_shape, a_dtype) if a_in_registers else T.alloc_shared(a_shape, a_dtype)
            b = T.alloc_shared(b_shape, b_dtype)
            c = T.alloc_fragment((64, 64), c_dtype)
            T.copy(A, a)
            T.copy(B, b)
            T.gemm(a, b, c, transpose_A=transpose_A, transpose_B=transpose_B, clear_accum=True)  # MARK-gemm
            T.copy(c, C)

    return refused
