"""LayerNorm over the last dimension: y = (x - mean) / sqrt(var + eps) * weight + bias.

Two reductions over registers: the mean first, then the variance of the centred values
(not E[x²] - mean², which cancels catastrophically when |mean| is large against the
spread). The row stays in registers between them, so memory is still read once.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, as_rows, check_chunks, check_devices, check_eps, check_grad_args,
                      check_grad_devices, check_hidden, check_tensor, describe, dtype_name, elem_bytes,
                      launchable, persistent_grid, plan_backward_rows, plan_rows, sm_count)
from .reduce import combine_tile, sum_partial_rows


def backward_registers_per_element(elem_bytes: int) -> float:
    """Registers the single-pass backward keeps live per element a thread holds: t, acc_w
    and acc_b in float32, x and dy in the input dtype (plan_backward_rows)."""
    return 3 + 2 * elem_bytes / 4


def layer_norm_program(N, dtype, eps, blk_m, threads, n_pad, chunks=1):
    """X (M, N), W (N,), B (N,) → Y (M, N). Padding columns load as zero, harmless to the
    sum; after centring they would be -mean, so they are zeroed before the variance.

    With chunks > 1 (one row a block) the statistics come from one pass: each chunk's mean
    and centred sum of squares (exact, in registers) are merged into the running ones by
    Chan's rule, m2 += m2_c + δ²·n·n_c/(n + n_c) with δ the difference of the means, which
    keeps the variance's accuracy; a second pass re-reads the chunks and writes them."""
    check_chunks("layer_norm_program", N, n_pad, chunks)
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
            if chunks == 1:
                T.copy(X[bx * blk_m, 0], x)
                T.copy(x, xc)
                T.reduce_sum(xc, total, dim=1)
                for i, j in T.Parallel(blk_m, n_pad):
                    # total / N, not total * (1 / N): a row of one value sums exactly in float32
                    # (as a float16 row of 65504s does), and only the division then gives back
                    # that value, so the centred row is exactly 0 as torch's running mean makes it.
                    xc[i, j] = T.if_then_else(j < N, xc[i, j] - total[i] / N, 0.0)
                for i, j in T.Parallel(blk_m, n_pad):
                    sq[i, j] = xc[i, j] * xc[i, j]
                T.reduce_sum(sq, squares, dim=1)
                for i, j in T.Parallel(blk_m, n_pad):
                    x[i, j] = T.cast(
                        xc[i, j] * T.rsqrt(squares[i] * inv_n + eps) * T.cast(W[j], "float32")
                        + T.cast(B[j], "float32"),
                        dtype)
                T.copy(x, Y[bx * blk_m, 0])
            else:
                mean = T.alloc_fragment((blk_m,), "float32")
                m2 = T.alloc_fragment((blk_m,), "float32")
                T.clear(mean)
                T.clear(m2)
                chunk_stats(X, x, xc, sq, total, squares, mean, m2, bx * blk_m, N, n_pad, chunks, blk_m)
                for c in T.serial(chunks):
                    T.copy(X[bx * blk_m, c * n_pad], x)
                    for i, j in T.Parallel(blk_m, n_pad):
                        x[i, j] = T.cast(
                            (T.cast(x[i, j], "float32") - mean[i]) * T.rsqrt(m2[i] * inv_n + eps)
                            * T.cast(W[c * n_pad + j], "float32") + T.cast(B[c * n_pad + j], "float32"),
                            dtype)
                    T.copy(x, Y[bx * blk_m, c * n_pad])

    return layer_norm_rows


