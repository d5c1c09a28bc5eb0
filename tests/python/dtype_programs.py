"""Programs over T.StridedTensor, torch dtypes as dtypes, float8_e8m0fnu and the packed
4-bit types, shared by the CPU and GPU tests (cpu/test_dtypes_strided.py,
gpu/test_dtypes_strided_gpu.py)."""
import torch

import tegula.language as T

# float4_e2m1fn's values: every code's value (sign bit 3).
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float32)


def strided_scale_program(M, N, strides, block=(32, 32), dynamic=False):
    """Y = 2 * X + 1 with X a T.StridedTensor (static strides, or T.dynamic ones), Y contiguous."""
    bm, bn = block
    if dynamic:
        s0, s1 = T.dynamic("s0"), T.dynamic("s1")
        strides = (s0, s1)

    @T.prim_func
    def scale(X: T.StridedTensor((M, N), strides, "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            t = T.alloc_fragment((bm, bn), "float32")
            T.copy(X[by * bm, bx * bn], t)
            for i, j in T.Parallel(bm, bn):
                t[i, j] = t[i, j] * 2 + 1
            T.copy(t, Y[by * bm, bx * bn])

    return scale


def strided_store_program(M, N, strides):
    """Y (a T.StridedTensor: a transposed view, a row-padded one) = X + 1, elementwise."""

    @T.prim_func
    def store(X: T.Tensor((M, N), "float32"), Y: T.StridedTensor((M, N), strides, "float32")):
        with T.Kernel(T.ceildiv(M, 4), threads=128) as bx:
            for i, j in T.Parallel(4, N):
                if bx * 4 + i < M:
                    Y[bx * 4 + i, j] = X[bx * 4 + i, j] + 1

    return store


def cast_program(n, src, dst):
    """Y = cast(X) elementwise, n elements, any dtypes (torch dtypes accepted)."""

    @T.prim_func
    def convert(X: T.Tensor((n,), src), Y: T.Tensor((n,), dst)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    Y[bx * 128 + i] = T.cast(X[bx * 128 + i], dst)

    return convert


def packed_roundtrip_program(M, N, dtype):
    """Y = X + 1 over a packed 4-bit X (computed in float32 / int32), out to float32, and Z
    (same 4-bit type) = cast(X + 1): every thread writes one nibble, so the two nibbles of a
    byte are written by two threads."""

    @T.prim_func
    def roundtrip(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), "float32"), Z: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=64) as bx:
            for j in T.Parallel(N):
                Y[bx, j] = T.cast(X[bx, j] + 1, "float32")
                Z[bx, j] = T.cast(X[bx, j] + 1, dtype)

    return roundtrip


def packed_scatter_program(n_rows, dtype="float4_e2m1fn"):
    """Rows of a packed tensor moved by a permutation, one element at a time (TileLang's
    subtype scatter test)."""
    nv = T.dynamic("n")

    @T.prim_func
    def scatter(src: T.Tensor((nv, 128), dtype), dst: T.Tensor((nv, 128), dtype), perm: T.Tensor((nv,), "int32")):
        with T.Kernel(nv, threads=32) as i:
            for k in T.serial(128):
                dst[perm[i], k] = src[i, k]

    return scatter


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """The float value of each 4-bit code."""
    return E2M1[codes.long()]


def eager_strided_const_program(dynamic_rows=False, block=32):
    """An eager @tegula.jit function whose T.StridedTensor parameter takes its shape and its
    strides from T.const (the row count T.dynamic with dynamic_rows): B = A + 1, B a fresh
    contiguous output (TileLang's test_jit2_return, copy5 and copy6)."""
    import tegula

    @tegula.jit
    def strided_plus_one(A):
        if dynamic_rows:
            N = T.dynamic("N")
            M, N_, M_ = T.const("M, N_, M_")
        else:
            N, M, N_, M_ = T.const("N, M, N_, M_")
        A: T.StridedTensor[[N, M], [N_, M_], T.float32]
        B = T.empty(N, M, dtype=T.float32)
        with T.Kernel(T.ceildiv(N, block), T.ceildiv(M, block), threads=128) as (bx, by):
            for i, j in T.Parallel(block, block):
                B[bx * block + i, by * block + j] = A[bx * block + i, by * block + j] + 1.0
        return B

    return strided_plus_one
