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

from ._common import (VECTOR_BYTES, Output, as_rows, check_chunks, check_grad_rows,
                      check_devices, check_grad_devices, check_hidden, check_tensor, chunk_loop, describe,
                      dtype_name, elem_bytes, launchable, next_pow2, plan_rows, sm_count)

KINDS = ("sum", "max", "min")


def row_reduce_program(N, dtype, kind, blk_m, threads, n_pad, chunks=1):
    """X (M, N) → O (M, 1). Padding columns load as zero: right for a sum, wrong for a
    max or min, so those variants turn them into -inf / +inf first. With chunks > 1 (one
    row a block) each chunk's reduction is folded into the running one."""
    check_chunks("row_reduce_program", N, n_pad, chunks)
    if kind not in KINDS:
        raise ValueError(f"row_reduce_program: kind must be one of {KINDS}, got {kind!r}")
    M = T.dynamic("m")
    # Padding must never win: -inf for a max, +inf for a min (never NaN, which the
    # reduction would propagate).
    pad = {"sum": 0.0, "max": -T.infinity("float32"), "min": T.infinity("float32")}[kind]
    reduce_rows = {"sum": T.reduce_sum, "max": T.reduce_max, "min": T.reduce_min}[kind]

    @T.prim_func
    def row_reduce_rows(
        X: T.Tensor((M, N), dtype),
        O: T.Tensor((M, 1), dtype),
    ):
        with T.Kernel((M + blk_m - 1) // blk_m, threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            xf = T.alloc_fragment((blk_m, n_pad), "float32")
            r = T.alloc_fragment((blk_m,), "float32")
            if chunks > 1:
                T.fill(r, pad)
            for c in chunk_loop(chunks):
                T.copy(X[bx * blk_m, c * n_pad], x)
                if kind == "sum":
                    T.copy(x, xf)
                else:
                    for i, j in T.Parallel(blk_m, n_pad):
                        xf[i, j] = T.if_then_else(c * n_pad + j < N, T.cast(x[i, j], "float32"), pad)
                reduce_rows(xf, r, dim=1, clear=chunks == 1)
            for i, j in T.Parallel(blk_m, 1):
                O[bx * blk_m + i, j] = T.cast(r[i], dtype)

    return row_reduce_rows


@T.macro
def sum_partial_rows(Partial, Out, rows, N, out_dtype, block_r, block_n, threads):
    """A kernel of its own: Out[j] = the sum over r < rows of Partial[r, j] (float32),
    rounded to out_dtype. Every thread adds its rows in the same order on every run, so the
    result does not depend on how the blocks that wrote Partial were scheduled."""
    with T.Kernel(T.ceildiv(N, block_n), threads=threads) as bx:
        part = T.alloc_fragment((block_r, block_n), "float32")
        acc = T.alloc_fragment((block_r, block_n), "float32")
        total = T.alloc_fragment((block_n,), "float32")
        T.clear(acc)
        for r in T.serial(T.ceildiv(rows, block_r)):
            T.copy(Partial[r * block_r, bx * block_n], part)
            for i, j in T.Parallel(block_r, block_n):
                acc[i, j] += part[i, j]
        T.reduce_sum(acc, total, dim=0)
        for j in T.Parallel(block_n):
            Out[bx * block_n + j] = T.cast(total[j], out_dtype)


def combine_tile(n: int):
    """(block_r, block_n, threads) of `sum_partial_rows`: up to 128 float32 columns a block
    (two 16-byte vectors a thread in a row of 32 threads), 2048 elements a tile."""
    block_n = min(128, max(4, next_pow2(n)))
    return 2048 // block_n, block_n, 128


def column_sum_program(N, dtype, block_r, block_n, threads, grid_r):
    """X (M, N) → S (N,), S[j] = the sum of X[:, j] in float32, rounded to dtype. Kernel 1:
    grid_r blocks down each block_n-column strip, each adding every grid_r-th block_r-row
    tile into a register tile, then summing that tile's rows and writing the block's
    column sums to its row of the workspace Partial (grid_r, N); kernel 2
    (`sum_partial_rows`) adds Partial's rows in a fixed order."""
    M = T.dynamic("m")
    rows = grid_r * block_r
    combine_r, combine_n, combine_threads = combine_tile(N)

    @T.prim_func
    def column_sum_cols(
        X: T.Tensor((M, N), dtype),
        S: T.Tensor((N,), dtype),
    ):
        Partial = T.alloc_global((grid_r, N), "float32")
        with T.Kernel(T.ceildiv(N, block_n), grid_r, threads=threads) as (bx, by):
            x = T.alloc_fragment((block_r, block_n), dtype)
            acc = T.alloc_fragment((block_r, block_n), "float32")
            total = T.alloc_fragment((block_n,), "float32")
            # The first tile initialises acc (rather than a T.clear), so that acc takes the
            # layout of x's 16-byte loads: a float16 thread then owns 8 adjacent columns,
            # not the 4 of a float32 vector (which would halve the load width).
            T.copy(X[by * block_r, bx * block_n], x)
            for i, j in T.Parallel(block_r, block_n):
                acc[i, j] = T.cast(x[i, j], "float32")
            for it in T.serial(1, T.ceildiv(M, rows)):
                T.copy(X[(it * grid_r + by) * block_r, bx * block_n], x)
                for i, j in T.Parallel(block_r, block_n):
                    acc[i, j] += T.cast(x[i, j], "float32")
            T.reduce_sum(acc, total, dim=0)
            for j in T.Parallel(block_n):
                Partial[by, bx * block_n + j] = total[j]
        sum_partial_rows(Partial, S, grid_r, N, dtype, combine_r, combine_n, combine_threads)

    return column_sum_cols


def plan_column_sum(n: int, elem_bytes: int, m: int, sms: int):
    """(block_r, block_n, threads, grid_r) of column_sum_program: strips of up to 256
    columns, tiles of 8192 elements (32 a thread of 256: four 16-byte loads in flight per
    thread for float16, eight for float32), and enough row blocks per strip that the grid
    covers the SMs about four times (four 256-thread blocks an SM keep 64 KiB of float16
    loads in flight per SM), but no more than there are row tiles (a power of two at least
    that, so that a new M seldom needs a new kernel). Each block writes one row of column
    sums, so the workspace is grid_r × N floats: 33 × 4096 for (32768, 4096) on 132 SMs,
    0.5 MiB against the 256 MiB read."""
    vector = VECTOR_BYTES // elem_bytes
    block_n = min(256, max(vector, next_pow2(n)))
    block_r = 8192 // block_n
    strips = -(-n // block_n)
    grid_r = max(1, min(-(-4 * sms // strips), next_pow2(-(-m // block_r))))
    return block_r, block_n, 256, grid_r


# TileLang's form (returns O); the entry points use the second one and pass O themselves.
row_reduce_kernel = tegula.jit(out_idx=[-1])(row_reduce_program)
_row_reduce_into = tegula.jit(row_reduce_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, kind: str, allocates_output: bool = False):
    """kernel(x2d) → o (M, 1) with `allocates_output`, else kernel(x2d, o)."""
    plan = plan_rows(n, elem_bytes(dtype))
    jit = row_reduce_kernel if allocates_output else _row_reduce_into
    return jit(n, dtype_name(dtype), kind, plan.blk_m, plan.threads, plan.n_pad, plan.chunks)


def check_row_reduce_args(op, kind, x) -> None:
    """The argument of row_sum, row_max or row_min (`kind` "sum", "max", "min"); their
    operators' fakes check it too."""
    check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    n = x.shape[-1]
    if n == 0 and kind != "sum":
        # torch's amax/amin raise here too: the extreme of no elements does not exist.
        raise ValueError(f"{op}: the last dimension of x is empty, and a {kind} over no elements "
                         f"is undefined (torch.{'amax' if kind == 'max' else 'amin'} refuses it too); "
                         f"got {describe(x)}")
    if x.numel() > 0:
        check_hidden(op, "x", n)
    check_devices(op, ("x", x))


def check_column_sum_args(op, x) -> None:
    """The argument of column_sum: a gradient, checked without refuse_grad (backward runs
    under no-grad anyway)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: x must be a torch.Tensor, got {describe(x)}")
    check_grad_rows(op, "x", x)
    check_grad_devices(op, (("x", x),))


def _run(op, kind, x, out):
    check_row_reduce_args(op, kind, x)
    n = x.shape[-1]
    shape = tuple(x.shape[:-1])
    dst = Output(op, out, shape, x)
    if x.numel() == 0:  # no row (empty result), or empty rows (sums of nothing: 0)
        if n == 0:
            dst.tensor.zero_()
        return dst.result()
    x2 = as_rows(op, launchable(x))
    kernel_for(n, x.dtype, kind)(x2, dst.tensor.view(x2.shape[0], 1))
    return dst.result()


def row_sum(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.sum(-1), in x's dtype. x: CUDA float16/bfloat16/float32 of any leading shape, any
    last dimension (0: sums of nothing are 0; rows of more than 16384 elements are walked
    in chunks). out (optional): shape x.shape[:-1]. Strided or misaligned views are copied
    first. NaN and inf add as in torch."""
    return _run("row_sum", "sum", x, out)


def row_max(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.amax(-1), in x's dtype; same arguments as `row_sum`, but an empty last dimension
    is an error, as for torch.amax. A NaN anywhere in a row makes its maximum NaN."""
    return _run("row_max", "max", x, out)


def row_min(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.amin(-1), in x's dtype; as `row_max`."""
    return _run("row_min", "min", x, out)


column_sum_kernel = tegula.jit(out_idx=[-1])(column_sum_program)


@functools.lru_cache(maxsize=None)
def column_sum_kernel_for(n: int, dtype: torch.dtype, grid_r_plan: tuple):
    """kernel(x2d) → s (N,); grid_r_plan is plan_column_sum's answer."""
    return column_sum_kernel(n, dtype_name(dtype), *grid_r_plan)


def column_sum(x: torch.Tensor) -> torch.Tensor:
    """x.sum(dim=tuple(range(x.dim() - 1))) for x of shape (..., N): the sum over every
    leading dimension, accumulated in float32 and returned as (N,) in x's dtype (the
    gradient of a bias, or of an operand broadcast along the rows). The order of the
    additions is fixed, so the result is the same on every run.

    x: CUDA float16/bfloat16/float32, any shape of at least one dimension and any layout
    (a gradient expanded with stride 0, a strided or misaligned view is copied first).
    No leading rows gives zeros.
    """
    op = "column_sum"
    check_column_sum_args(op, x)
    n = x.shape[-1]
    if x.numel() == 0:
        return torch.zeros(n, dtype=x.dtype, device=x.device)
    check_hidden(op, "x", n)
    x2 = as_rows(op, launchable(x))
    plan = plan_column_sum(n, elem_bytes(x.dtype), x2.shape[0], sm_count(x.device))
    return column_sum_kernel_for(n, x.dtype, plan)(x2)
