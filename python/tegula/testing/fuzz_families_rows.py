"""Fuzz family of wide rows over blocks whose threads are not a power of two (96, 160,
224, 448, 896: DeepSeek-V3's 7168-wide rows at 16 or 32 elements a thread), the shape
that left a row's last threads holding a second row that another block also wrote. A
block takes `bm` rows of a (M, N) tensor, N up to 7168, copies them into a fragment,
applies an element-wise function, reduces each row (sum or max of |x|) and writes the
scaled row and the reductions. Many blocks run at once on a GPU, so a layout that hands a
thread a row outside its block's tile shows there as a race; the interpreters run the
blocks one by one."""
from __future__ import annotations

from .fuzz_gen import Kernel

_FLOATS = ["float32", "float16", "bfloat16"]


def gen_odd_block_rows(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_80"])
    threads = c.choice([96, 160, 224, 448, 896])
    dt = c.choice(_FLOATS)
    N = c.choice([7168, 1792, 3584, 5120, 2880, 448 * 8])
    bm = c.choice([1, 1, 2])
    M = c.int(1, 5) * bm - (1 if bm > 1 and c.flip(0.5) else 0)
    kind = c.choice(["sum", "absmax"])
    k.dtypes.update({dt, "float32"})
    k.features.update({"gen_odd_block_rows", f"rows_threads_{threads}", f"rows_{kind}", f"rows_bm_{bm}"})
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    O = k.tensor("O", [str(M), str(N)], [M, N], "float32", role="out")
    R = k.tensor("R", [str(M)], [M], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as bx:"
    x = k.alloc("fragment", (bm, N), dt, "x")
    a = k.alloc("fragment", (bm, N), "float32", "a")
    r = k.alloc("fragment", (bm,), "float32", "r")
    b = k.body
    b.emit(f"T.copy({X}[bx * {bm}, 0], {x})")
    b.open(f"for i, j in T.Parallel({bm}, {N}):")
    b.emit(f"{a}[i, j] = T.cast({x}[i, j], \"float32\") * 0.5 + 0.25")
    b.close()
    if kind == "sum":
        b.emit(f"T.reduce_sum({a}, {r}, dim=1)")
    else:
        b.emit(f"T.reduce_absmax({a}, {r}, dim=1)")
    b.open(f"for i, j in T.Parallel({bm}, {N}):")
    b.open(f"if bx * {bm} + i < {M}:")
    b.emit(f"{O}[bx * {bm} + i, j] = {a}[i, j] - {r}[i] * 0.001")
    b.close(2)
    b.open(f"for i in T.Parallel({bm}):")
    b.open(f"if bx * {bm} + i < {M}:")
    b.emit(f"{R}[bx * {bm} + i] = {r}[i]")
    b.close(2)


FAMILIES: list = [(gen_odd_block_rows, 1)]
