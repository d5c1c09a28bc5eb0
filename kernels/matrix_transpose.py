"""Transpose of a 2-D tensor, y = x.t().contiguous(), through a shared-memory tile.

Reading x row by row and writing y row by row are both coalesced only if the tile turns
around in between: a block loads a 64×64 tile of x along its rows into shared memory, then
reads the tile down its columns to write y along y's rows.

Shared-memory rows are padded by 4 bytes, which makes a row an odd number of 4-byte
words, so consecutive rows start in consecutive banks. The second loop reads the tile down
its columns: where each thread stores one element of y, a warp reads 32 consecutive rows
of one column, which is free of bank conflicts with the pad and a 32-way conflict without
it (a 64-element float16 row is exactly 32 banks). Where each thread stores a 16-byte
vector of y, a warp reads rows 8 apart (float16); an odd row length in words spreads them
over 4 banks pairwise (2-way) instead of 1 (8-way). The price is that rows are only 4-byte
aligned, so the first loop stores to shared memory in 4-byte pieces.

Both dimensions are compile-time constants here (unlike the row kernels' dynamic M): y's
row stride is x's row count, and the store vectors may only be as wide as that stride's
alignment allows, which the compiler can prove only for a constant.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import Output, check_devices, check_tensor, describe, dtype_name, elem_bytes, launchable

TILE = 64
THREADS = 256
PAD_BYTES = 4  # one 4-byte bank word: see the module note


def transpose_program(M, N, dtype, tile, threads, pad):
    """X (M, N) → Y (N, M). Tiles hanging over either edge are masked by the engine:
    loads past the edge give zero (kept only in the tile's unused corner), stores are
    skipped."""

    @T.prim_func
    def transpose_tiles(
        X: T.Tensor((M, N), dtype),
        Y: T.Tensor((N, M), dtype),
    ):
        with T.Kernel((N + tile - 1) // tile, (M + tile - 1) // tile,
                      threads=threads) as (bx, by):
            buf = T.alloc_shared((tile, tile + pad), dtype)
            # Coalesced along x's rows: consecutive threads, consecutive columns of x.
            for i, j in T.Parallel(tile, tile):
                buf[i, j] = X[by * tile + i, bx * tile + j]
            # Coalesced along y's rows: y[bx·tile + i, by·tile + j] = x[by·tile + j, bx·tile + i].
            for i, j in T.Parallel(tile, tile):
                Y[bx * tile + i, by * tile + j] = buf[j, i]

    return transpose_tiles


# TileLang's form (returns Y); the entry point uses the second one and passes Y itself.
transpose_kernel = tegula.jit(out_idx=[-1])(transpose_program)
_transpose_into = tegula.jit(transpose_program)


@functools.lru_cache(maxsize=None)
def kernel_for(m: int, n: int, dtype: torch.dtype, allocates_output: bool = False):
    """kernel(x) → y with `allocates_output`, else kernel(x, y); for x of shape (m, n)."""
    pad = PAD_BYTES // elem_bytes(dtype)
    jit = transpose_kernel if allocates_output else _transpose_into
    return jit(m, n, dtype_name(dtype), TILE, THREADS, pad)


def check_transpose_args(op, x) -> None:
    """The argument of transpose (its operator's fake checks it too)."""
    check_tensor(op, "x", x)
    if x.dim() != 2:
        raise ValueError(f"{op}: x must be a 2-D tensor, got {describe(x)}")
    check_devices(op, ("x", x))


def transpose(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x.t().contiguous() for a 2-D CUDA tensor of float16/bfloat16/float32 (strided or
    misaligned views are copied first).

    out (optional): shape (x.shape[1], x.shape[0]), x's dtype and device. Each distinct
    shape compiles its own kernel (see the module note on why both sizes are constants).
    """
    op = "transpose"
    check_transpose_args(op, x)
    m, n = x.shape
    dst = Output(op, out, (n, m), x)
    if m == 0 or n == 0:  # a grid of zero blocks is not a launch CUDA accepts
        return dst.result()
    kernel_for(m, n, x.dtype)(launchable(x), dst.tensor)
    return dst.result()
