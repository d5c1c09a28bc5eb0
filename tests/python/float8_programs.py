"""Programs with 8-bit float tensors (T.float8_e4m3fn, T.float8_e5m2), shared by
cpu/test_float8.py and gpu/test_float8_gpu.py: conversions of every pair through T.copy
(vectorised) and a T.Parallel loop, and a per-row quantisation as TileLang's fp8 cast
examples write it."""
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
