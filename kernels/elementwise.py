"""Elementwise add, out = x + y, where y is either a tensor of x's shape or one row of N
values broadcast over every leading dimension of x.

The kernel works on (M, N) views: leading dimensions flatten into rows, the row count M is
dynamic (a new batch size does not recompile) and N is a compile-time constant (so row
strides are known and the copies can use 16-byte vectors). The sum is formed in float32
and rounded once, as torch does for half-precision inputs.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, check_devices, check_tensor, describe, dtype_name, elem_bytes, launchable,
                      plan_tile)


def add_program(N, dtype, broadcast, block_m, block_n, threads):
    """The prim_func for (M, N) + (N,) when `broadcast`, else (M, N) + (M, N)."""
    M = T.dynamic("m")

    if broadcast:

        @T.prim_func
        def add_row(
            X: T.Tensor((M, N), dtype),
            Y: T.Tensor((N,), dtype),
            Z: T.Tensor((M, N), dtype),
        ):
            with T.Kernel((N + block_n - 1) // block_n, (M + block_m - 1) // block_m,
                          threads=threads) as (bx, by):
                x = T.alloc_fragment((block_m, block_n), dtype)
                z = T.alloc_fragment((block_m, block_n), dtype)
                T.copy(X[by * block_m, bx * block_n], x)
                # The row of y is tiny and read by every block: it is served from L1/L2,
                # so it is indexed directly rather than staged.
                for i, j in T.Parallel(block_m, block_n):
                    z[i, j] = T.cast(
                        T.cast(x[i, j], "float32") + T.cast(Y[bx * block_n + j], "float32"),
                        dtype)
                T.copy(z, Z[by * block_m, bx * block_n])

        return add_row

    @T.prim_func
    def add_full(
        X: T.Tensor((M, N), dtype),
        Y: T.Tensor((M, N), dtype),
        Z: T.Tensor((M, N), dtype),
    ):
        with T.Kernel((N + block_n - 1) // block_n, (M + block_m - 1) // block_m,
                      threads=threads) as (bx, by):
            x = T.alloc_fragment((block_m, block_n), dtype)
            y = T.alloc_fragment((block_m, block_n), dtype)
            z = T.alloc_fragment((block_m, block_n), dtype)
            T.copy(X[by * block_m, bx * block_n], x)
            T.copy(Y[by * block_m, bx * block_n], y)
            for i, j in T.Parallel(block_m, block_n):
                z[i, j] = T.cast(T.cast(x[i, j], "float32") + T.cast(y[i, j], "float32"), dtype)
            T.copy(z, Z[by * block_m, bx * block_n])

    return add_full


# TileLang's form: the kernel allocates and returns Z. The entry point below passes its
# own output instead (so `out=` works), through the second specialiser.
add_kernel = tegula.jit(out_idx=[-1])(add_program)
_add_into = tegula.jit(add_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, broadcast: bool, allocates_output: bool = False):
    """The jit kernel for rows of n elements of `dtype`. With `allocates_output` it is called
    as kernel(x, y) and returns z; otherwise as kernel(x, y, z)."""
    plan = plan_tile(n, elem_bytes(dtype))
    jit = add_kernel if allocates_output else _add_into
    return jit(n, dtype_name(dtype), bool(broadcast), plan.block_m, plan.block_n, plan.threads)


def _broadcast_row(y: torch.Tensor, x: torch.Tensor) -> bool:
    """True when y is one row that broadcasts over x: shape (N,), (1, N), (1, 1, N), ..."""
    return (y.dim() >= 1 and y.dim() <= x.dim() and y.shape[-1] == x.shape[-1]
            and all(s == 1 for s in y.shape[:-1]))


def check_add_args(op, x, y) -> bool:
    """The arguments of add (its operator's fake checks them too); returns whether y is
    one row broadcast over x."""
    check_tensor(op, "x", x)
    check_tensor(op, "y", y, like=x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    if tuple(y.shape) == tuple(x.shape):
        broadcast = False
    elif _broadcast_row(y, x):
        broadcast = True
    else:
        raise ValueError(f"{op}: y must have x's shape {tuple(x.shape)} or be one row of "
                         f"{x.shape[-1]} values (shape ({x.shape[-1]},) or (1, {x.shape[-1]})), "
                         f"got {describe(y)}")
    check_devices(op, ("x", x), ("y", y))
    return broadcast


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x + y with y of x's shape or one row of x.shape[-1] values; the result has x's dtype.

    x, y (and out, when given): CUDA tensors of one float dtype. Strided or misaligned views
    are copied first; an empty x gives an empty result.
    """
    op = "add"
    broadcast = check_add_args(op, x, y)
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # a grid of zero blocks is not a launch CUDA accepts
        return dst.result()
    n = x.shape[-1]
    rows = x.numel() // n
    x2 = launchable(x).view(rows, n)
    y2 = launchable(y).view(n) if broadcast else launchable(y).view(rows, n)
    kernel_for(n, x.dtype, broadcast)(x2, y2, dst.tensor.view(rows, n))
    return dst.result()
