"""RMSNorm over the last dimension, y = x / sqrt(mean(x²) + eps) * weight, and the fused
RMSNorm + SiLU, y = silu(rms_norm(x)), silu(v) = v / (1 + exp(-v)).

One pass over memory: each block loads its rows into registers once, reduces the sum of
squares in float32, and writes the scaled rows once. The row plan (`_common.plan_rows`)
decides rows per block and threads. eps is baked into the kernel as a constant: a model
uses one eps, and a constant folds into the rsqrt argument.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, as_rows, check_chunks, check_devices, check_eps, check_grad_args,
                      check_grad_devices, check_hidden, check_tensor, chunk_loop, describe, dtype_name,
                      elem_bytes, launchable, persistent_grid, plan_backward_rows, plan_rows, sm_count)
from .reduce import combine_tile, sum_partial_rows

# Registers the single-pass backward keeps live per element a thread holds: xh, g, t and
# the weight-gradient accumulator, float32 (plan_backward_rows).
BACKWARD_REGISTERS_PER_ELEMENT = 4


def rms_norm_program(N, dtype, eps, silu, blk_m, threads, n_pad, chunks=1):
    """X (M, N), W (N,) → Y (M, N). The fragments are n_pad wide; columns past N load as
    zero, which adds nothing to the sum of squares, and are never stored. With chunks > 1
    (one row a block) the first loop sums the squares chunk by chunk and the second
    re-reads each chunk to scale it; with one chunk the row stays in registers between."""
    check_chunks("rms_norm_program", N, n_pad, chunks)
    M = T.dynamic("m")
    inv_n = 1.0 / N

    @T.prim_func
    def rms_norm_rows(
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        Y: T.Tensor((M, N), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            v = T.alloc_fragment((blk_m, n_pad), "float32")
            ss = T.alloc_fragment((blk_m,), "float32")
            if chunks > 1:
                T.clear(ss)
            for c in chunk_loop(chunks):
                T.copy(X[bx * blk_m, c * n_pad], x)
                for i, j in T.Parallel(blk_m, n_pad):
                    v[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
                T.reduce_sum(v, ss, dim=1, clear=chunks == 1)
            for c in chunk_loop(chunks):
                if chunks > 1:
                    T.copy(X[bx * blk_m, c * n_pad], x)
                # rsqrt(ss[i]·inv_n + eps) is the same for a whole row: the CUDA compiler
                # hoists it out of the unrolled per-thread loop.
                if silu:
                    # The normalised value is kept unrounded in float32 so that silu sees
                    # what an unfused float32 computation would.
                    for i, j in T.Parallel(blk_m, n_pad):
                        v[i, j] = (T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                                   * T.cast(W[c * n_pad + j], "float32"))
                    for i, j in T.Parallel(blk_m, n_pad):
                        x[i, j] = T.cast(v[i, j] / (1.0 + T.exp(-v[i, j])), dtype)
                else:
                    for i, j in T.Parallel(blk_m, n_pad):
                        x[i, j] = T.cast(
                            T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                            * T.cast(W[c * n_pad + j], "float32"),
                            dtype)
                T.copy(x, Y[bx * blk_m, c * n_pad])

    return rms_norm_rows


@T.macro
def upstream_grad(g, dy, xh, W, col0, silu, blk_m, n_pad):
    """g = the gradient reaching the normalised (and weighted) value: dy itself, or for the
    fused SiLU dy·silu'(v) with v = xh·w recomputed, silu'(v) = s·(1 + v·(1 - s)),
    s = sigmoid(v)."""
    for i, j in T.Parallel(blk_m, n_pad):
        if silu:
            v = xh[i, j] * T.cast(W[col0 + j], "float32")
            s = 1.0 / (1.0 + T.exp(-v))
            g[i, j] = T.cast(dy[i, j], "float32") * (s * (1.0 + v * (1.0 - s)))
        else:
            g[i, j] = T.cast(dy[i, j], "float32")


def rms_norm_backward_program(N, dtype, eps, silu, blk_m, threads, n_pad, chunks, grid):
    """DY, X (M, N), W (N,) → DX (M, N), DW (N,). With xh = x·rstd, rstd recomputed from x,
    and g the upstream gradient (`upstream_grad`):

        dx = rstd · (g·w - xh · mean(g·w·xh)),    dw = Σ_rows g·xh

    Kernel 1 runs `grid` blocks, each looping over every grid-th group of blk_m rows and
    adding its rows' g·xh to a float32 accumulator; the accumulators go to the workspace
    Partial (grid·blk_m, N) and kernel 2 (`sum_partial_rows`) adds them in a fixed order.
    One chunk: the row stays in registers and so does the accumulator. Several chunks (one
    row at a time): a pass for the sums (two for SiLU, whose g needs rstd), then a pass that
    writes dx and adds into the block's own row of Partial in place."""
    check_chunks("rms_norm_backward_program", N, n_pad, chunks)
    M = T.dynamic("m")
    inv_n = 1.0 / N
    rows = grid * blk_m
    combine = combine_tile(N)

    @T.prim_func
    def rms_norm_backward_rows(
        DY: T.Tensor((M, N), dtype),
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        DX: T.Tensor((M, N), dtype),
        DW: T.Tensor((N,), dtype),
    ):
        Partial = T.alloc_global((rows, N), "float32")
        with T.Kernel(grid, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            dy = T.alloc_fragment((blk_m, n_pad), dtype)
            xh = T.alloc_fragment((blk_m, n_pad), "float32")
            g = T.alloc_fragment((blk_m, n_pad), "float32")
            t = T.alloc_fragment((blk_m, n_pad), "float32")
            ss = T.alloc_fragment((blk_m,), "float32")
            dot = T.alloc_fragment((blk_m,), "float32")
            if chunks == 1:
                acc = T.alloc_fragment((blk_m, n_pad), "float32")
                T.clear(acc)
            else:
                T.clear(t)
                for c in T.serial(chunks):
                    T.copy(t, Partial[bx, c * n_pad])
            for it in T.serial(T.ceildiv(M, rows)):
                row = (it * grid + bx) * blk_m
                if chunks == 1:
                    T.copy(X[row, 0], x)
                    T.copy(DY[row, 0], dy)
                    for i, j in T.Parallel(blk_m, n_pad):
                        t[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
                    T.reduce_sum(t, ss, dim=1)
                    for i, j in T.Parallel(blk_m, n_pad):
                        xh[i, j] = T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                    upstream_grad(g, dy, xh, W, 0, silu, blk_m, n_pad)
                    for i, j in T.Parallel(blk_m, n_pad):
                        acc[i, j] += g[i, j] * xh[i, j]
                        g[i, j] = g[i, j] * T.cast(W[j], "float32")
                        t[i, j] = g[i, j] * xh[i, j]
                    T.reduce_sum(t, dot, dim=1)
                    for i, j in T.Parallel(blk_m, n_pad):
                        x[i, j] = T.cast(T.rsqrt(ss[i] * inv_n + eps) * (g[i, j] - xh[i, j] * (dot[i] * inv_n)),
                                         dtype)
                    T.copy(x, DX[row, 0])
                else:
                    # Pass 1: the sum of squares, and without SiLU Σ dy·w·x (= dot / rstd).
                    T.clear(ss)
                    T.clear(dot)
                    for c in T.serial(chunks):
                        T.copy(X[row, c * n_pad], x)
                        for i, j in T.Parallel(blk_m, n_pad):
                            t[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
                        T.reduce_sum(t, ss, dim=1, clear=False)
                        if not silu:
                            T.copy(DY[row, c * n_pad], dy)
                            for i, j in T.Parallel(blk_m, n_pad):
                                t[i, j] = (T.cast(dy[i, j], "float32") * T.cast(W[c * n_pad + j], "float32")
                                           * T.cast(x[i, j], "float32"))
                            T.reduce_sum(t, dot, dim=1, clear=False)
                    if silu:
                        # Pass 2 (SiLU): g needs rstd, so Σ g·w·xh waits for it.
                        for c in T.serial(chunks):
                            T.copy(X[row, c * n_pad], x)
                            T.copy(DY[row, c * n_pad], dy)
                            for i, j in T.Parallel(blk_m, n_pad):
                                xh[i, j] = T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                            upstream_grad(g, dy, xh, W, c * n_pad, silu, blk_m, n_pad)
                            for i, j in T.Parallel(blk_m, n_pad):
                                t[i, j] = g[i, j] * T.cast(W[c * n_pad + j], "float32") * xh[i, j]
                            T.reduce_sum(t, dot, dim=1, clear=False)
                    else:
                        for i in T.Parallel(blk_m):
                            dot[i] = dot[i] * T.rsqrt(ss[i] * inv_n + eps)
                    # Last pass: dx, and g·xh added into this block's row of Partial.
                    for c in T.serial(chunks):
                        T.copy(X[row, c * n_pad], x)
                        T.copy(DY[row, c * n_pad], dy)
                        T.copy(Partial[bx, c * n_pad], t)
                        for i, j in T.Parallel(blk_m, n_pad):
                            xh[i, j] = T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                        upstream_grad(g, dy, xh, W, c * n_pad, silu, blk_m, n_pad)
                        for i, j in T.Parallel(blk_m, n_pad):
                            t[i, j] += g[i, j] * xh[i, j]
                            x[i, j] = T.cast(T.rsqrt(ss[i] * inv_n + eps)
                                             * (g[i, j] * T.cast(W[c * n_pad + j], "float32")
                                                - xh[i, j] * (dot[i] * inv_n)),
                                             dtype)
                        T.copy(x, DX[row, c * n_pad])
                        T.copy(t, Partial[bx, c * n_pad])
            if chunks == 1:
                T.copy(acc, Partial[bx * blk_m, 0])
        sum_partial_rows(Partial, DW, rows, N, dtype, *combine)

    return rms_norm_backward_rows


# TileLang's form (returns Y); the entry points use the second one and pass Y themselves.
rms_norm_kernel = tegula.jit(out_idx=[-1])(rms_norm_program)
_rms_norm_into = tegula.jit(rms_norm_program)
rms_norm_backward_kernel = tegula.jit(out_idx=[-2, -1])(rms_norm_backward_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, eps: float, silu: bool = False,
               allocates_output: bool = False):
    """The jit kernel for rows of n elements: kernel(x2d, w) → y with `allocates_output`,
    else kernel(x2d, w, y)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = rms_norm_kernel if allocates_output else _rms_norm_into
    return jit(n, dtype_name(dtype), float(eps), bool(silu), plan.blk_m, plan.threads, plan.n_pad,
               plan.chunks)


def check_rms_norm_args(op, x, weight, eps) -> float:
    """The arguments of rms_norm and rms_norm_silu (their operators' fakes check them
    too, so a traced call fails where an eager one would); returns eps as a float."""
    check_tensor(op, "x", x)
    check_tensor(op, "weight", weight, like=x)
    eps = check_eps(op, eps)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    n = x.shape[-1]
    if tuple(weight.shape) != (n,):
        raise ValueError(f"{op}: weight must have shape ({n},) (the last dimension of x), "
                         f"got {describe(weight)}")
    if x.numel() > 0:
        check_hidden(op, "x", n)
    check_devices(op, ("x", x), ("weight", weight))
    return eps


def check_rms_norm_backward_args(op, dy, x, weight, eps) -> float:
    """The arguments of rms_norm_backward; returns eps as a float."""
    n = x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() > 0 else 0
    check_grad_args(op, dy, x, (("weight", weight, (n,)),))
    eps = check_eps(op, eps)
    check_grad_devices(op, (("x", x), ("dy", dy), ("weight", weight)))
    return eps


def _run(op, x, weight, eps, silu, out):
    eps = check_rms_norm_args(op, x, weight, eps)
    n = x.shape[-1]
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # no row, or rows of nothing: torch's result is empty too
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype, eps, silu)(x2, launchable(weight), dst.tensor.view(x2.shape))
    return dst.result()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm(x, (N,), weight, eps) over the last dimension N.

    x: CUDA float16/bfloat16/float32, any leading shape, any N (rows of more than 16384
    elements are walked in chunks). weight: (N,), x's dtype and device. out (optional):
    x's shape, dtype and device. Views that are strided or do not start on a 16-byte
    boundary (x[:, :N] of a wider tensor) are copied first.
    NaN and inf propagate as in torch: a NaN makes its row NaN; an inf makes its row's
    sum of squares inf, so its own output NaN and the rest of its row 0. So do squares
    past float32's range (bfloat16 or float32 values near their largest; float16's never
    get there): the row comes out 0. That is F.rms_norm in float32 on the upcast input,
    and torch's CUDA kernel on rows of a multiple of 4 elements; on other rows that kernel
    keeps Welford's running mean and variance instead, where an inf makes the whole row
    NaN.
    """
    return _run("rms_norm", x, weight, eps, False, out)


def rms_norm_silu(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(rms_norm(x, weight, eps)) in one pass; same arguments as `rms_norm`."""
    return _run("rms_norm_silu", x, weight, eps, True, out)


@functools.lru_cache(maxsize=None)
def backward_kernel_for(n: int, dtype: torch.dtype, eps: float, silu: bool, grid: int):
    """kernel(dy2d, x2d, w) → (dx, dw) for rows of n elements on `grid` blocks."""
    plan = plan_backward_rows(n, elem_bytes(dtype), BACKWARD_REGISTERS_PER_ELEMENT)
    return rms_norm_backward_kernel(n, dtype_name(dtype), float(eps), bool(silu), plan.blk_m, plan.threads,
                                    plan.n_pad, plan.chunks, grid)


def rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float,
                      silu: bool = False):
    """The gradients of y = rms_norm(x, weight, eps) (or, with silu, of silu(rms_norm(...)))
    for the upstream gradient dy: (dx, dweight). dx has x's shape and dtype, dweight
    weight's; the weight gradient is summed over all rows in float32, in a fixed order.

    dy: x's shape and dtype, any layout (an expanded or strided gradient is copied first).
    The statistics are recomputed from x, so nothing of the forward needs to be kept.
    Any row length; rows of more than 12288 elements (8192 where 512 × 24 does not tile
    them) are walked in chunks.
    """
    op = "rms_norm_backward"
    eps = check_rms_norm_backward_args(op, dy, x, weight, eps)
    n = x.shape[-1]
    if x.numel() == 0:
        return torch.empty_like(x, memory_format=torch.contiguous_format), torch.zeros_like(weight)
    check_hidden(op, "x", n)
    x2 = as_rows(op, launchable(x))
    dy2 = as_rows(op, launchable(dy))
    plan = plan_backward_rows(n, elem_bytes(x.dtype), BACKWARD_REGISTERS_PER_ELEMENT)
    grid = persistent_grid(sm_count(x.device), plan.threads, x2.shape[0], plan.blk_m)
    dx, dw = backward_kernel_for(n, x.dtype, eps, bool(silu), grid)(dy2, x2, launchable(weight))
    return dx.view(x.shape), dw