@T.macro
def chunk_stats(X, x, xc, sq, total, squares, mean, m2, row, N, n_pad, chunks, blk_m):
    """mean and m2 (the centred sum of squares) of rows row.. of X, chunk by chunk, merged
    by Chan's rule; mean and m2 start at zero. A chunk holds n_c = min(n_pad, N - c·n_pad)
    columns."""
    for c in T.serial(chunks):
        T.copy(X[row, c * n_pad], x)
        T.copy(x, xc)
        T.reduce_sum(xc, total, dim=1)
        for i, j in T.Parallel(blk_m, n_pad):
            xc[i, j] = T.if_then_else(c * n_pad + j < N,
                                      xc[i, j] - total[i] / T.cast(T.min(n_pad, N - c * n_pad), "float32"), 0.0)
            sq[i, j] = xc[i, j] * xc[i, j]
        T.reduce_sum(sq, squares, dim=1)
        for i in T.Parallel(blk_m):
            n_c = T.cast(T.min(n_pad, N - c * n_pad), "float32")
            n_a = T.cast(c * n_pad, "float32")
            delta = total[i] / n_c - mean[i]
            # delta · (delta · weight), not delta² · weight: the first chunk merges with
            # weight 0, and a first mean past sqrt(float32 max) (bfloat16 or float32 rows
            # near the top of their range) would make delta² inf and inf · 0 NaN.
            m2[i] = m2[i] + squares[i] + delta * (delta * (n_a * n_c / (n_a + n_c)))
            mean[i] = mean[i] + delta * (n_c / (n_a + n_c))


