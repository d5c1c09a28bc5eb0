"""Fuzz family of T.cumsum: a tile of X (ragged at the tensor's edges, where T.copy reads
0, which leaves every sum as it is) scanned along one dimension, forward or reversed, in
place or into a second tile, shared or fragment on either side (a fragment goes through
shared scratch), sometimes on a column band of the tile only; an elementwise step before
the scan gives its input a layout of its own. Float32 and int32 (sums exact)."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size, _threads


def gen_cumsum(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float32", "int32"])
    k.dtypes.add(dt)
    one_d = c.flip(0.25)
    bm = 1 if one_d else c.choice([1, 4, 16, 32])
    bn = c.choice([8, 16, 32, 64])
    M, N = _size(c, bm), _size(c, bn)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt, values="signed" if dt == "float32" else "ints")
    O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={_threads(c)}) as (bx, by):"
    src_scope = c.choice(["shared", "fragment"])
    in_place = c.flip(0.5)
    dst_scope = src_scope if in_place else c.choice(["shared", "fragment"])
    shape = (bn,) if one_d else (bm, bn)
    a = k.alloc(src_scope, shape, dt, "a")
    rows = "by, " if one_d else f"by * {bm}:by * {bm} + {bm}, "
    k.body.emit(f"T.copy({X}[{rows}bx * {bn}:bx * {bn} + {bn}], {a})")
    if c.flip(0.3):  # an elementwise step on the tile before the scan
        idx = "j" if one_d else "i, j"
        k.body.open(f"for {idx} in T.Parallel({', '.join(map(str, shape))}):")
        k.body.emit(f"{a}[{idx}] = {a}[{idx}] * 2 - 1")
        k.body.close()
        k.features.add("cumsum_after_parallel")
    dim = 0 if one_d else c.choice([0, 1, -1])
    reverse = c.flip(0.4)
    band = not one_d and bn >= 16 and c.flip(0.25)
    lo, hi = (8, bn) if band else (0, bn)
    region = (lambda t: f"{t}[:, {lo}:{hi}]") if band else (lambda t: t)
    args = [region(a)]
    out = a
    if not in_place:
        out = k.alloc(dst_scope, shape, dt, "b")
        if band:
            k.body.emit(f"T.clear({out})")  # outside the band: zeros
        args.append(f"dst={region(out)}")
    args.append(f"dim={dim}")
    if reverse:
        args.append("reverse=True")
    k.body.emit(f"T.cumsum({', '.join(args)})")
    k.body.emit(f"T.copy({out}, {O}[{rows}bx * {bn}:bx * {bn} + {bn}])")
    k.features.update({"cumsum", f"cumsum_{src_scope}_{dst_scope}", f"cumsum_dim{dim % (1 if one_d else 2)}"})
    k.features.update({"cumsum_reverse"} if reverse else set())
    k.features.update({"cumsum_band"} if band else set())
    k.features.update({"cumsum_1d"} if one_d else set())


FAMILIES = [(gen_cumsum, 1)]
