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

from ._common import (Output, as_rows, check_devices, check_eps, check_hidden, check_tensor,
                      describe, dtype_name, elem_bytes, launchable, plan_rows)


def rms_norm_program(N, dtype, eps, silu, blk_m, threads, n_pad):
    """X (M, N), W (N,) → Y (M, N). The fragments are n_pad wide; columns past N load as
    zero, which adds nothing to the sum of squares, and are never stored."""
    M = T.dynamic("m")
    inv_n = 1.0 / N

    if not silu:

        @T.prim_func
        def rms_norm_rows(
            X: T.Tensor((M, N), dtype),
            W: T.Tensor((N,), dtype),
            Y: T.Tensor((M, N), dtype),
        ):
            with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
                x = T.alloc_fragment((blk_m, n_pad), dtype)
                sq = T.alloc_fragment((blk_m, n_pad), "float32")
                ss = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], x)
                for i, j in T.Parallel(blk_m, n_pad):
                    sq[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
                T.reduce_sum(sq, ss, dim=1)
                # rsqrt(ss[i]·inv_n + eps) is the same for a whole row: the CUDA compiler
                # hoists it out of the unrolled per-thread loop.
                for i, j in T.Parallel(blk_m, n_pad):
                    x[i, j] = T.cast(
                        T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                        * T.cast(W[j], "float32"),
                        dtype)
                T.copy(x, Y[bx * blk_m, 0])

        return rms_norm_rows

    @T.prim_func
    def rms_norm_silu_rows(
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), dtype),
        Y: T.Tensor((M, N), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            v = T.alloc_fragment((blk_m, n_pad), "float32")
            ss = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m, 0], x)
            for i, j in T.Parallel(blk_m, n_pad):
                v[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
            T.reduce_sum(v, ss, dim=1)
            # The normalised value is kept unrounded in float32 so that silu sees what an
            # unfused float32 computation would.
            for i, j in T.Parallel(blk_m, n_pad):
                v[i, j] = (T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                           * T.cast(W[j], "float32"))
            for i, j in T.Parallel(blk_m, n_pad):
                x[i, j] = T.cast(v[i, j] / (1.0 + T.exp(-v[i, j])), dtype)
            T.copy(x, Y[bx * blk_m, 0])

    return rms_norm_silu_rows


# TileLang's form (returns Y); the entry points use the second one and pass Y themselves.
rms_norm_kernel = tegula.jit(out_idx=[-1])(rms_norm_program)
_rms_norm_into = tegula.jit(rms_norm_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, eps: float, silu: bool = False,
               allocates_output: bool = False):
    """The jit kernel for rows of n elements: kernel(x2d, w) → y with `allocates_output`,
    else kernel(x2d, w, y)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = rms_norm_kernel if allocates_output else _rms_norm_into
    return jit(n, dtype_name(dtype), float(eps), bool(silu), plan.blk_m, plan.threads, plan.n_pad)


def _run(op, x, weight, eps, silu, out):
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
    dst = Output(op, out, x.shape, x)
    if x.numel() == 0:  # no row, or rows of nothing: torch's result is empty too
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype, eps, silu)(x2, launchable(weight), dst.tensor.view(x2.shape))
    return dst.result()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm(x, (N,), weight, eps) over the last dimension N.

    x: CUDA float16/bfloat16/float32, any leading shape, N a multiple of 8 (or any N when
    x is empty). weight: (N,), x's dtype and device. out (optional): x's shape, dtype and
    device. Views that are strided or do not start on a 16-byte boundary are copied first.
    NaN and inf propagate as in torch: a NaN makes its row NaN; an inf makes its row's
    sum of squares inf, so its own output NaN and the rest of its row 0.
    """
    return _run("rms_norm", x, weight, eps, False, out)


def rms_norm_silu(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(rms_norm(x, weight, eps)) in one pass; same arguments as `rms_norm`."""
    return _run("rms_norm_silu", x, weight, eps, True, out)
