"""Conditions joined by `and` / `or`, for cpu/test_conditions.py and
gpu/test_conditions_gpu.py. The generated CUDA evaluates the right operand eagerly (`|`,
`&`) when that is harmless, which keeps an attention mask free of branches, and keeps the
short circuit when the left operand guards the right one (a read past the end, a
division by zero). Each builder returns (prim_func, torch reference)."""
import torch

import tegula.language as T


def ragged_mask(M, N):
    """Out[i, j] = -inf where row i or column j lies past the lengths in Lens, else X[i, j];
    the tile's element loop reads Lens into lets first, as varlen attention reads its
    sequence lengths."""

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Lens: T.Tensor((2,), "int32"), Out: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as _:
            acc = T.alloc_fragment((M, N), "float32")
            rows = Lens[0]
            cols = Lens[1]
            T.copy(X, acc)
            for i, j in T.Parallel(M, N):
                acc[i, j] = T.if_then_else(i >= rows or j >= cols, -T.infinity("float32"), acc[i, j])
            T.copy(acc, Out)

    def ref(X, Lens):
        out = X.double().clone()
        out[int(Lens[0]):, :] = float("-inf")
        out[:, int(Lens[1]):] = float("-inf")
        return out

    return main, ref


def guarded_read(n, size):
    """Out[i] = A[i] * 2 where i < Lens[0] and A[i] > 0, else 0, for i < size: the left
    operand keeps the read of A inside its n elements."""

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), Lens: T.Tensor((1,), "int32"), Out: T.Tensor((size,), "float32")):
        with T.Kernel(1, threads=128) as _:
            m = Lens[0]
            for i in T.Parallel(size):
                Out[i] = 0.0
                if i < m and A[i] > 0:
                    Out[i] = A[i] * 2

    def ref(A, Lens):
        out = torch.zeros(size, dtype=torch.float64)
        m = int(Lens[0])
        for i in range(min(m, size)):
            if A[i] > 0:
                out[i] = 2 * float(A[i])
        return out

    return main, ref


def guarded_division(size):
    """Out[i] = 1 where D[0] != 0 and i // D[0] is odd, else 0: the left operand keeps the
    division from a zero divisor."""

    @T.prim_func
    def main(D: T.Tensor((1,), "int32"), Out: T.Tensor((size,), "int32")):
        with T.Kernel(1, threads=128) as _:
            d = D[0]
            for i in T.Parallel(size):
                Out[i] = T.if_then_else(d != 0 and (i // d) % 2 == 1, 1, 0)

    def ref(D):
        d = int(D[0])
        return torch.tensor([1 if d != 0 and (i // d) % 2 == 1 else 0 for i in range(size)], dtype=torch.int32)

    return main, ref
