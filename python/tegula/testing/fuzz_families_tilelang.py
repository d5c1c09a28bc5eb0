"""Fuzz families of TileLang names of the language: T.transpose of shared and fragment
tiles, T.annotate_safe_value (reads past a tensor's edge give its value, in T.Parallel
loads and T.copy alike), and a kernel using T.let (a variable declared with T.int32())
and T.isfinite / T.isinf / T.isnan on values that are finite, infinite or NaN exactly.
"""
from __future__ import annotations

from .fuzz_gen import Kernel, Tiling, _grid, _gshape, _size, _threads, store_tile


def gen_transpose(k: Kernel) -> None:
    """Y = X.T a tile at a time: X's (bm, bn) tile into a tile, T.transpose into a (bn, bm)
    tile (shared or fragment), copied to Y's transposed place; ragged both ways."""
    c = k.c
    bm, bn = c.choice([8, 16, 32]), c.choice([8, 16, 32, 64])
    M, N = _size(c, bm), _size(c, bn)
    dt = c.choice(["float32", "float16", "int32"])
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    Y = k.tensor("Y", [str(N), str(M)], [N, M], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={_threads(c)}) as (bx, by):"
    src_scope, dst_scope = c.choice(["shared", "fragment"]), c.choice(["shared", "fragment"])
    k.features.update({"transpose", f"transpose_{src_scope}_{dst_scope}"})
    a = k.alloc(src_scope, (bm, bn), dt, "a")
    t = k.alloc(dst_scope, (bn, bm), dt, "t")
    k.body.emit(f"T.copy({X}[by * {bm}:by * {bm} + {bm}, bx * {bn}:bx * {bn} + {bn}], {a})")
    k.body.emit(f"T.transpose({a}, {t})")
    k.body.emit(f"T.copy({t}, {Y}[bx * {bn}:bx * {bn} + {bn}, by * {bm}:by * {bm} + {bm}])")


def gen_safe_value(k: Kernel) -> None:
    """A tile read shifted up and left by (sm, sn) from X, with T.annotate_safe_value({X:
    pad}): the elements before X's top and left edges and past its bottom and right ones
    read pad, through a T.Parallel load or a T.copy of the shifted region."""
    c = k.c
    tiling = _grid(k, c, 2)
    dt = c.choice(["float32", "float16", "int32"])
    k.dtypes.add(dt)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, dt)
    O = k.tensor("O", src_shape, shape, dt, role="out")
    pad = c.choice(["7", "-3", "1"]) if dt == "int32" else c.choice(["0.5", "-2.0", "3.25"])
    sm, sn = c.int(0, 5), c.int(0, 5)
    k.body.emit(f"T.annotate_safe_value({{{X}: {pad}}})")
    scope = c.choice(["shared", "fragment"])
    tile = k.alloc(scope, tiling.shape, dt, "s")
    (bm, _, _, row, i), (bn, _, _, col, j) = tiling.dims
    how = c.choice(["parallel", "copy"])
    k.features.update({"safe_value", f"safe_value_{how}_{scope}"})
    if how == "parallel":
        k.body.open(tiling.parallel())
        k.body.emit(f"{tile}[{i}, {j}] = {X}[{row} + {i} - {sm}, {col} + {j} - {sn}]")
        k.body.close()
    else:
        k.body.emit(f"T.copy({X}[{row} - {sm}:{row} - {sm} + {bm}, {col} - {sn}:{col} - {sn} + {bn}], {tile})")
    store_tile(k, tiling, tile, O)


def gen_let_and_float_tests(k: Kernel) -> None:
    """Y[r] = 4 * isfinite(q) + 2 * isinf(q) + isnan(q) for q = x / (x - x) or x (inf where
    x != 0, NaN where x == 0, x itself: each exact), the tile's offset bound by T.let."""
    c = k.c
    bn = c.choice([32, 64, 128, 16])
    n = _size(c, bn, 4)
    dt = c.choice(["float32", "float16", "bfloat16"])
    k.dtypes.update({dt, "int32"})
    X = k.tensor("X", [str(n)], [n], dt, values="ints")
    Y = k.tensor("Y", [str(n)], [n], "int32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({n}, {bn}), threads={_threads(c)}) as bx:"
    off = k.fresh("off")
    k.body.emit(f"{off} = T.int32()")
    k.body.emit(f"T.let({off}, bx * {bn})")
    k.features.update({"let_declared", "float_tests"})
    k.body.open(f"for j in T.Parallel({bn}):")
    k.body.open(f"if {off} + j < {n}:")
    x = f"{X}[{off} + j]"
    q = c.choice([f"({x} / ({x} - {x}))", x])
    k.body.emit(f"{Y}[{off} + j] = (T.if_then_else(T.isfinite({q}), 4, 0) + T.if_then_else(T.isinf({q}), 2, 0) + "
                f"T.if_then_else(T.isnan({q}), 1, 0))")
    k.body.close(2)


def gen_tilelang_names(k: Kernel) -> None:
    """One of the three above (one family, so that the others keep their share of seeds)."""
    k.c.choice([gen_transpose, gen_safe_value, gen_let_and_float_tests])(k)


FAMILIES = [(gen_tilelang_names, 1)]
