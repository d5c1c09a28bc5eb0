"""LayerNorm over the last dimension: y = (x - mean) / sqrt(var + eps) * weight + bias.

Two reductions over registers: the mean first, then the variance of the centred values
(not E[x²] - mean², which cancels catastrophically when |mean| is large against the
spread). The row stays in registers between them, so memory is still read once.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, as_rows, check_devices, check_eps, check_hidden, check_tensor,
                      describe, dtype_name, elem_bytes, launchable, plan_rows)


def layer_norm_program(N, dtype, eps, blk_m, threads, n_pad):
    """X (M, N), W (N,), B (N,) → Y (M, N). Padding columns load as zero, harmless to the
    sum; after centring they would be -mean, so they are zeroed before the variance."""
    M = T.dynamic("m")
    inv_n = 1.0 / N

    @T.prim_func
    def layer_norm_rows(
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        B: T.Tensor((N,), dtype),
        Y: T.Tensor((M, N), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            xc = T.alloc_fragment((blk_m, n_pad), "float32")
            sq = T.alloc_fragment((blk_m, n_pad), "float32")
            total = T.alloc_fragment((blk_m,), "float32")
            squares = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m, 0], x)
            T.copy(x, xc)
            T.reduce_sum(xc, total, dim=1)
            for i, j in T.Parallel(blk_m, n_pad):
                xc[i, j] = T.if_then_else(j < N, xc[i, j] - total[i] * inv_n, 0.0)
            for i, j in T.Parallel(blk_m, n_pad):
                sq[i, j] = xc[i, j] * xc[i, j]
            T.reduce_sum(sq, squares, dim=1)
            for i, j in T.Parallel(blk_m, n_pad):
                x[i, j] = T.cast(
                    xc[i, j] * T.rsqrt(squares[i] * inv_n + eps) * T.cast(W[j], "float32")
                    + T.cast(B[j], "float32"),
                    dtype)
            T.copy(x, Y[bx * blk_m, 0])

    return layer_norm_rows


# TileLang's form (returns Y); the entry point uses the second one and passes Y itself.
layer_norm_kernel = tegula.jit(out_idx=[-1])(layer_norm_program)
_layer_norm_into = tegula.jit(layer_norm_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, eps: float, allocates_output: bool = False):
    """kernel(x2d, w, b) → y with `allocates_output`, else kernel(x2d, w, b, y)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = layer_norm_kernel if allocates_output else _layer_norm_into
    return jit(n, dtype_name(dtype), float(eps), plan.blk_m, plan.threads, plan.n_pad)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.layer_norm(x, (N,), weight, bias, eps) over the last dimension.

    x: CUDA float16/bfloat16/float32, any leading shape, N a multiple of 8 (or any N when
    x is empty). weight, bias: (N,), x's dtype and device. out (optional): x's shape, dtype
    and device. Strided or misaligned views are copied first. A NaN or inf in a row makes
    the whole row NaN, as in torch.
    """
    op = "layer_norm"
    check_tensor(op, "x", x)
    check_tensor(op, "weight", weight, like=x)
    check_tensor(op, "bias", bias, like=x)
    eps = check_eps(op, eps)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    n = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if tuple(t.shape) != (n,):
            raise ValueError(f"{op}: {name} must have shape ({n},) (the last dimension of x), "
                             f"got {describe(t)}")
    if x.numel() > 0:
        check_hidden(op, "x", n)
    check_devices(op, ("x", x), ("weight", weight), ("bias", bias))
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # no row, or rows of nothing: torch's result is empty too
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype, eps)(x2, launchable(weight), launchable(bias), dst.tensor.view(x2.shape))
    return dst.result()
