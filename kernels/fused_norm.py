"""The residual add fused into the RMSNorm after it, the Llama decoder's pattern

    hidden = residual + attn_out          h = x + residual, in the activation dtype
    normed = norm(hidden)                 y = h / sqrt(mean(h²) + eps) * weight

in one pass: each block reads its rows of x and residual once, writes h, and scales the
rows it still holds in registers into y. h is rounded to the dtype before the norm reads
it, exactly what torch's `x + residual` gives and what the norm of the unfused code reads;
the norm itself is kernels/rmsnorm.py's (float32, rounded once). With inplace=True h is
written over residual (as vLLM's fused_add_rms_norm does), so no new tensor is needed
for it.

The row plan is `_common.plan_rows`'s (`registers_per_element`), so rows up to 16384
elements stay in registers and longer ones are walked in chunks: the first pass writes h
chunk by chunk and sums its squares; the second re-reads h (each thread the elements it
wrote, recent enough to come from L2) and writes y.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, as_rows, check_chunks, check_devices, check_eps, check_hidden, check_tensor,
                      chunk_loop, describe, dtype_name, elem_bytes, is_launchable, launchable, plan_rows)


def registers_per_element(elem: int) -> float:
    """Float32 registers a thread keeps live per element it holds: h (x's fragment, once
    residual is added in and dead) and the weight in the dtype (half a register each for
    the 16-bit types), and one float32 working copy."""
    return 1 + 2 * elem / 4


@T.macro
def add_rms_norm_rows(X, R, W, Y, H, N, dtype, eps, blk_m, n_pad, chunks, bx):
    """Rows bx·blk_m.. of X and R → H = X + R (rounded to dtype) and Y = rms_norm(H)·W.
    H may be R itself (inplace): each element of R is read before the same thread writes
    it, and the second pass of a chunked row reads back what the first wrote."""
    inv_n = 1.0 / N
    x = T.alloc_fragment((blk_m, n_pad), dtype)
    r = T.alloc_fragment((blk_m, n_pad), dtype)
    v = T.alloc_fragment((blk_m, n_pad), "float32")
    ss = T.alloc_fragment((blk_m,), "float32")
    if chunks > 1:
        T.clear(ss)
    if chunks == 1:
        # The weight, each row's copy, loaded with x and residual: its latency is not paid
        # after the reduction (with the row in registers, nothing else would hide it).
        w = T.alloc_fragment((blk_m, n_pad), dtype)
    for c in chunk_loop(chunks):
        T.copy(X[bx * blk_m, c * n_pad], x)
        T.copy(R[bx * blk_m, c * n_pad], r)
        if chunks == 1:
            for i, j in T.Parallel(blk_m, n_pad):
                w[i, j] = W[j]
        for i, j in T.Parallel(blk_m, n_pad):
            x[i, j] = T.cast(T.cast(x[i, j], "float32") + T.cast(r[i, j], "float32"), dtype)
        T.copy(x, H[bx * blk_m, c * n_pad])
        # Padding columns load as 0 in both: h = 0 adds nothing to the sum of squares.
        for i, j in T.Parallel(blk_m, n_pad):
            v[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
        T.reduce_sum(v, ss, dim=1, clear=chunks == 1)
    for c in chunk_loop(chunks):
        if chunks > 1:
            T.copy(H[bx * blk_m, c * n_pad], x)
        for i, j in T.Parallel(blk_m, n_pad):
            wj = T.cast(w[i, j], "float32") if chunks == 1 else T.cast(W[c * n_pad + j], "float32")
            x[i, j] = T.cast(T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps) * wj, dtype)
        T.copy(x, Y[bx * blk_m, c * n_pad])


def add_rms_norm_program(N, dtype, eps, inplace, blk_m, threads, n_pad, chunks=1):
    """X, R (M, N), W (N,) → Y (M, N) and H = X + R (M, N); with `inplace` H is R and the
    kernel takes (X, R, W, Y). Fragments n_pad wide (columns past N load as 0 and are never
    stored); chunks > 1 walks a row of one block in chunks of n_pad columns."""
    check_chunks("add_rms_norm_program", N, n_pad, chunks)
    M = T.dynamic("m")

    if inplace:

        @T.prim_func
        def add_rms_norm_inplace(
            X: T.Tensor((M, N), dtype),
            R: T.Tensor((M, N), dtype),
            W: T.Tensor((N,), dtype),
            Y: T.Tensor((M, N), dtype),
        ):
            with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
                add_rms_norm_rows(X, R, W, Y, R, N, dtype, eps, blk_m, n_pad, chunks, bx)

        return add_rms_norm_inplace

    @T.prim_func
    def add_rms_norm(
        X: T.Tensor((M, N), dtype),
        R: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        Y: T.Tensor((M, N), dtype),
        H: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            add_rms_norm_rows(X, R, W, Y, H, N, dtype, eps, blk_m, n_pad, chunks, bx)

    return add_rms_norm


# TileLang's form (returns Y and H; for inplace=False only), and the form the entry point
# calls with its own outputs.
add_rms_norm_kernel = tegula.jit(out_idx=[3, 4])(add_rms_norm_program)
_add_rms_norm_into = tegula.jit(add_rms_norm_program)


def plan(n: int, dtype: torch.dtype):
    """The row plan for rows of n elements of dtype (plan_rows at this kernel's registers)."""
    elem = elem_bytes(dtype)
    return plan_rows(n, elem, registers_per_element=registers_per_element(elem))


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, eps: float, inplace: bool = False):
    """kernel(x2d, r2d, w, y, h), or with inplace kernel(x2d, r2d, w, y) writing h into r2d."""
    p = plan(n, dtype)
    return _add_rms_norm_into(n, dtype_name(dtype), float(eps), bool(inplace), p.blk_m, p.threads, p.n_pad,
                              p.chunks)


