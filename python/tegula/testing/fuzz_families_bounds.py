"""Fuzz family of T.Parallel nests over extents known only at launch but bounded
(transform/bound_parallel.cc)."""
from __future__ import annotations

from .fuzz_gen import Kernel


def gen_bounded_parallel(k: Kernel) -> None:
    """A T.Parallel nest whose extents are known only at launch, bounded by T.min
    (transform/bound_parallel.cc): a scalar count of rows (0, negative, inside or past the
    tile), over a fragment or straight to global memory."""
    c = k.c
    bm, bn = c.choice([8, 16, 32, 64]), c.choice([16, 32, 64])
    M = bm * c.int(1, 3)
    n_rows = c.choice([0, -3, 1, bm // 2, bm, bm + 5])
    dt = c.choice(["float32", "float16"])
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(bn)], [M, bn], dt)
    O = k.tensor("O", [str(M), str(bn)], [M, bn], dt, role="out")
    rows = k.scalar("rows", "int32", n_rows)
    k.header = f"with T.Kernel({M // bm}, threads={c.choice([32, 64, 128])}) as bx:"
    k.features.add("bounded_parallel")
    if c.flip(0.5):
        f = k.alloc("fragment", (bm, bn), dt, "f")
        k.body.emit(f"T.clear({f})")
        k.body.open(f"for i, j in T.Parallel(T.min({rows}, {bm}), {bn}):")
        k.body.emit(f"{f}[i, j] = {X}[bx * {bm} + i, j] * 2")
        k.body.close()
        k.body.emit(f"T.copy({f}, {O}[bx * {bm}, 0])")
        k.features.add("bounded_parallel_fragment")
    else:
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{O}[bx * {bm} + i, j] = 0")
        k.body.close()
        k.body.open(f"for i in T.Parallel(T.min({rows}, {bm})):")
        k.body.open(f"for j in T.Parallel({bn}):")
        k.body.emit(f"{O}[bx * {bm} + i, j] = {X}[bx * {bm} + i, j] + 1")
        k.body.close(2)


FAMILIES = [(gen_bounded_parallel, 1)]
