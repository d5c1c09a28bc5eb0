"""Row reductions over the last dimension: row_sum(x) = x.sum(-1), row_max(x) = x.amax(-1),
row_min(x) = x.amin(-1).

The result keeps x's dtype, as torch's does; the reduction itself runs in float32 and is
rounded once at the end (torch also accumulates half precision in float32).

The kernel writes its rows into an (M, 1) tensor: the reduced values sit in a 1-D fragment,
and a (blk_m, 1) parallel loop is the one-column tile that stores them; the entry point
returns that tensor viewed with the reduced dimension dropped.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import (Output, as_rows, check_devices, check_hidden, check_tensor, describe,
                      dtype_name, elem_bytes, launchable, plan_rows)

KINDS = ("sum", "max", "min")


def row_reduce_program(N, dtype, kind, blk_m, threads, n_pad):
    """X (M, N) → O (M, 1). Padding columns load as zero: right for a sum, wrong for a
    max or min, so those variants turn them into -inf / +inf first."""
    M = T.dynamic("m")

    if kind == "sum":

        @T.prim_func
        def row_sum_rows(
            X: T.Tensor((M, N), dtype),
            O: T.Tensor((M, 1), dtype),
        ):
            with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
                x = T.alloc_fragment((blk_m, n_pad), dtype)
                xf = T.alloc_fragment((blk_m, n_pad), "float32")
                r = T.alloc_fragment((blk_m,), "float32")
                T.copy(X[bx * blk_m, 0], x)
                T.copy(x, xf)
                T.reduce_sum(xf, r, dim=1)
                for i, j in T.Parallel(blk_m, 1):
                    O[bx * blk_m + i, j] = T.cast(r[i], dtype)

        return row_sum_rows

    if kind not in KINDS:
        raise ValueError(f"row_reduce_program: kind must be one of {KINDS}, got {kind!r}")
    # Padding must never win: -inf for a max, +inf for a min (never NaN, which the
    # reduction would propagate).
    pad = -T.infinity("float32") if kind == "max" else T.infinity("float32")
    reduce_rows = T.reduce_max if kind == "max" else T.reduce_min

    @T.prim_func
    def row_extreme_rows(
        X: T.Tensor((M, N), dtype),
        O: T.Tensor((M, 1), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            xf = T.alloc_fragment((blk_m, n_pad), "float32")
            r = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m, 0], x)
            for i, j in T.Parallel(blk_m, n_pad):
                xf[i, j] = T.if_then_else(j < N, T.cast(x[i, j], "float32"), pad)
            reduce_rows(xf, r, dim=1)
            for i, j in T.Parallel(blk_m, 1):
                O[bx * blk_m + i, j] = T.cast(r[i], dtype)

    return row_extreme_rows


# TileLang's form (returns O); the entry points use the second one and pass O themselves.
row_reduce_kernel = tegula.jit(out_idx=[-1])(row_reduce_program)
_row_reduce_into = tegula.jit(row_reduce_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, kind: str, allocates_output: bool = False):
    """kernel(x2d) → o (M, 1) with `allocates_output`, else kernel(x2d, o)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = row_reduce_kernel if allocates_output else _row_reduce_into
    return jit(n, dtype_name(dtype), kind, plan.blk_m, plan.threads, plan.n_pad)


def _run(op, kind, x, out):
    check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    n = x.shape[-1]
    shape = tuple(x.shape[:-1])
    if n == 0 and kind != "sum":
        # torch's amax/amin raise here too: the extreme of no elements does not exist.
        raise ValueError(f"{op}: the last dimension of x is empty, and a {kind} over no elements "
                         f"is undefined (torch.{'amax' if kind == 'max' else 'amin'} refuses it too); "
                         f"got {describe(x)}")
    if x.numel() > 0:
        check_hidden(op, "x", n)
    check_devices(op, ("x", x))
    dst = Output(op, out, shape, x)
    if x.numel() == 0:  # no row (empty result), or empty rows (sums of nothing: 0)
        if n == 0:
            dst.tensor.zero_()
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype, kind)(x2, dst.tensor.view(x2.shape[0], 1))
    return dst.result()


def row_sum(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.sum(-1), in x's dtype. x: CUDA float16/bfloat16/float32 of any leading shape, last
    dimension a multiple of 8 (or 0: sums of nothing are 0). out (optional): shape
    x.shape[:-1]. Strided or misaligned views are copied first. NaN and inf add as in torch."""
    return _run("row_sum", "sum", x, out)


def row_max(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.amax(-1), in x's dtype; same arguments as `row_sum`, but an empty last dimension
    is an error, as for torch.amax. A NaN anywhere in a row makes its maximum NaN."""
    return _run("row_max", "max", x, out)


def row_min(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.amin(-1), in x's dtype; as `row_max`."""
    return _run("row_min", "min", x, out)
