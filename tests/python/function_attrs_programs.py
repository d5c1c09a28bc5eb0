"""A prim_func in TileLang's body-declaration form with function attributes: its parameter
declared in the body, its T.empty output returned, pass configs and compile flags from
T.annotate_*. Shared by cpu/test_function_attrs.py and gpu/test_function_attrs_gpu.py."""
import tegula.language as T
from tegula.transform import PassConfigKey


def doubling(rows, cols):
    """B = 2 A + 1, rows ragged against blocks of 16."""
    @T.prim_func
    def kernel(A):
        A: T.Tensor[[rows, cols], T.float32]
        T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: True})
        T.annotate_compile_flags(["--use_fast_math"])
        B = T.empty([rows, cols], T.float32)
        with T.Kernel(T.ceildiv(rows, 16), threads=128) as bx:
            for i, j in T.Parallel(16, cols):
                if bx * 16 + i < rows:
                    B[bx * 16 + i, j] = A[bx * 16 + i, j] * 2.0 + 1.0
        return B

    return kernel


def packed_output(rows, cols, dtype):
    """A T.empty output of a 4-bit type (int4, float4_e2m1fn): torch holds it packed, two
    elements a byte (the last dimension halved); element (i, j) is (i * cols + j) % 8 - 4,
    converted (every such value is exact in both types)."""
    @T.prim_func
    def kernel():
        out = T.empty((rows, cols), dtype)
        with T.Kernel(1, threads=1):
            for i in T.serial(rows):
                for j in T.serial(cols):
                    out[i, j] = T.cast((i * cols + j) % 8 - 4, dtype)
        return out

    return kernel


def two_outputs():
    """B = A[i % m] + 1 over 2m + 1 elements and C = i over m + 1: two outputs sized by
    affine expressions of one dynamic size, allocated by the call (out_idx=[1, 2])."""
    @T.prim_func
    def kernel(A, B, C):
        m = T.dynamic("m")
        A: T.Tensor[[m], T.float32]
        B: T.Tensor[[m * 2 + 1], T.float32]
        C: T.Tensor[[m + 1], T.float32]
        with T.Kernel(1, threads=1):
            for i in T.serial(m * 2 + 1):
                B[i] = A[i % m] + 1.0
            for i in T.serial(m + 1):
                C[i] = T.cast(i, T.float32)

    return kernel


def packed_dynamic_output(rows, dtype):
    """A T.empty output whose packed last dimension, n * 2, comes from a scalar argument
    declared in the signature (`n: T.int32`); elements as packed_output's."""
    @T.prim_func
    def kernel(n: T.int32):
        out = T.empty((rows, n * 2), dtype)
        with T.Kernel(1, threads=1):
            for i in T.serial(rows):
                for j in T.serial(n * 2):
                    out[i, j] = T.cast((i * n * 2 + j) % 8 - 4, dtype)
        return out

    return kernel


def unpack_int4(storage):
    """The int4 elements of an int8 tensor holding two a byte, low nibble first."""
    import torch

    b = storage.view(torch.uint8).to(torch.int16)
    lo, hi = b & 0xF, b >> 4
    both = torch.stack([lo, hi], dim=-1).reshape(*storage.shape[:-1], storage.shape[-1] * 2)
    return torch.where(both >= 8, both - 16, both)


def packed_expected(rows, cols):
    import torch

    return ((torch.arange(rows * cols) % 8) - 4).reshape(rows, cols)


def expected_two_outputs(a):
    """What two_outputs() gives for input a (torch, any device)."""
    import torch

    m = a.shape[0]
    return [a.repeat(3)[:2 * m + 1] + 1, torch.arange(m + 1, dtype=torch.float32, device=a.device)]
