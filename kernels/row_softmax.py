"""Softmax over the last dimension, numerically stable: y = exp(x - max) / sum(exp(x - max)).

exp is computed as exp2 with log2(e) folded into the scaling, exp(x - m) =
exp2(x·log2e - m·log2e): the hardware has a base-2 exponential, and scaling before the max
makes the subtraction and the scaling one fused multiply-add. Rows live in registers, so
memory is read once and written once.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, as_rows, check_chunks, check_devices, check_grad_args, check_grad_devices,
                      check_hidden, check_tensor, chunk_loop, describe, dtype_name, elem_bytes, launchable,
                      plan_rows)

LOG2E = 1.4426950408889634


def softmax_program(N, dtype, blk_m, threads, n_pad, chunks=1):
    """X (M, N) → Y (M, N). Padding columns (j >= N) become -inf before the max, so they
    neither win the max nor add to the sum (exp2(-inf) = 0).

    With chunks > 1 (one row a block) the first pass keeps a running max and a sum scaled
    to it (online softmax: when a chunk raises the max, the sum so far is multiplied by
    exp2(old - new)); the second re-reads the chunks and writes them. -inf elements add 0
    explicitly and an unchanged max scales by 1, so a leading run of -inf never turns the
    sum into NaN (exp2(-inf - -inf)); a row of only -inf still ends NaN, as in torch."""
    check_chunks("softmax_program", N, n_pad, chunks)
    M = T.dynamic("m")
    neg_inf = -T.infinity("float32")

    @T.prim_func
    def softmax_rows(
        X: T.Tensor((M, N), dtype),
        Y: T.Tensor((M, N), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            s = T.alloc_fragment((blk_m, n_pad), "float32")
            row_max = T.alloc_fragment((blk_m,), "float32")
            row_sum = T.alloc_fragment((blk_m,), "float32")
            if chunks == 1:
                T.copy(X[bx * blk_m, 0], x)
                for i, j in T.Parallel(blk_m, n_pad):
                    s[i, j] = T.if_then_else(j < N, T.cast(x[i, j], "float32") * LOG2E, neg_inf)
                T.reduce_max(s, row_max, dim=1)
                for i, j in T.Parallel(blk_m, n_pad):
                    s[i, j] = T.exp2(s[i, j] - row_max[i])
                T.reduce_sum(s, row_sum, dim=1)
                # One reciprocal a row (hoisted by the CUDA compiler), then multiplies.
                for i, j in T.Parallel(blk_m, n_pad):
                    x[i, j] = T.cast(s[i, j] * (1.0 / row_sum[i]), dtype)
                T.copy(x, Y[bx * blk_m, 0])
            else:
                chunk_max = T.alloc_fragment((blk_m,), "float32")
                T.fill(row_max, neg_inf)
                T.clear(row_sum)
                for c in T.serial(chunks):
                    T.copy(X[bx * blk_m, c * n_pad], x)
                    for i, j in T.Parallel(blk_m, n_pad):
                        s[i, j] = T.if_then_else(c * n_pad + j < N, T.cast(x[i, j], "float32") * LOG2E, neg_inf)
                    T.reduce_max(s, chunk_max, dim=1)
                    for i in T.Parallel(blk_m):
                        chunk_max[i] = T.max(chunk_max[i], row_max[i])
                        row_sum[i] = row_sum[i] * T.if_then_else(row_max[i] == chunk_max[i], 1.0,
                                                                 T.exp2(row_max[i] - chunk_max[i]))
                        row_max[i] = chunk_max[i]
                    for i, j in T.Parallel(blk_m, n_pad):
                        s[i, j] = T.if_then_else(s[i, j] == neg_inf, 0.0, T.exp2(s[i, j] - row_max[i]))
                    T.reduce_sum(s, row_sum, dim=1, clear=False)
                for c in T.serial(chunks):
                    T.copy(X[bx * blk_m, c * n_pad], x)
                    for i, j in T.Parallel(blk_m, n_pad):
                        x[i, j] = T.cast(T.exp2(T.cast(x[i, j], "float32") * LOG2E - row_max[i]) * (1.0 / row_sum[i]),
                                         dtype)
                    T.copy(x, Y[bx * blk_m, c * n_pad])

    return softmax_rows


def softmax_backward_program(N, dtype, blk_m, threads, n_pad, chunks=1):
    """DY, Y (M, N) → DX (M, N), dx = y·(dy - Σ dy·y) per row. Padding columns load as
    zero and add nothing. With chunks > 1 a first pass sums dy·y, a second writes dx."""
    check_chunks("softmax_backward_program", N, n_pad, chunks)
    M = T.dynamic("m")

    @T.prim_func
    def softmax_backward_rows(
        DY: T.Tensor((M, N), dtype),
        Y: T.Tensor((M, N), dtype),
        DX: T.Tensor((M, N), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            dy = T.alloc_fragment((blk_m, n_pad), dtype)
            y = T.alloc_fragment((blk_m, n_pad), dtype)
            t = T.alloc_fragment((blk_m, n_pad), "float32")
            dot = T.alloc_fragment((blk_m,), "float32")
            if chunks > 1:
                T.clear(dot)
            for c in chunk_loop(chunks):
                T.copy(DY[bx * blk_m, c * n_pad], dy)
                T.copy(Y[bx * blk_m, c * n_pad], y)
                for i, j in T.Parallel(blk_m, n_pad):
                    t[i, j] = T.cast(dy[i, j], "float32") * T.cast(y[i, j], "float32")
                T.reduce_sum(t, dot, dim=1, clear=chunks == 1)
            for c in chunk_loop(chunks):
                if chunks > 1:
                    T.copy(DY[bx * blk_m, c * n_pad], dy)
                    T.copy(Y[bx * blk_m, c * n_pad], y)
                for i, j in T.Parallel(blk_m, n_pad):
                    y[i, j] = T.cast(T.cast(y[i, j], "float32") * (T.cast(dy[i, j], "float32") - dot[i]), dtype)
                T.copy(y, DX[bx * blk_m, c * n_pad])

    return softmax_backward_rows


# TileLang's form (returns Y); the entry point uses the second one and passes Y itself.
softmax_kernel = tegula.jit(out_idx=[-1])(softmax_program)
_softmax_into = tegula.jit(softmax_program)
softmax_backward_kernel = tegula.jit(out_idx=[-1])(softmax_backward_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, allocates_output: bool = False):
    """kernel(x2d) → y with `allocates_output`, else kernel(x2d, y)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = softmax_kernel if allocates_output else _softmax_into
    return jit(n, dtype_name(dtype), plan.blk_m, plan.threads, plan.n_pad, plan.chunks)


