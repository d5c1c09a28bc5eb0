"""A parameter's dimension written a * n + b of a dynamic size n (TileLang's
T.Tensor((n * 4,), ...), (n + 1,)): n is read off the tensor at launch. Shared by
cpu/test_affine_dims.py and gpu/test_affine_dims_gpu.py."""
import torch

import tegula.language as T


def program():
    n = T.dynamic("n")

    @T.prim_func
    def affine(A: T.Tensor((n * 4,), "float32"), B: T.Tensor((n + 1, 8), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < n:
                    C[bx * 32 + i] = A[(bx * 32 + i) * 4 + 3] + B[bx * 32 + i + 1, 7] + T.cast(n, "float32")

    def ref(A, B):
        m = B.shape[0] - 1
        return A.reshape(m, 4)[:, 3] + B[1:, 7] + m

    return affine, ref


def inputs(m, generator=None):
    return torch.randn(4 * m, generator=generator), torch.randn(m + 1, 8, generator=generator)
