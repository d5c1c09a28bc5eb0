"""Fuzz family of rows too wide for the registers: a (bm, bn) tile whose share per thread
is past the 255 words a thread's registers hold (a 16 x 2048 float32 tile over 128
threads is 256 words a thread), which roll_loops writes as loops instead of one statement
per element: loaded (ragged at the right edge half of the time), scaled, optionally reduced
along its rows and the result read back, and stored."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size

# (threads, bm, bn): bm * bn / threads > 255.
SHAPES = ((128, 16, 2048), (128, 32, 1024), (256, 32, 2048), (128, 8, 4096))


def gen_wide_rows(k: Kernel) -> None:
    c = k.c
    threads, bm, bn = c.choice(SHAPES)
    dt = c.choice(["float32", "float16"])
    k.dtypes.add(dt)
    M = _size(c, bm, 2)
    N = bn - c.int(1, 60) if c.flip() else bn
    X = k.tensor("X", [str(M), str(N)], [M, N], dt, values="signed")
    O = k.tensor("O", [str(M), str(N)], [M, N], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as bx:"
    b = k.body
    tile = k.alloc("fragment", (bm, bn), "float32", "wide")
    b.emit(f"T.copy({X}[bx * {bm}, 0], {tile})")
    b.open(f"for i, j in T.Parallel({bm}, {bn}):")
    b.emit(f"{tile}[i, j] = {tile}[i, j] * {c.choice(['0.5', '-2.0', '1.25'])} + {c.choice(['1.0', '0.0', '-0.5'])}")
    b.close()
    k.features.add("wide_rows")
    if c.flip(0.6):
        kind = c.choice(["sum", "max", "absmax"])
        red = k.alloc("fragment", (bm,), "float32", "red")
        b.emit(f"T.reduce_{kind}({tile}, {red}, dim=1)")
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{tile}[i, j] = {tile}[i, j] - {red}[i] * 0.125")
        b.close()
        k.features.add(f"wide_rows_reduce_{kind}")
    b.emit(f"T.copy({tile}, {O}[bx * {bm}, 0])")


FAMILIES = [(gen_wide_rows, 1)]