def check_add_rms_norm_args(op, x, residual, weight, eps, inplace=False) -> float:
    """The arguments of add_rms_norm (its operators' fakes check them too); returns eps."""
    check_tensor(op, "x", x)
    check_tensor(op, "residual", residual, like=x)
    check_tensor(op, "weight", weight, like=x)
    eps = check_eps(op, eps)
    if not isinstance(inplace, bool):
        raise TypeError(f"{op}: inplace must be a bool, got {inplace!r}")
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    if residual.shape != x.shape:
        raise ValueError(f"{op}: residual must have the shape {tuple(x.shape)} of x, got {describe(residual)}")
    n = x.shape[-1]
    if tuple(weight.shape) != (n,):
        raise ValueError(f"{op}: weight must have shape ({n},) (the last dimension of x), got {describe(weight)}")
    if x.numel() > 0:
        check_hidden(op, "x", n)
    check_devices(op, ("x", x), ("residual", residual), ("weight", weight))
    return eps


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                 inplace: bool = False, out: torch.Tensor | None = None):
    """(y, h) with h = x + residual and y = rms_norm(h, weight, eps), in one pass.

    h is rounded to the dtype as torch's `x + residual` is, and the norm reads that h;
    y = h / sqrt(mean(h²) + eps) · weight in float32, rounded once (F.rms_norm of h in
    float32). x, residual: one shape (..., N) and dtype, CUDA float16/bfloat16/float32, any
    N >= 1 (rows past 16384 elements walked in chunks). weight: (N,). With inplace=True,
    h is written into residual and the h returned is residual itself. out (optional): y's
    shape, dtype and device. Strided or misaligned views are read through a copy (and
    with inplace, written back). NaN and inf propagate as in torch: a NaN or inf in h
    makes its row's sum of squares NaN or inf, and y follows F.rms_norm.
    """
    op = "add_rms_norm"
    eps = check_add_rms_norm_args(op, x, residual, weight, eps, inplace)
    n = x.shape[-1]
    y = Output(op, out, x.shape, x)
    h = Output(op, residual if inplace else None, x.shape, x)
    if x.numel() == 0:
        return y.result(), h.result()
    x2 = as_rows(op, launchable(x))
    r2 = as_rows(op, launchable(residual))
    y2 = y.tensor.view(x2.shape)
    if inplace and is_launchable(residual):
        kernel_for(n, x.dtype, eps, True)(x2, r2, launchable(weight), y2)
    else:
        kernel_for(n, x.dtype, eps, False)(x2, r2, launchable(weight), y2, h.tensor.view(x2.shape))
    return y.result(), h.result()
