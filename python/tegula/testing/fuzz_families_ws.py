"""Fuzz families of warp-group scopes (`with T.ws(g):`, language/warpgroup.py) and of gemms
whose clear_accum is a run-time condition.

  * gen_ws_ring (sm_90a): warp groups ordered by explicit mbarriers. The producer scope
    (one warp group, the last) fills a ring of `stages` shared tiles with T.copy or
    T.tma_copy; the consumer scope (warp group 0, or `T.ws(0, 1)` of a 384-thread block)
    adds each tile into a fragment, with a T.Parallel loop or a T.gemm of two rings. The
    scopes sit inside the step loop (producer first, or consumer first: each group runs
    as far as its own waits let it), in a T.Pipelined loop (run in order in each group),
    or hold a loop each.
  * gen_ws_split: no barriers of the program's: each warp group transforms its part of a
    shared tile, or multiplies its own columns of a product, and all threads (or
    `T.ws` of every group) read the result after.
  * gen_clear_accum_runtime: a gemm over K steps with clear_accum=(k == 0), (k == last),
    k % 2 or a T.alloc_var flag, in a T.serial or T.Pipelined loop, sometimes inside a
    warp-group scope.

The invalid family names warp groups that are not one range of the block's threads.
"""
from __future__ import annotations

from .fuzz_gen import Kernel, _size

_FLOATS = ["float32", "float16", "bfloat16"]


def _ring_consumer_parallel(k: Kernel, ring: str, acc: str, stages: int, bm: int, bn: int) -> None:
    scale = k.c.choice(["1", "2", "0.5"])
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.emit(f"{acc}[i, j] += T.cast({ring}[k % {stages}, i, j], \"float32\") * {scale}")
    k.body.close()


