"""Deliberately invalid programs for tegula.testing.fuzz: each builds a small valid kernel
around one mistake and marks the line of the mistake, where TegulaCompileError must point.
"""
from __future__ import annotations


def _base(k, scope_x="shared"):
    """X -> tile -> O on a 2-D grid; returns (bm, bn, tile name)."""
    c = k.c
    bm, bn = c.choice([16, 32, 8, 64]), c.choice([32, 16, 64, 8])
    m, n = c.int(1, 3) * bm - c.int(0, bm - 1), c.int(1, 3) * bn - c.int(0, bn - 1)
    dt = c.choice(["float32", "float16", "bfloat16"])
    k.tensor("X", [str(m), str(n)], [m, n], dt)
    k.tensor("O", [str(m), str(n)], [m, n], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({n}, {bn}), T.ceildiv({m}, {bm}), threads={c.choice([128, 64])}) as (bx, by):"
    tile = k.alloc(scope_x, (bm, bn), dt, "tile")
    k.body.emit(f"T.copy(X[by * {bm}, bx * {bn}], {tile})")
    return bm, bn, tile, dt


def _finish(k, bm, bn, tile):
    k.body.emit(f"T.copy({tile}, O[by * {bm}, bx * {bn}])")


def oob_constant_index(k):
    """A constant index past the end of a shared, fragment or local buffer."""
    c = k.c
    scope = c.choice(["shared", "fragment", "local"])
    if scope == "local":
        bm, bn, tile, dt = _base(k, "fragment")
        size = c.int(1, 8)
        v = k.alloc("local", (size,), "float32", "vals")
        bad = size + c.int(0, 3) if c.flip(0.8) else -1 - c.int(0, 2)
        k.body.emit(f"{v}[0] = 1.0")
        if c.flip():
            k.body.emit(f"{v}[{bad}] = 2.0", mark=True)
        else:
            k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
            k.body.emit(f"{tile}[i, j] = {tile}[i, j] + {v}[{bad}]", mark=True)
            k.body.close()
        _finish(k, bm, bn, tile)
        return
    bm, bn, tile, dt = _base(k, scope)
    dim = c.int(0, 1)
    bad = (bm, bn)[dim] + c.int(0, 4)
    where = c.choice(["store_loop", "load_loop", "store_top"])
    idx = ["i", "j"]
    idx[dim] = str(bad)
    if where == "store_top":
        k.body.emit(f"{tile}[{bad if dim == 0 else 0}, {bad if dim == 1 else 0}] = 0", mark=True)
    elif where == "store_loop":
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{tile}[{', '.join(idx)}] = 1", mark=True)
        k.body.close()
    else:
        other = k.alloc("fragment", (bm, bn), dt, "other")
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{other}[i, j] = {tile}[{', '.join(idx)}]", mark=True)
        k.body.close()
        tile = other
    _finish(k, bm, bn, tile)


def copy_shape_mismatch(k):
    c = k.c
    bm, bn, tile, dt = _base(k, c.choice(["shared", "fragment"]))
    shape = c.choice([(bm, bn * 2), (bm * 2, bn), (bm, bn + 8), (bm * bn,)])
    if bm != bn and c.flip(0.3):
        shape = (bn, bm)
    other = k.alloc(c.choice(["shared", "fragment"]), shape, dt, "other")
    k.body.emit(f"T.copy({tile}, {other})", mark=True)
    _finish(k, bm, bn, tile)