def check_softmax_args(op, x) -> None:
    """The argument of softmax (its operator's fake checks it too)."""
    check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    if x.numel() > 0:
        check_hidden(op, "x", x.shape[-1])
    check_devices(op, ("x", x))


def check_softmax_backward_args(op, dy, y) -> None:
    """The arguments of softmax_backward."""
    check_grad_args(op, dy, y, (), x_name="y")
    check_grad_devices(op, (("y", y), ("dy", dy)))


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.softmax(x, dim=-1).

    x: CUDA float16/bfloat16/float32, any leading shape, any last dimension (rows of more
    than 16384 elements are walked in chunks). out (optional): x's shape, dtype and device.
    Strided or misaligned views (x[:, :N] of a wider tensor) are copied first. As in torch, a row holding a NaN or +inf (or only -inf) is NaN.
    """
    op = "softmax"
    check_softmax_args(op, x)
    n = x.shape[-1]
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # no row, or rows of nothing: torch's result is empty too
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype)(x2, dst.tensor.view(x2.shape))
    return dst.result()


@functools.lru_cache(maxsize=None)
def backward_kernel_for(n: int, dtype: torch.dtype):
    """kernel(dy2d, y2d) → dx for rows of n elements: dy and y in their dtype and the
    float32 product live, so float32 rows of more than 1024 × 12 elements do not fit
    1024 threads' registers (plan_rows) and are walked in chunks."""
    plan = plan_rows(n, elem_bytes(dtype), 16, registers_per_element=1 + 2 * elem_bytes(dtype) / 4)
    return softmax_backward_kernel(n, dtype_name(dtype), plan.blk_m, plan.threads, plan.n_pad, plan.chunks)


def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of y = softmax(x, dim=-1) for the upstream gradient dy:
    dx = y·(dy - Σ_row dy·y), in y's dtype and shape, from the forward's output y (x is
    not needed). dy: y's shape and dtype, any layout (an expanded or strided gradient is
    copied first). Any row length; rows of more than 16384 elements (12288 in float32) are
    walked in chunks.
    """
    op = "softmax_backward"
    check_softmax_backward_args(op, dy, y)
    if y.numel() == 0:
        return torch.empty_like(y, memory_format=torch.contiguous_format)
    n = y.shape[-1]
    check_hidden(op, "y", n)
    y2 = as_rows(op, launchable(y))
    dx = backward_kernel_for(n, y.dtype)(as_rows(op, launchable(dy)), y2)
    return dx.view(y.shape)
