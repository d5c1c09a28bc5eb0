"""Fuzz family of fragments indexed by a T.Parallel nest's row-major position under another
shape (TileLang's composable index): a (bm, bn) tile of X in a fragment, written in a 2-D
loop into a 1-D fragment at i * bn + j (or the 1-D fragment filled first and read there),
then stored to O from a 1-D loop (or a 2-D one), ragged at the edges."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size, _threads


def gen_flat_index(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float32", "float16", "int32"])
    k.dtypes.add(dt)
    bm, bn = c.choice([2, 4, 8, 16, 32]), c.choice([8, 16, 32, 64])
    M, N = _size(c, bm), _size(c, bn)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt, values="signed" if dt != "int32" else "ints")
    O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={_threads(c)}) as (bx, by):"
    b = k.body
    flat = k.alloc("fragment", (bm * bn,), dt, "flat")
    row, col = f"by * {bm}", f"bx * {bn}"
    if c.flip():
        k.features.add("flat_write")
        tile = k.alloc("fragment", (bm, bn), dt, "tile")
        b.emit(f"T.copy({X}[{row}, {col}], {tile})")
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{flat}[i * {bn} + j] = {tile}[i, j] * 2")
        b.close()
        b.open(f"for f in T.Parallel({bm * bn}):")
        b.open(f"if {row} + f // {bn} < {M} and {col} + f % {bn} < {N}:")
        b.emit(f"{O}[{row} + f // {bn}, {col} + f % {bn}] = {flat}[f] + 1")
        b.close(2)
    else:
        k.features.add("flat_read")
        b.open(f"for f in T.Parallel({bm * bn}):")
        b.emit(f"{flat}[f] = T.if_then_else({row} + f // {bn} < {M} and {col} + f % {bn} < {N}, "
               f"{X}[{row} + f // {bn}, {col} + f % {bn}], 0)")
        b.close()
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.open(f"if {row} + i < {M} and {col} + j < {N}:")
        b.emit(f"{O}[{row} + i, {col} + j] = {flat}[i * {bn} + j] * 2 + 1")
        b.close(2)


FAMILIES = [(gen_flat_index, 1)]
