"""Fuzz families of global tensors stored in an order of the author's: T.annotate_layout
({O: T.Layout(O.shape, f)}) (ir/index_map.h). Every access to the tensor goes through f,
so the output's storage is in f's order; the reference interpreter places elements the
same way, which is what the comparison checks. The maps are the ones authors write: a
transpose, a dimension split with its parts reordered, rows interleaved, and the gemm
fragment order of FlashAttention's dQ; sometimes the input is read through a map too.
Shapes are ragged against the tiles (the map stays one-to-one over the whole tensor).
"""
from __future__ import annotations

from .fuzz_gen import Kernel, Tiling

_DTYPES = ["float32", "float16", "int32"]


def _map(k: Kernel, M: int, N: int) -> tuple[str, str]:
    """A one-to-one map of an (M, N) tensor: (the T.Layout lambda, its feature name)."""
    c = k.c
    kinds = ["transpose"]
    if N % 2 == 0:
        kinds.append("split")
    if M % 2 == 0:
        kinds.append("interleave")
    if M % 8 == 0 and N % 8 == 0:
        kinds.append("fragment")
    kind = c.choice(kinds)
    if kind == "transpose":
        return "lambda i, j: [j, i]", kind
    if kind == "split":
        b = c.choice([d for d in (2, 4, 8) if N % d == 0])
        return f"lambda i, j: [j % {b}, i, j // {b}]", kind
    if kind == "interleave":
        return "lambda i, j: [i % 2, j, i // 2]", kind
    return "lambda i, j: [i // 8, j // 8, j % 2, 4 * (i % 8) + (j % 8) // 2]", kind