def layer_norm_backward_program(N, dtype, eps, blk_m, threads, n_pad, chunks, grid):
    """DY, X (M, N), W (N,) → DX (M, N), DW (N,), DB (N,). With xh = (x - mean)·rstd
    recomputed from x and g = dy·w:

        dx = rstd · (g - mean(g) - xh · mean(g·xh)),   dw = Σ_rows dy·xh,   db = Σ_rows dy

    Kernel 1 runs `grid` blocks over the rows as rms_norm_backward_program does, keeping
    dw's and db's per-block sums in registers (one chunk) or in the block's own rows of the
    workspaces (several chunks: a pass for the statistics, one for Σg and Σg·xh, one that
    writes dx); kernels 2 and 3 add the workspaces' rows in a fixed order."""
    check_chunks("layer_norm_backward_program", N, n_pad, chunks)
    M = T.dynamic("m")
    inv_n = 1.0 / N
    rows = grid * blk_m
    combine = combine_tile(N)

    @T.prim_func
    def layer_norm_backward_rows(
        DY: T.Tensor((M, N), dtype),
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        DX: T.Tensor((M, N), dtype),
        DW: T.Tensor((N,), dtype),
        DB: T.Tensor((N,), dtype),
    ):
        PartialW = T.alloc_global((rows, N), "float32")
        PartialB = T.alloc_global((rows, N), "float32")
        with T.Kernel(grid, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            dy = T.alloc_fragment((blk_m, n_pad), dtype)
            t = T.alloc_fragment((blk_m, n_pad), "float32")
            acc_w = T.alloc_fragment((blk_m, n_pad), "float32")
            acc_b = T.alloc_fragment((blk_m, n_pad), "float32")
            total = T.alloc_fragment((blk_m,), "float32")
            squares = T.alloc_fragment((blk_m,), "float32")
            sum_g = T.alloc_fragment((blk_m,), "float32")
            sum_gx = T.alloc_fragment((blk_m,), "float32")
            if chunks == 1:
                T.clear(acc_w)
                T.clear(acc_b)
            else:
                xh = T.alloc_fragment((blk_m, n_pad), "float32")
                mean = T.alloc_fragment((blk_m,), "float32")
                m2 = T.alloc_fragment((blk_m,), "float32")
                T.clear(t)
                for c in T.serial(chunks):
                    T.copy(t, PartialW[bx, c * n_pad])
                    T.copy(t, PartialB[bx, c * n_pad])
            for it in T.serial(T.ceildiv(M, rows)):
                row = (it * grid + bx) * blk_m
                if chunks == 1:
                    # Only x, dy (input dtype), t, acc_w and acc_b live across the row: xh is
                    # recomputed from x where it is used, (x - mean)·rstd, which keeps the row in
                    # 4 float32 registers an element for float16 (backward_registers_per_element).
                    T.copy(X[row, 0], x)
                    T.copy(DY[row, 0], dy)
                    T.copy(x, t)
                    T.reduce_sum(t, total, dim=1)
                    for i, j in T.Parallel(blk_m, n_pad):
                        t[i, j] = T.if_then_else(j < N, (T.cast(x[i, j], "float32") - total[i] * inv_n)
                                                 * (T.cast(x[i, j], "float32") - total[i] * inv_n), 0.0)
                    T.reduce_sum(t, squares, dim=1)
                    # Padding columns have dy = 0, so they add nothing to the sums below.
                    for i, j in T.Parallel(blk_m, n_pad):
                        acc_w[i, j] += T.cast(dy[i, j], "float32") * ((T.cast(x[i, j], "float32") - total[i] * inv_n)
                                                                     * T.rsqrt(squares[i] * inv_n + eps))
                        acc_b[i, j] += T.cast(dy[i, j], "float32")
                        t[i, j] = T.cast(dy[i, j], "float32") * T.cast(W[j], "float32")
                    T.reduce_sum(t, sum_g, dim=1)
                    for i, j in T.Parallel(blk_m, n_pad):
                        t[i, j] = t[i, j] * ((T.cast(x[i, j], "float32") - total[i] * inv_n)
                                             * T.rsqrt(squares[i] * inv_n + eps))
                    T.reduce_sum(t, sum_gx, dim=1)
                    for i, j in T.Parallel(blk_m, n_pad):
                        x[i, j] = T.cast(
                            T.rsqrt(squares[i] * inv_n + eps)
                            * (T.cast(dy[i, j], "float32") * T.cast(W[j], "float32") - sum_g[i] * inv_n
                               - ((T.cast(x[i, j], "float32") - total[i] * inv_n) * T.rsqrt(squares[i] * inv_n + eps))
                               * (sum_gx[i] * inv_n)),
                            dtype)
                    T.copy(x, DX[row, 0])
                else:
                    T.clear(mean)
                    T.clear(m2)
                    chunk_stats(X, x, xh, t, total, squares, mean, m2, row, N, n_pad, chunks, blk_m)
                    T.clear(sum_g)
                    T.clear(sum_gx)
                    for c in T.serial(chunks):
                        T.copy(X[row, c * n_pad], x)
                        T.copy(DY[row, c * n_pad], dy)
                        # Padding columns have dy = 0, so they add nothing below.
                        for i, j in T.Parallel(blk_m, n_pad):
                            xh[i, j] = (T.cast(x[i, j], "float32") - mean[i]) * T.rsqrt(m2[i] * inv_n + eps)
                            t[i, j] = T.cast(dy[i, j], "float32") * T.cast(W[c * n_pad + j], "float32")
                        T.reduce_sum(t, sum_g, dim=1, clear=False)
                        for i, j in T.Parallel(blk_m, n_pad):
                            t[i, j] = t[i, j] * xh[i, j]
                        T.reduce_sum(t, sum_gx, dim=1, clear=False)
                    for c in T.serial(chunks):
                        T.copy(X[row, c * n_pad], x)
                        T.copy(DY[row, c * n_pad], dy)
                        T.copy(PartialW[bx, c * n_pad], acc_w)
                        T.copy(PartialB[bx, c * n_pad], acc_b)
                        for i, j in T.Parallel(blk_m, n_pad):
                            xh[i, j] = (T.cast(x[i, j], "float32") - mean[i]) * T.rsqrt(m2[i] * inv_n + eps)
                            acc_w[i, j] += T.cast(dy[i, j], "float32") * xh[i, j]
                            acc_b[i, j] += T.cast(dy[i, j], "float32")
                            x[i, j] = T.cast(
                                T.rsqrt(m2[i] * inv_n + eps)
                                * (T.cast(dy[i, j], "float32") * T.cast(W[c * n_pad + j], "float32")
                                   - sum_g[i] * inv_n - xh[i, j] * (sum_gx[i] * inv_n)),
                                dtype)
                        T.copy(x, DX[row, c * n_pad])
                        T.copy(acc_w, PartialW[bx, c * n_pad])
                        T.copy(acc_b, PartialB[bx, c * n_pad])
            if chunks == 1:
                T.copy(acc_w, PartialW[bx * blk_m, 0])
                T.copy(acc_b, PartialB[bx * blk_m, 0])
        sum_partial_rows(PartialW, DW, rows, N, dtype, *combine)
        sum_partial_rows(PartialB, DB, rows, N, dtype, *combine)

    return layer_norm_backward_rows


# TileLang's form (returns Y); the entry point uses the second one and passes Y itself.
layer_norm_kernel = tegula.jit(out_idx=[-1])(layer_norm_program)
_layer_norm_into = tegula.jit(layer_norm_program)
layer_norm_backward_kernel = tegula.jit(out_idx=[-3, -2, -1])(layer_norm_backward_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, eps: float, allocates_output: bool = False):
    """kernel(x2d, w, b) → y with `allocates_output`, else kernel(x2d, w, b, y)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = layer_norm_kernel if allocates_output else _layer_norm_into
    return jit(n, dtype_name(dtype), float(eps), plan.blk_m, plan.threads, plan.n_pad, plan.chunks)


def check_layer_norm_args(op, x, weight, bias, eps) -> float:
    """The arguments of layer_norm (its operator's fake checks them too); returns eps."""
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
    return eps


def check_layer_norm_backward_args(op, dy, x, weight, bias, eps) -> float:
    """The arguments of layer_norm_backward; returns eps."""
    n = x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() > 0 else 0
    check_grad_args(op, dy, x, (("weight", weight, (n,)), ("bias", bias, (n,))))
    eps = check_eps(op, eps)
    check_grad_devices(op, (("x", x), ("dy", dy), ("weight", weight), ("bias", bias)))
    return eps


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.layer_norm(x, (N,), weight, bias, eps) over the last dimension.

    x: CUDA float16/bfloat16/float32, any leading shape, any N (rows of more than 16384
    elements are walked in chunks). weight, bias: (N,), x's dtype and device. out
    (optional): x's shape, dtype and device. Strided or misaligned views (x[:, :N] of a
    wider tensor) are copied first. A NaN or inf in a row makes
    the whole row NaN, as in torch. So does a row whose float32 sum overflows (bfloat16
    or float32 values near their largest); where only the centred squares overflow, the
    row is the bias (rstd is 0). That is F.layer_norm in float32 on the upcast input; torch's
    CUDA kernel keeps Welford's running mean instead, which can part from both where
    float32 overflows.
    """
    op = "layer_norm"
    eps = check_layer_norm_args(op, x, weight, bias, eps)
    n = x.shape[-1]
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # no row, or rows of nothing: torch's result is empty too
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype, eps)(x2, launchable(weight), launchable(bias), dst.tensor.view(x2.shape))
    return dst.result()


def _backward_plan(n: int, dtype: torch.dtype):
    return plan_backward_rows(n, elem_bytes(dtype), backward_registers_per_element(elem_bytes(dtype)))


@functools.lru_cache(maxsize=None)
def backward_kernel_for(n: int, dtype: torch.dtype, eps: float, grid: int):
    """kernel(dy2d, x2d, w) → (dx, dw, db) for rows of n elements on `grid` blocks."""
    plan = _backward_plan(n, dtype)
    return layer_norm_backward_kernel(n, dtype_name(dtype), float(eps), plan.blk_m, plan.threads, plan.n_pad,
                                      plan.chunks, grid)


def layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        eps: float):
    """The gradients of y = layer_norm(x, weight, bias, eps) for the upstream gradient dy:
    (dx, dweight, dbias), in x's and weight's dtype; the weight and bias gradients are
    summed over all rows in float32, in a fixed order. bias is not read (only checked):
    the gradients do not depend on it.

    dy: x's shape and dtype, any layout (an expanded or strided gradient is copied first).
    Mean and rstd are recomputed from x. Any row length; rows of more than 8192 elements
    (12288 in float16) are walked in chunks.
    """
    op = "layer_norm_backward"
    eps = check_layer_norm_backward_args(op, dy, x, weight, bias, eps)
    n = x.shape[-1]
    if x.numel() == 0:
        return (torch.empty_like(x, memory_format=torch.contiguous_format), torch.zeros_like(weight),
                torch.zeros_like(bias))
    check_hidden(op, "x", n)
    x2 = as_rows(op, launchable(x))
    dy2 = as_rows(op, launchable(dy))
    plan = _backward_plan(n, x.dtype)
    grid = persistent_grid(sm_count(x.device), plan.threads, x2.shape[0], plan.blk_m)
    dx, dw, db = backward_kernel_for(n, x.dtype, eps, grid)(dy2, x2, launchable(weight))
    return dx.view(x.shape), dw, db
