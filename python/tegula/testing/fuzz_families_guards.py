"""Fuzz families of tile code under branches on the thread index (`if tx < 128:`), whose
meaning is TileLang's: the tile code is divided among the threads that take the branch
(transform/scope_thread_guards.cc). The guards are the ways authors write a range of whole
warps: a prefix (`tx < hi`), a suffix (`tx >= lo`), a window (`tx >= lo and tx < hi`), a
group (`tx // w == j`: a warp, a warpgroup), a nest of two, a branch and its else each
filling half a tile, and a thread range joined with a block-uniform test. Inside: copies,
elementwise T.Parallel loops, fills, a staged chain through a second shared tile (barriers
among the guard's threads alone), and a reduction of a fragment the guard's threads hold;
after the branch every thread of the block reads what the guarded threads wrote.

The invalid family puts tile code under guards that cannot be divided (threads in pieces,
part of a warp, a register's value): each must be an error at the branch's line.
"""
from __future__ import annotations

from .fuzz_gen import Kernel, Tiling, _size

_FLOATS = ["float32", "float16", "bfloat16"]


def _guard(k: Kernel, threads: int) -> tuple[str, str]:
    """A condition selecting a range of whole warps of `threads`, and its feature name."""
    c = k.c
    warps = threads // 32
    kind = c.choice(["prefix", "suffix", "window", "group", "with_block"])
    if kind == "prefix":
        return f"tx < {32 * c.int(1, warps - 1)}", kind
    if kind == "suffix":
        return f"tx >= {32 * c.int(1, warps - 1)}", kind
    if kind == "window":
        lo = c.int(0, warps - 1)
        hi = c.int(lo + 1, warps)
        return f"tx >= {32 * lo} and tx < {32 * hi}", kind
    if kind == "group":
        w = c.choice([w for w in (32, 64, 128) if w < threads])
        return f"tx // {w} == {c.int(0, threads // w - 1)}", kind
    return f"tx < {32 * c.int(1, warps - 1)} and bx >= 0", kind