def gen_global_layout(k: Kernel) -> None:
    """Y = f(X) tile by tile, with Y (and sometimes X) stored in a T.Layout's order."""
    c = k.c
    threads = c.choice([32, 64, 128])
    bm, bn = c.choice([8, 16, 32]), c.choice([8, 16, 32])
    # Sizes divisible by what the maps need, ragged against the tiles.
    M = c.choice([8, 16, 24, 40, 48, 72])
    N = c.choice([8, 16, 24, 40, 56, 96])
    dt = c.choice(_DTYPES)
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    Y = k.tensor("Y", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    tiling = Tiling([(bm, str(M), M, f"by * {bm}", "i"), (bn, str(N), N, f"bx * {bn}", "j")])
    fy, kind = _map(k, M, N)
    k.features.add(f"global_layout_{kind}")
    annotations = [f"{Y}: T.Layout({Y}.shape, {fy})"]
    if c.flip(0.4):
        fx, kind_x = _map(k, M, N)
        annotations.append(f"{X}: T.Layout({X}.shape, {fx})")
        k.features.add("global_layout_input")
    k.body.emit("T.annotate_layout({" + ", ".join(annotations) + "})")
    how = c.choice(["parallel", "copy", "shared"])
    k.features.add(f"global_layout_{how}")
    scale = "2" if dt == "int32" else c.choice(["2", "0.5", "-1.5"])
    if how == "parallel":
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        k.body.emit(f"{Y}[{tiling.gidx()}] = {X}[{tiling.gidx()}] * {scale}")
        k.body.close(2)
        return
    if how == "copy":
        k.body.emit(f"T.copy({X}[by * {bm}, bx * {bn}], {Y}[by * {bm}, bx * {bn}])")
        return
    s = k.alloc("shared", (bm, bn), dt, "s")
    f = k.alloc("fragment", (bm, bn), dt, "f")
    k.body.emit(f"T.copy({X}[by * {bm}, bx * {bn}], {s})")
    k.body.emit(f"T.copy({s}, {f})")
    k.body.open(tiling.parallel())
    k.body.emit(f"{f}[i, j] = {f}[i, j] * {scale}")
    k.body.close()
    k.body.emit(f"T.copy({f}, {Y}[by * {bm}, bx * {bn}])")


FAMILIES = [(gen_global_layout, 2)]


def gen_rows_across_layouts(k: Kernel) -> None:
    """A (S, R) fragment of per-split row values read row by row in a serial loop over the
    splits (indexed by the loop's variable, or copied out as a row), and its maximum over
    the splits reduced into a row vector that a (R, C) loop laid out first: the reads and
    the reduction cross layouts (layout_inference.cc)."""
    c = k.c
    S = c.int(1, 6)
    R = c.choice([32, 64, 128])
    C = c.choice([8, 16, 32])
    k.features.add("rows_across_layouts")
    X = k.tensor("X", [str(S), str(R)], [S, R], "float32")
    P = k.tensor("P", [str(R), str(C)], [R, C], "float32")
    O = k.tensor("O", [str(R), str(C)], [R, C], "float32", role="out")
    k.dtypes.add("float32")
    k.header = f"with T.Kernel(1, threads={c.choice([32, 64, 128])}):"
    x = k.alloc("fragment", (S, R), "float32", "x")
    row = k.alloc("fragment", (R,), "float32", "row")
    mx = k.alloc("fragment", (R,), "float32", "mx")
    acc = k.alloc("fragment", (R,), "float32", "acc")
    p = k.alloc("fragment", (R, C), "float32", "p")
    k.body.emit(f"T.copy({P}, {p})")
    k.body.open(f"for i, j in T.Parallel({R}, {C}):")
    k.body.emit(f"{p}[i, j] = {p}[i, j] * 0.5")
    k.body.close()
    k.body.emit(f"T.copy({X}, {x})")
    accumulate = c.flip(0.5)
    if accumulate:
        k.body.emit(f"T.fill({mx}, -2.0)")
        k.features.add("rows_reduce_accumulate")
    k.body.emit(f"T.reduce_max({x}, {mx}, dim=0, clear={not accumulate})")
    k.body.emit(f"T.clear({acc})")
    k.body.open(f"for s in T.serial({S}):")
    if c.flip(0.5):
        k.body.emit(f"T.copy({x}[s, :], {row})")
        k.body.open(f"for r in T.Parallel({R}):")
        k.body.emit(f"{acc}[r] += {row}[r] - {mx}[r]")
        k.features.add("rows_copied_out")
    else:
        k.body.open(f"for r in T.Parallel({R}):")
        k.body.emit(f"{acc}[r] += {x}[s, r] - {mx}[r]")
        k.features.add("rows_indexed_by_serial")
    k.body.close(2)
    k.body.open(f"for i, j in T.Parallel({R}, {C}):")
    k.body.emit(f"{p}[i, j] = {p}[i, j] + {acc}[i] * {mx}[i]")
    k.body.close()
    k.body.emit(f"T.copy({p}, {O})")


FAMILIES = FAMILIES + [(gen_rows_across_layouts, 1)]


def gen_scalar_of_reduction(k: Kernel) -> None:
    """A row's reduction read outside the T.Parallel loops (every thread holds it) when
    only some of the block's threads hold the row: the result must reach all of them."""
    c = k.c
    threads = c.choice([64, 128, 256])
    N = c.choice([16, 40, 64, 100, 300])
    M = c.int(1, 3)
    kind = c.choice(["max", "sum", "absmax", "min"])
    k.features.add(f"scalar_of_reduce_{kind}")
    X = k.tensor("X", [str(M), str(N)], [M, N], "float32")
    Y = k.tensor("Y", [str(M), str(N)], [M, N], "float32", role="out")
    S = k.tensor("S", [str(M)], [M], "float32", role="out")
    k.dtypes.add("float32")
    k.header = f"with T.Kernel({M}, threads={threads}) as bx:"
    x = k.alloc("fragment", (N,), "float32", "x")
    r = k.alloc("fragment", (1,), "float32", "r")
    k.body.emit(f"T.copy({X}[bx, :], {x})")
    k.body.emit(f"T.reduce_{kind}({x}, {r}, dim=0)")
    k.body.emit(f"v = {r}[0] * 0.5 + 1.0")
    k.body.open(f"for j in T.Parallel({N}):")
    k.body.emit(f"{Y}[bx, j] = {x}[j] - v")
    k.body.close()
    k.body.emit(f"{S}[bx] = v")


FAMILIES = FAMILIES + [(gen_scalar_of_reduction, 1)]
