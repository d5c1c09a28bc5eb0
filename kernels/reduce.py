"""Row reductions over the last dimension: row_sum(x) = x.sum(-1), row_max(x) = x.amax(-1).

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

from ._common import (as_rows, check_hidden, check_out, check_tensor, dtype_name, elem_bytes,
                      plan_rows)

KINDS = ("sum", "max")


def row_reduce_program(N, dtype, kind, blk_m, threads, n_pad):
    """X (M, N) → O (M, 1). Padding columns load as zero: right for a sum, wrong for a
    max, so the max variant turns them into -inf first."""
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

    if kind != "max":
        raise ValueError(f"row_reduce_program: kind must be one of {KINDS}, got {kind!r}")

    @T.prim_func
    def row_max_rows(
        X: T.Tensor((M, N), dtype),
        O: T.Tensor((M, 1), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            xf = T.alloc_fragment((blk_m, n_pad), "float32")
            r = T.alloc_fragment((blk_m,), "float32")
            T.copy(X[bx * blk_m, 0], x)
            for i, j in T.Parallel(blk_m, n_pad):
                xf[i, j] = T.if_then_else(j < N, T.cast(x[i, j], "float32"),
                                          -T.infinity("float32"))
            T.reduce_max(xf, r, dim=1)
            for i, j in T.Parallel(blk_m, 1):
                O[bx * blk_m + i, j] = T.cast(r[i], dtype)

    return row_max_rows


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
    x2 = as_rows(op, x)
    n = x2.shape[1]
    check_hidden(op, "x", n)
    shape = tuple(x.shape[:-1])
    if out is None:
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    else:
        check_out(op, out, shape, x)
    rows = x2.shape[0]
    if rows == 0:  # a grid of zero blocks is not a launch CUDA accepts
        return out
    kernel_for(n, x.dtype, kind)(x2, out.view(rows, 1))
    return out


def row_sum(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.sum(-1), in x's dtype. x: contiguous CUDA float16/bfloat16/float32 of any leading
    shape, last dimension a multiple of 8. out (optional): shape x.shape[:-1]."""
    return _run("row_sum", "sum", x, out)


def row_max(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.amax(-1), in x's dtype; same arguments as `row_sum`."""
    return _run("row_max", "max", x, out)