def gen_thread_guard(k: Kernel) -> None:
    """A shared tile filled (or transformed) by the threads of a guard, read by all."""
    c = k.c
    threads = c.choice([64, 128, 256])
    bm = c.choice([8, 16, 32, 64])
    bn = c.choice([8, 16, 32, 64])
    M, N = _size(c, bm), _size(c, bn)
    dt = c.choice(_FLOATS)
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    tiling = Tiling([(bm, str(M), M, f"by * {bm}", "i"), (bn, str(N), N, f"bx * {bn}", "j")])
    s = k.alloc("shared", (bm, bn), dt, "s")
    k.body.emit("tx = T.get_thread_binding(0)")
    shape = c.choice(["one", "one", "nested", "halves"])
    fill = c.choice(["copy", "parallel", "chain", "fill_then_copy"])
    k.features.add(f"guard_{shape}")
    k.features.add(f"guard_fill_{fill}")

    def body(rows=None):
        r0, r1 = rows if rows else (0, bm)
        dst = s if rows is None else f"{s}[{r0}:{r1}, :]"
        src = f"{X}[by * {bm} + {r0}, bx * {bn}]"
        if fill == "copy" or rows is not None:
            k.body.emit(f"T.copy({src}, {dst})")
            return
        if fill == "fill_then_copy":
            k.body.emit(f"T.fill({s}, 0)")
            k.body.emit(f"T.copy({src}, {s})")
            return
        scale = c.choice(["2", "0.5", "-1"])
        target = s
        if fill == "chain":
            target = k.alloc("shared", (bm, bn), dt, "stage")
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        k.body.emit(f"{target}[i, j] = {X}[{tiling.gidx()}] * {scale}")
        k.body.close()
        k.body.open("else:")
        k.body.emit(f"{target}[i, j] = 0")
        k.body.close(2)
        if fill == "chain":
            # reversed rows: other threads of the guard read what one wrote
            k.body.open(tiling.parallel())
            k.body.emit(f"{s}[i, j] = {target}[{bm - 1} - i, j]")
            k.body.close()

    if shape == "halves" and bm >= 2:
        h = 32 * c.int(1, threads // 32 - 1)
        k.body.open(f"if tx < {h}:")
        body((0, bm // 2))
        k.body.close()
        k.body.open("else:")
        body((bm // 2, bm))
        k.body.close()
    elif shape == "nested" and threads >= 128:
        k.body.open(f"if tx < {threads - 32}:")
        k.body.open("if tx >= 32:")
        body()
        k.body.close(2)
        k.features.add("guard_nested")
    else:
        cond, kind = _guard(k, threads)
        k.features.add(f"guard_{kind}")
        k.body.open(f"if {cond}:")
        body()
        if dt == "float32" and c.flip(0.4):
            _reduce_in_guard(k, tiling, s, bm, bn, M)
        k.body.close()
    if fill == "chain" and shape != "halves":
        k.features.add("guard_barrier_inside")
    k.body.emit(f"T.copy({s}, {O}[by * {bm}, bx * {bn}])")


def _reduce_in_guard(k: Kernel, tiling: Tiling, s: str, bm: int, bn: int, M: int) -> None:
    """Row sums of the guarded tile, reduced by the guard's threads into a fragment they
    hold (or a shared vector), written out by them; the shared tile reduced directly or
    copied into a fragment first."""
    c = k.c
    src = s
    if c.flip(0.5):
        src = k.alloc("fragment", (bm, bn), "float32", "f")
        k.body.emit(f"T.copy({s}, {src})")
    else:
        k.features.add("guard_reduce_shared")
    red = k.alloc(c.choice(["fragment", "shared"]), (bm,), "float32", "rowsum")
    R = k.tensor("R", [str(M), f"T.ceildiv({tiling.dims[1][1]}, {bn})"], [M, -(-tiling.dims[1][2] // bn)], "float32",
                 role="out")
    k.body.emit(f"T.reduce_sum({src}, {red}, dim=1)")
    k.body.open(f"for i in T.Parallel({bm}):")
    k.body.open(f"if by * {bm} + i < {M}:")
    k.body.emit(f"{R}[by * {bm} + i, bx] = {red}[i]")
    k.body.close(2)
    k.features.add("guard_reduce")


def invalid_guard(k: Kernel) -> None:
    """Tile code under a guard whose threads cannot share it: the branch's line errs."""
    c = k.c
    bm, bn = c.choice([16, 32]), c.choice([16, 32])
    m, n = c.int(1, 3) * bm, c.int(1, 3) * bn
    dt = c.choice(_FLOATS)
    k.tensor("X", [str(m), str(n)], [m, n], dt)
    k.tensor("O", [str(m), str(n)], [m, n], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({n}, {bn}), T.ceildiv({m}, {bm}), threads=128) as (bx, by):"
    tile = k.alloc("shared", (bm, bn), dt, "tile")
    reg = k.alloc("local", (1,), "int32", "r")
    k.body.emit("tx = T.get_thread_binding(0)")
    k.body.emit(f"{reg}[0] = tx")
    k.body.emit(f"T.fill({tile}, 0)")
    cond = c.choice([f"tx % {c.choice([2, 4])} == 0", f"tx < {c.choice([16, 48, 100])}",
                     f"{reg}[0] < 64", "tx < 32 or tx >= 96"])
    k.body.open(f"if {cond}:", mark=True)
    k.body.emit(f"T.copy(X[by * {bm}, bx * {bn}], {tile})")
    k.body.close()
    k.body.emit(f"T.copy({tile}, O[by * {bm}, bx * {bn}])")


FAMILIES: list = [(gen_thread_guard, 2)]
INVALID = {"tile_code_under_undividable_guard": invalid_guard}
