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

from ._common import (Output, as_rows, check_devices, check_hidden, check_tensor, describe,
                      dtype_name, elem_bytes, launchable, plan_rows)

LOG2E = 1.4426950408889634


def softmax_program(N, dtype, blk_m, threads, n_pad):
    """X (M, N) → Y (M, N). Padding columns (j >= N) become -inf before the max, so they
    neither win the max nor add to the sum (exp2(-inf) = 0)."""
    M = T.dynamic("m")

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
            T.copy(X[bx * blk_m, 0], x)
            for i, j in T.Parallel(blk_m, n_pad):
                s[i, j] = T.if_then_else(j < N, T.cast(x[i, j], "float32") * LOG2E,
                                         -T.infinity("float32"))
            T.reduce_max(s, row_max, dim=1)
            for i, j in T.Parallel(blk_m, n_pad):
                s[i, j] = T.exp2(s[i, j] - row_max[i])
            T.reduce_sum(s, row_sum, dim=1)
            # One reciprocal a row (hoisted by the CUDA compiler), then multiplies.
            for i, j in T.Parallel(blk_m, n_pad):
                x[i, j] = T.cast(s[i, j] * (1.0 / row_sum[i]), dtype)
            T.copy(x, Y[bx * blk_m, 0])

    return softmax_rows


# TileLang's form (returns Y); the entry point uses the second one and passes Y itself.
softmax_kernel = tegula.jit(out_idx=[-1])(softmax_program)
_softmax_into = tegula.jit(softmax_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, allocates_output: bool = False):
    """kernel(x2d) → y with `allocates_output`, else kernel(x2d, y)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = softmax_kernel if allocates_output else _softmax_into
    return jit(n, dtype_name(dtype), plan.blk_m, plan.threads, plan.n_pad)


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.softmax(x, dim=-1).

    x: CUDA float16/bfloat16/float32, any leading shape, last dimension a multiple of 8 (or
    any when x is empty). out (optional): x's shape, dtype and device. Strided or misaligned
    views are copied first. As in torch, a row holding a NaN or +inf (or only -inf) is NaN.
    """
    op = "softmax"
    check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    n = x.shape[-1]
    if x.numel() > 0:
        check_hidden(op, "x", n)
    check_devices(op, ("x", x))
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # no row, or rows of nothing: torch's result is empty too
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype)(x2, dst.tensor.view(x2.shape))
    return dst.result()