def reduce_shape_mismatch(k):
    c = k.c
    bm, bn, tile, dt = _base(k, "fragment")
    dim = c.int(0, 1)
    kept = (bn, bm)[dim]
    wrong = c.choice([kept + 1, kept * 2, (bm, bn)[dim] if bm != bn else kept + 3, max(kept // 2, 1)])
    if wrong == kept:
        wrong = kept + 1
    shape = (wrong,) if c.flip(0.8) else (kept, 2)
    r = k.alloc("fragment", shape, "float32", "red")
    kind = c.choice(["sum", "max", "min", "abssum", "absmax"])
    k.body.emit(f"T.reduce_{kind}({tile}, {r}, dim={dim})", mark=True)
    _finish(k, bm, bn, tile)


def gemm_shape_mismatch(k):
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    bm, bn, bk = 64, 64, 32
    shapes = {"A": (bm, bk), "B": (bk, bn), "C": (bm, bn)}
    which = c.choice(["A", "B", "C"])
    shapes[which] = {"A": (bm, bk * 2), "B": (bk + 16, bn), "C": (bm, bn + 32)}[which]
    k.tensor("A", ["128", "64"], [128, 64], dt)
    k.tensor("B", ["64", "128"], [64, 128], dt)
    k.tensor("Cg", ["128", "128"], [128, 128], "float32", role="out")
    k.header = "with T.Kernel(2, 2, threads=128) as (bx, by):"
    As = k.alloc("shared", shapes["A"], dt, "A_shared")
    Bs = k.alloc("shared", shapes["B"], dt, "B_shared")
    Cf = k.alloc("fragment", shapes["C"], "float32", "C_local")
    k.body.emit(f"T.clear({Cf})")
    k.body.emit(f"T.copy(A[by * {bm}, 0], {As})")
    k.body.emit(f"T.copy(B[0, bx * {bn}], {Bs})")
    k.body.emit(f"T.gemm({As}, {Bs}, {Cf})", mark=True)
    k.body.emit(f"T.copy({Cf}, Cg[by * {bm}, bx * {bn}])")


def bitwise_on_float(k):
    c = k.c
    bm, bn, tile, dt = _base(k, c.choice(["shared", "fragment"]))
    out = k.alloc("fragment", (bm, bn), dt, "res")
    x = f"{tile}[i, j]"
    e = c.choice([f"~{x}", f"({x} | {x})", f"({x} & {x})", f"({x} ^ {x})", f"({x} << 1)", f"({x} >> 1)",
                  f"(T.cast({x}, \"bfloat16\") | 1)", f"(1 ^ {x})"])
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.emit(f"{out}[i, j] = {e}", mark=True)
    k.body.close()
    _finish(k, bm, bn, out)


def kernel_unpack_mismatch(k):
    c = k.c
    k.tensor("X", ["64"], [64], "float32")
    k.tensor("O", ["64"], [64], "float32", role="out")
    grid, names = c.choice([("2, 2", "bx"), ("2", "(bx, by)"), ("2, 2", "(bx, by, bz)"), ("2, 1, 1", "(bx, by)"),
                            ("2, 2, 2", "bx")])
    k.header = f"with T.Kernel({grid}, threads=32) as {names}:"
    k.header_mark = True
    k.body.open("for i in T.Parallel(32):")
    k.body.emit("O[bx * 32 + i] = X[bx * 32 + i]")
    k.body.close()


def grid_not_positive(k):
    c = k.c
    k.tensor("X", ["64"], [64], "float32")
    k.tensor("O", ["64"], [64], "float32", role="out")
    extent = c.choice(["0", "-1", "64 - 64", "T.ceildiv(0, 32)"])
    if c.flip():
        k.header = f"with T.Kernel({extent}, threads=32) as bx:"
        row = "bx"
    else:
        k.header = f"with T.Kernel(2, {extent}, threads=32) as (bx, by):"
        row = "bx"
    k.header_mark = True
    k.body.open("for i in T.Parallel(32):")
    k.body.emit(f"O[{row} * 32 + i] = X[{row} * 32 + i]")
    k.body.close()


INVALID = {
    "oob_constant_index": oob_constant_index,
    "copy_shape_mismatch": copy_shape_mismatch,
    "reduce_shape_mismatch": reduce_shape_mismatch,
    "gemm_shape_mismatch": gemm_shape_mismatch,
    "bitwise_on_float": bitwise_on_float,
    "kernel_unpack_mismatch": kernel_unpack_mismatch,
    "grid_not_positive": grid_not_positive,
}
