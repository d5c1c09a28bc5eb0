"""Fuzz family of conversions between float types, the code pack_casts and vectorize_loops
make vector: float32 / float16 / bfloat16 / float8_e4m3fn / float8_e5m2 in every pair,
converted by a T.copy of global tensors, register to register in a T.Parallel loop between
fragments (a plain element or a computed value, T.cast or an implied conversion), or in a
T.vectorized loop over each row inside a T.Parallel over rows (rows ragged against the
block, behind a guard); on sm_80 (conversions one at a time for the 8-bit floats), sm_89
and sm_90a (pairs). Values span the 8-bit floats' range and past it (saturation)."""
from __future__ import annotations

from .fuzz_gen import Kernel, Tiling, _size, load_tile, store_tile

FLOATS = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


def gen_convert(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_89", "sm_80"])
    src = c.choice(FLOATS)
    dst = c.choice([t for t in FLOATS if t != src])
    k.dtypes.update({src, dst})
    form = c.choice(["global_copy", "registers", "vectorized"])
    threads = c.choice([128, 64, 32])
    values = "wide" if c.flip(0.6) else "signed"
    if form == "vectorized":
        cols = c.choice([4, 8, 16, 2, 6])
        rows = c.choice([32, 64, 16])
        M = _size(c, rows, 3)
        X = k.tensor("X", [str(M), str(cols)], [M, cols], src, values=values)
        O = k.tensor("O", [str(M), str(cols)], [M, cols], dst, role="out")
        k.header = f"with T.Kernel(T.ceildiv({M}, {rows}), threads={threads}) as bx:"
        b = k.body
        b.open(f"for i in T.Parallel({rows}):")
        b.open(f"if bx * {rows} + i < {M}:")
        b.open(f"for j in T.vectorized({cols}):")
        scale = c.choice(["", " * 0.5", " + 1.0"]) if c.flip(0.4) else ""
        value = f"X[bx * {rows} + i, j]"
        if scale:
            value = f"T.cast({value}, \"float32\"){scale}"
        b.emit(f"O[bx * {rows} + i, j] = T.cast({value}, \"{dst}\")")
        b.close(3)
        k.features.add("convert_vectorized")
        k.features.add(f"convert_{src}_{dst}")
        return
    tile = c.choice([256, 128, 512, 64])
    n = _size(c, tile, 3)
    X = k.tensor("X", [str(n)], [n], src, values=values)
    O = k.tensor("O", [str(n)], [n], dst, role="out")
    k.header = f"with T.Kernel(T.ceildiv({n}, {tile}), threads={threads}) as bx:"
    tiling = Tiling([(tile, str(n), n, f"bx * {tile}", "j")])
    if form == "global_copy":
        k.body.emit(f"T.copy(X[bx * {tile}:bx * {tile} + {tile}], O[bx * {tile}:bx * {tile} + {tile}])")
        k.features.add("convert_global_copy")
    else:
        a = load_tile(k, tiling, X, "fragment", src, "a")
        out = k.alloc("fragment", (tile,), dst, "b")
        k.body.open(f"for j in T.Parallel({tile}):")
        how = c.choice(["plain", "cast", "computed"])
        if how == "plain":
            k.body.emit(f"{out}[j] = {a}[j]")
        elif how == "cast":
            k.body.emit(f"{out}[j] = T.cast({a}[j], \"{dst}\")")
        else:
            k.body.emit(f"{out}[j] = T.cast(T.cast({a}[j], \"float32\") * 0.5 - 0.25, \"{dst}\")")
        k.body.close()
        store_tile(k, tiling, out, O)
        k.features.add(f"convert_registers_{how}")
    k.features.add(f"convert_{src}_{dst}")


FAMILIES: list = [(gen_convert, 3)]