def gen_ws_ring(k: Kernel) -> None:
    c = k.c
    k.target = "sm_90a"
    union = c.flip(0.25)  # consumers T.ws(0, 1) in 384 threads
    threads = 384 if union else 256
    consumers = 256 if union else 128
    cons = c.choice(["T.ws(0, 1)", "T.ws(1, 0)"]) if union else "T.ws(0)"
    prod = f"T.ws({threads // 128 - 1})"
    gemm = c.flip(0.35)
    mode = c.choice(["copy", "tma_copy"])
    stages = c.int(1, 3)
    steps = c.int(1, 5)
    order = c.choice(["producer_first", "consumer_first", "loops_inside", "pipelined"])
    if gemm:
        dt = c.choice(["float16", "bfloat16"])
        bm, bn, bk = (128 if union else 64), c.choice([32, 64]), c.choice([16, 32])
    else:
        dt = c.choice(_FLOATS)
        bm, bn, bk = c.choice([8, 16, 32]), c.choice([8, 16, 32]), 0
    M = c.int(1, 2) * bm
    if c.flip(0.5):
        M -= c.int(1, bm - 1)  # ragged rows: the copies mask them
    k.dtypes.update({dt, "float32"})
    if gemm:
        X = k.tensor("X", [str(M), str(steps * bk)], [M, steps * bk], dt)
        W = k.tensor("W", [str(steps * bk), str(bn)], [steps * bk, bn], dt)
    else:
        X = k.tensor("X", [str(M), str(steps * bn)], [M, steps * bn], dt)
    O = k.tensor("O", [str(M), str(bn)], [M, bn], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as by:"
    ring = k.alloc("shared", (stages, bm, bk if gemm else bn), dt, "ring")
    wring = k.alloc("shared", (stages, bk, bn), dt, "wring") if gemm else None
    acc = k.alloc("fragment", (bm, bn), "float32", "acc")
    full, empty = k.fresh("full"), k.fresh("empty")
    k.body.emit(f"{full} = T.alloc_barrier(arrive_count=[128] * {stages})")
    k.body.emit(f"{empty} = T.alloc_barrier(arrive_count=[{consumers}] * {stages})")
    k.body.open(f"with {cons}:")
    k.body.emit(f"T.clear({acc})")
    k.body.close()

    def produce():
        k.body.emit(f"T.barrier_wait({empty}[k % {stages}], ((k // {stages}) & 1) ^ 1)")
        width = bk if gemm else bn
        pairs = [(f"{X}[by * {bm}:(by + 1) * {bm}, k * {width}:(k + 1) * {width}]", f"{ring}[k % {stages}, :, :]")]
        if gemm:
            pairs.append((f"{W}[k * {bk}:(k + 1) * {bk}, 0:{bn}]", f"{wring}[k % {stages}, :, :]"))
        for src, dst in pairs:
            if mode == "copy":
                k.body.emit(f"T.copy({src}, {dst})")
            else:
                k.body.emit(f"T.tma_copy({src}, {dst}, barrier={full}[k % {stages}])")
        k.body.emit(f"T.barrier_arrive({full}[k % {stages}])")

    def consume():
        k.body.emit(f"T.barrier_wait({full}[k % {stages}], (k // {stages}) & 1)")
        if gemm:
            k.body.emit(f"T.gemm({ring}[k % {stages}, :, :], {wring}[k % {stages}, :, :], {acc})")
        else:
            _ring_consumer_parallel(k, ring, acc, stages, bm, bn)
        k.body.emit(f"T.barrier_arrive({empty}[k % {stages}])")

    if order == "loops_inside":
        for scope, part in ((prod, produce), (cons, consume)):
            k.body.open(f"with {scope}:")
            k.body.open(f"for k in T.serial({steps}):")
            part()
            k.body.close(2)
    else:
        loop = f"T.Pipelined({steps}, num_stages={c.int(1, 3)})" if order == "pipelined" else f"T.serial({steps})"
        k.body.open(f"for k in {loop}:")
        parts = [(cons, consume), (prod, produce)] if order == "consumer_first" else [(prod, produce), (cons, consume)]
        for scope, part in parts:
            k.body.open(f"with {scope}:")
            part()
            k.body.close()
        k.body.close()
    k.body.open(f"with {cons}:")
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.open(f"if by * {bm} + i < {M}:")
    k.body.emit(f"{O}[by * {bm} + i, j] = {acc}[i, j]")
    k.body.close(3)
    k.features.update({"gen_ws_ring", f"ws_order_{order}", f"ws_producer_{mode}",
                       "ws_consumer_gemm" if gemm else "ws_consumer_parallel"})
    if union:
        k.features.add("ws_union")


def gen_ws_split(k: Kernel) -> None:
    c = k.c
    groups = c.choice([2, 3])
    threads = 128 * groups
    if c.flip(0.5):
        _ws_split_tile(k, groups, threads)
    else:
        _ws_split_gemm(k, groups, threads)


def _ws_split_tile(k: Kernel, groups: int, threads: int) -> None:
    """Warp group g scales rows [g * rows, (g + 1) * rows) of a shared tile; then every
    thread (or the scope of all groups) writes the tile out plus one."""
    c = k.c
    dt = c.choice(_FLOATS)
    rows = c.choice([4, 8, 16])
    bm, bn = rows * groups, c.choice([8, 16, 32])
    M, N = _size(c, bm), _size(c, bn)
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    O = k.tensor("O", [str(M), str(N)], [M, N], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    s = k.alloc("shared", (bm, bn), dt, "s")
    for g in c.choice([list(range(groups)), list(reversed(range(groups)))]):
        scale = c.choice(["2", "0.5", "-1"])
        k.body.open(f"with T.ws({g}):")
        k.body.open(f"for i, j in T.Parallel({rows}, {bn}):")
        r = f"{g * rows} + i"
        k.body.open(f"if by * {bm} + {r} < {M} and bx * {bn} + j < {N}:")
        k.body.emit(f"{s}[{r}, j] = {X}[by * {bm} + {r}, bx * {bn} + j] * {scale}")
        k.body.close()
        k.body.open("else:")
        k.body.emit(f"{s}[{r}, j] = 0")
        k.body.close(3)
    every = c.flip(0.5)
    if every:
        k.body.open(f"with T.ws({', '.join(str(g) for g in range(groups))}):")
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.open(f"if by * {bm} + i < {M} and bx * {bn} + j < {N}:")
    k.body.emit(f"{O}[by * {bm} + i, bx * {bn} + j] = {s}[i, j] + 1")
    k.body.close(2 + every)
    k.features.update({"gen_ws_split", f"ws_split_tile_{groups}"})
    if every:
        k.features.add("ws_every_group")


def _ws_split_gemm(k: Kernel, groups: int, threads: int) -> None:
    """Each warp group multiplies its own columns of the product, from its own copy of B;
    the A tile every thread copies."""
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    bm, part, bk = 64, c.choice([16, 32]), c.choice([16, 32])
    bn = part * groups
    M, N, K = _size(c, bm, 2), _size(c, bn, 2), _size(c, bk, 3)
    k.dtypes.update({dt, "float32"})
    A = k.tensor("A", [str(M), str(K)], [M, K], dt)
    B = k.tensor("B", [str(K), str(N)], [K, N], dt)
    C = k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", (bm, bk), dt, "A_s")
    Bs = [k.alloc("shared", (bk, part), dt, "B_s") for _ in range(groups)]
    accs = [k.alloc("fragment", (bm, part), "float32", "acc") for _ in range(groups)]
    for g in range(groups):
        k.body.open(f"with T.ws({g}):")
        k.body.emit(f"T.clear({accs[g]})")
        k.body.close()
    loop = c.choice([f"T.serial(T.ceildiv({K}, {bk}))", f"T.Pipelined(T.ceildiv({K}, {bk}), num_stages=2)"])
    k.body.open(f"for ko in {loop}:")
    k.body.emit(f"T.copy({A}[by * {bm}, ko * {bk}], {As})")
    for g in c.choice([list(range(groups)), list(reversed(range(groups)))]):
        k.body.open(f"with T.ws({g}):")
        k.body.emit(f"T.copy({B}[ko * {bk}, bx * {bn} + {g * part}], {Bs[g]})")
        k.body.emit(f"T.gemm({As}, {Bs[g]}, {accs[g]})")
        k.body.close()
    k.body.close()
    for g in range(groups):
        k.body.open(f"with T.ws({g}):")
        k.body.emit(f"T.copy({accs[g]}, {C}[by * {bm}, bx * {bn} + {g * part}])")
        k.body.close()
    k.features.update({"gen_ws_split", f"ws_split_gemm_{groups}"})


def gen_clear_accum_runtime(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    in_ws = c.flip(0.3)
    threads = 256 if in_ws else c.choice([128, 256])
    bm, bn, bk = c.choice([64, 128]) if not in_ws else 64, c.choice([32, 64]), c.choice([16, 32])
    steps = c.int(2, 4)
    M, N, K = _size(c, bm, 2), _size(c, bn, 2), steps * bk - (c.int(1, bk - 1) if c.flip(0.4) else 0)
    k.dtypes.update({dt, "float32"})
    A = k.tensor("A", [str(M), str(K)], [M, K], dt)
    B = k.tensor("B", [str(K), str(N)], [K, N], dt)
    C = k.tensor("C", [str(M), str(N)], [M, N], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", (bm, bk), dt, "A_s")
    Bs = k.alloc("shared", (bk, bn), dt, "B_s")
    acc = k.alloc("fragment", (bm, bn), "float32", "acc")
    when = c.choice(["first", "last", "odd", "flag"])
    flag = None
    if when == "flag":
        flag = k.fresh("flag")
        k.body.emit(f"{flag} = T.alloc_var(\"int32\")")
        k.body.emit(f"{flag} = 1")
    scope = c.int(0, threads // 128 - 1) if in_ws else None
    if in_ws:
        k.body.open(f"with T.ws({scope}):")
    if when in ("last", "odd"):
        k.body.emit(f"T.clear({acc})")  # the steps before the clear add to a value of their own
    loop = c.choice([f"T.serial({steps})", f"T.Pipelined({steps}, num_stages={c.int(1, 3)})"])
    k.body.open(f"for ko in {loop}:")
    k.body.emit(f"T.copy({A}[by * {bm}, ko * {bk}], {As})")
    k.body.emit(f"T.copy({B}[ko * {bk}, bx * {bn}], {Bs})")
    cond = {"first": "(ko == 0)", "last": f"(ko == {steps - 1})", "odd": "ko % 2", "flag": flag}[when]
    k.body.emit(f"T.gemm({As}, {Bs}, {acc}, clear_accum={cond})")
    if flag:
        k.body.emit(f"{flag} = 0")
    k.body.close()
    k.body.emit(f"T.copy({acc}, {C}[by * {bm}, bx * {bn}])")
    if in_ws:
        k.body.close()
        k.features.add("clear_accum_in_ws")
    k.features.update({"gen_clear_accum_runtime", f"clear_accum_{when}"})


def invalid_ws_groups(k: Kernel) -> None:
    """T.ws naming groups that are not one range of the block's threads: its line errs."""
    c = k.c
    threads = c.choice([256, 384])
    k.tensor("X", ["64"], [64], "float32")
    O = k.tensor("O", ["64"], [64], "float32", role="out")
    k.header = f"with T.Kernel(1, threads={threads}) as bx:"
    groups = threads // 128
    bad = c.choice(["past", "gap"] if groups == 3 else ["past"])
    args = f"{groups + c.int(0, 1)}" if bad == "past" else c.choice(["0, 2", "2, 0"])
    k.body.open(f"with T.ws({args}):", mark=True)
    k.body.open("for i in T.Parallel(64):")
    k.body.emit(f"{O}[i] = X[i]")
    k.body.close(2)


FAMILIES: list = [(gen_ws_ring, 2), (gen_ws_split, 1), (gen_clear_accum_runtime, 1)]
INVALID = {"ws_groups_not_one_range": invalid_ws_groups}
