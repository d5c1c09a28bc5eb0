"""Fuzz families of loops beyond T.Parallel and T.Pipelined: T.Persistent over waves of
tiles, T.PersistentTileScheduler's while loop, and break / continue in serial loops (split
from fuzz_families_control.py)."""
from __future__ import annotations

from .fuzz_families_control import _zero
from .fuzz_gen import Kernel, _size, _threads


def gen_persistent(k: Kernel) -> None:
    """T.Persistent: fewer blocks than tiles, each walking tiles wave by wave in the grouped
    order; a ragged domain (some waves skip their tile), a block count that leaves the
    last wave short, tile coordinates used in the copies."""
    c = k.c
    rows, cols = c.choice([8, 16, 32]), c.choice([16, 32, 64])
    mt, nt = c.int(1, 5), c.int(1, 6)
    M, N = mt * rows - c.int(0, rows - 1), nt * cols - c.int(0, cols - 1)
    blocks, group = c.int(1, 7), c.choice([1, 2, 3, 8])
    dt = c.choice(["float32", "float16"])
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel({blocks}, threads={c.choice([32, 64, 128])}) as block_id:"
    k.features.add("persistent")
    f = k.alloc("fragment", (rows, cols), dt, "f")
    k.body.open(f"for ti, tj in T.Persistent([{mt}, {nt}], {blocks}, block_id, {group}):")
    k.body.emit(f"T.copy({X}[ti * {rows}, tj * {cols}], {f})")
    k.body.open(f"for i, j in T.Parallel({rows}, {cols}):")
    k.body.emit(f"{f}[i, j] = {f}[i, j] * 2 + ti - tj")
    k.body.close()
    k.body.emit(f"T.copy({f}, {O}[ti * {rows}, tj * {cols}])")
    k.body.close()


def gen_tile_scheduler(k: Kernel) -> None:
    """T.PersistentTileScheduler with `while sched.valid()`: fewer workers than tiles, a
    ragged domain, a swizzle and either traversal order, the tile coordinates and the
    iteration count used in the copies and the arithmetic."""
    c = k.c
    rows, cols = c.choice([8, 16, 32]), c.choice([16, 32, 64])
    mt, nt = c.int(1, 5), c.int(1, 6)
    M, N = mt * rows - c.int(0, rows - 1), nt * cols - c.int(0, cols - 1)
    workers, swizzle, column_major = c.int(1, 7), c.choice([1, 2, 3, 8]), c.flip(0.5)
    dt = c.choice(["float32", "float16"])
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel({workers}, threads={c.choice([32, 64, 128])}) as worker:"
    k.features.add("while")
    f = k.alloc("fragment", (rows, cols), dt, "f")
    k.body.emit(f"sched = T.PersistentTileScheduler({mt}, {nt}, num_workers={workers}, swizzle_size={swizzle}, "
                f"column_major={column_major})")
    k.body.emit("sched.init(worker)")
    k.body.open("while sched.valid():")
    k.body.emit(f"T.copy({X}[sched.m_idx * {rows}, sched.n_idx * {cols}], {f})")
    k.body.open(f"for i, j in T.Parallel({rows}, {cols}):")
    k.body.emit(f"{f}[i, j] = {f}[i, j] * 2 + sched.m_idx - sched.n_idx + sched.current_iter")
    k.body.close()
    k.body.emit(f"T.copy({f}, {O}[sched.m_idx * {rows}, sched.n_idx * {cols}])")
    k.body.emit("sched.next_tile()")
    k.body.close()


def gen_loop_jumps(k: Kernel) -> None:
    """break / continue in serial loops: per row of a T.Parallel loop, a serial scan over a
    shared tile's row that stops at (break) or skips (continue) the negative inputs, a
    jump that differs between threads in a loop with no barrier; and a serial loop of tile
    code left by a break every thread takes alike (on the loop variable)."""
    c = k.c
    bm, bk = c.choice([8, 16, 32]), c.choice([4, 8, 16])
    M = _size(c, bm)
    dt = c.choice(["float32", "int32"])
    is_int = dt == "int32"
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(bk)], [M, bk], dt, values="ints" if is_int else "signed")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={_threads(c)}) as bx:"
    xs = k.alloc("shared", (bm, bk), dt, "x_tile")
    k.body.emit(f"T.copy(X[bx * {bm}, 0], {xs})")
    scan = k.alloc("fragment", (bm,), dt, "scan")
    word = c.choice(["break", "continue"])
    k.features.add("loop_" + word)
    k.body.open(f"for i in T.Parallel({bm}):")
    k.body.emit(f"{scan}[i] = {_zero(is_int)}")
    k.body.open(f"for kk in {c.choice(['T.serial', 'range', 'T.unroll'])}({bk}):")
    k.body.open(f"if {xs}[i, kk] < {_zero(is_int)}:")
    k.body.emit(word)
    k.body.close()
    k.body.emit(f"{scan}[i] += {xs}[i, kk] * (kk + 1)")
    k.body.close(2)
    O = k.tensor("O", [str(M)], [M], dt, role="out")
    k.body.open(f"for i in T.Parallel({bm}):")
    k.body.open(f"if bx * {bm} + i < {M}:")
    k.body.emit(f"{O}[bx * {bm} + i] = {scan}[i]")
    k.body.close(2)
    if c.flip(0.5):  # a uniform break out of a loop of tile code
        rounds, stop = c.int(2, 4), c.int(0, 4)
        acc = k.alloc("fragment", (bm, bk), dt, "acc")
        k.body.emit(f"T.clear({acc})")
        k.body.open(f"for r in T.serial({rounds}):")
        k.body.open(f"if r == {stop}:")
        k.body.emit("break")
        k.body.close()
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] += {xs}[i, j] * (r + 1)")
        k.body.close(2)
        P = k.tensor("P", [str(M), str(bk)], [M, bk], dt, role="out")
        k.body.emit(f"T.copy({acc}, {P}[bx * {bm}, 0])")
        k.features.add("uniform_break_over_tile_code")


FAMILIES: list = [(gen_loop_jumps, 1), (gen_persistent, 1), (gen_tile_scheduler, 1)]
