"""Fuzz family of views (T.reshape, T.Tensor(shape, dtype, buf.data); transform/resolve_views.cc)
and T.im2col (ops/im2col.cc)."""
from __future__ import annotations

from .fuzz_gen import Kernel


def gen_views(k: Kernel) -> None:
    """A tile read or written through a view of another shape: a global tensor seen as a
    longer or shorter row (its edges masked as the tensor's own), a shared or fragment
    buffer reshaped, a reduction over the last dimension of a 3-D view of a fragment."""
    c = k.c
    rows, cols = c.choice([4, 8, 16]), c.choice([16, 32, 64])
    split = c.choice([2, 4, 8])
    dt = c.choice(["float32", "float16"])
    k.dtypes.add(dt)
    blocks = c.int(1, 3)
    X = k.tensor("X", [str(blocks * rows * cols)], [blocks * rows * cols], dt)
    k.header = f"with T.Kernel({blocks}, threads={c.choice([32, 64, 128])}) as bx:"
    kind = c.choice(["global", "shared", "fragment", "reduce"])
    k.features.add("view_" + kind)
    if kind == "global":
        O = k.tensor("O", [str(blocks * rows), str(cols)], [blocks * rows, cols], dt, role="out")
        f = k.alloc("fragment", (rows, cols), dt, "f")
        k.body.emit(f"{f}_v = T.reshape(X, [{blocks * rows}, {cols}])")
        k.body.emit(f"T.copy({f}_v[bx * {rows}, 0], {f})")
        k.body.open(f"for i, j in T.Parallel({rows}, {cols}):")
        k.body.emit(f"{f}[i, j] = {f}[i, j] * 2 + 1")
        k.body.close()
        k.body.emit(f"T.copy({f}, {O}[bx * {rows}, 0])")
    elif kind in ("shared", "fragment"):
        O = k.tensor("O", [str(blocks * rows * cols)], [blocks * rows * cols], dt, role="out")
        b = k.alloc(kind, (rows, cols), dt, "b")
        k.body.emit(f"T.copy({X}[bx * {rows * cols}], T.Tensor(({rows * cols},), \"{dt}\", {b}.data))")
        k.body.emit(f"{b}_v = T.reshape({b}, [{rows * split}, {cols // split}])")
        k.body.open(f"for i, j in T.Parallel({rows * split}, {cols // split}):")
        k.body.emit(f"{b}_v[i, j] = {b}_v[i, j] - i")
        k.body.close()
        k.body.emit(f"T.copy(T.reshape({b}, [{rows * cols}]), {O}[bx * {rows * cols}])")
    else:
        O = k.tensor("O", [str(blocks * rows), str(cols // split)], [blocks * rows, cols // split], "float32",
                     role="out")
        f = k.alloc("fragment", (rows, cols), "float32", "f")
        r = k.alloc("fragment", (rows, cols // split), "float32", "r")
        k.body.emit(f"T.copy({X}[bx * {rows * cols}], T.reshape({f}, [{rows * cols}]))")
        op = c.choice(["sum", "max", "absmax"])
        k.features.add("view_reduce_" + op)
        k.body.emit(f"T.reduce_{op}(T.reshape({f}, [{rows}, {cols // split}, {split}]), {r}, dim=2)")
        k.body.emit(f"T.copy({r}, {O}[bx * {rows}, 0])")


def gen_im2col(k: Kernel) -> None:
    """The convolution's input tile (T.im2col) copied out: ragged rows and taps, padding,
    stride and dilation."""
    c = k.c
    N, H, W, C = c.int(1, 2), c.choice([5, 8, 9]), c.choice([4, 7, 8]), c.choice([4, 8, 16])
    K, S, D, P = c.choice([1, 3]), c.choice([1, 2]), c.choice([1, 2]), c.choice([0, 1])
    OH, OW = (H + 2 * P - D * (K - 1) - 1) // S + 1, (W + 2 * P - D * (K - 1) - 1) // S + 1
    if OH < 1 or OW < 1:
        P = K  # always a valid output
        OH, OW = (H + 2 * P - D * (K - 1) - 1) // S + 1, (W + 2 * P - D * (K - 1) - 1) // S + 1
    bm, bk = c.choice([16, 32]), c.choice([16, 32])
    rows, taps = N * OH * OW, K * K * C
    gm, gk = -(-rows // bm), -(-taps // bk)
    img = k.tensor("img", [str(N), str(H), str(W), str(C)], [N, H, W, C], "float16")
    O = k.tensor("O", [str(gm * bm), str(gk * bk)], [gm * bm, gk * bk], "float16", role="out")
    k.dtypes.add("float16")
    k.header = f"with T.Kernel({gk}, {gm}, threads=128) as (bx, by):"
    scope = c.choice(["shared", "fragment"])
    col = k.alloc(scope, (bm, bk), "float16", "col")
    k.features.add("im2col_" + scope)
    k.body.emit(f"T.im2col({img}, {col}, by, bx, {K}, {S}, {D}, {P})")
    k.body.emit(f"T.copy({col}, {O}[by * {bm}, bx * {bk}])")


FAMILIES = [(gen_views, 1), (gen_im2col, 1)]
