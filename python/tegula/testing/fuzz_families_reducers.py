"""Fuzz family of TileLang's reducers (language/reducers.py): an accumulator of (M,)
elements that the iterations of T.Parallel loops add to across a serial loop over ragged
tiles, combined across the block at T.finalize_reducer with an optional seed. The loop's
source is a copied tile, or a reduction's output (a layout that gives each iteration to
several threads, of which one must count it). A third of the sums and bitwise or / xor
take TileLang's first form: T.clear (or T.fill with the seed), `acc[i] += v` (`|=`, `^=`)
and T.finalize_reducer(acc) in place, then acc copied out."""
from __future__ import annotations

from .fuzz_gen import Kernel

_FLOAT_OPS = ["sum", "max", "min"]
_INT_OPS = ["sum", "max", "min", "bitand", "bitor", "bitxor"]
_FIRST_FORM = {"sum": "+=", "bitor": "|=", "bitxor": "^="}  # the update of TileLang's first form


def gen_reducer(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float32", "int32"])
    op = c.choice(_FLOAT_OPS if dt == "float32" else _INT_OPS)
    k.features.add(f"reducer_{op}")
    threads = c.choice([32, 64, 128, 256])
    M = c.choice([1, 2, 4, 16])
    bk = c.choice([8, 16, 32, 64])
    K = c.int(1, 3) * bk - c.choice([0, 0, c.int(1, bk - 1) if bk > 1 else 0])
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(K)], [M, K], dt, values="signed")
    O = k.tensor("O", [str(M)], [M], dt, role="out")
    k.header = f"with T.Kernel(1, threads={threads}):"
    acc = k.fresh("acc")
    k.body.emit(f"{acc} = T.alloc_reducer(({M},), \"{dt}\", op=\"{op}\")")
    first_form = op in _FIRST_FORM and c.flip(0.35)
    if first_form:
        k.features.add("reducer_first_form")
        if c.flip(0.3):
            k.body.emit(f"T.fill({acc}, {'3' if dt == 'int32' else '0.5'})")
            k.features.add("reducer_seed")
        else:
            k.body.emit(f"T.clear({acc})")
    elif c.flip(0.3):
        seed = "3" if dt == "int32" else "0.5"
        k.body.emit(f"T.reducer_init({acc}, {seed})")
        k.features.add("reducer_seed")
    else:
        k.body.emit(f"T.reducer_init({acc})")
    tile = k.alloc("fragment", (M, bk), dt, "tile")
    via_reduce = dt == "float32" and op == "sum" and c.flip(0.3)

    def update(value):
        if first_form:
            k.body.emit(f"{acc}[i] {_FIRST_FORM[op]} {value}")
        else:
            k.body.emit(f"T.reducer_update({acc}[i], {value})")

    k.body.open(f"for kt in T.serial(T.ceildiv({K}, {bk})):")
    k.body.emit(f"T.copy({X}[0, kt * {bk}], {tile})")
    if via_reduce:
        # Row sums (held by every thread of a row's group) summed once per row.
        rows = k.alloc("fragment", (M,), dt, "rows")
        k.body.open(f"for i, j in T.Parallel({M}, {bk}):")
        k.body.emit(f"{tile}[i, j] = T.if_then_else(kt * {bk} + j < {K}, {tile}[i, j], 0)")
        k.body.close()
        k.body.emit(f"T.reduce_sum({tile}, {rows}, dim=1)")
        k.body.open(f"for i in T.Parallel({M}):")
        update(f"{rows}[i]")
        k.body.close()
        k.features.add("reducer_replicated_source")
    else:
        k.body.open(f"for i, j in T.Parallel({M}, {bk}):")
        k.body.open(f"if kt * {bk} + j < {K}:")
        update(f"{tile}[i, j]")
        k.body.close(2)
    k.body.close()
    if first_form:
        k.body.emit(f"T.finalize_reducer({acc})")
        k.body.emit(f"T.copy({acc}, {O})")
        return
    res = k.alloc("fragment", (M,), dt, "res")
    k.body.emit(f"T.finalize_reducer({acc}, {res})")
    k.body.emit(f"T.copy({res}, {O})")


FAMILIES = [(gen_reducer, 1)]
