"""Fuzz family of T.Pipelined hand schedules whose computations run in several stages
(frontend/pipeline_schedule.py; on sm_90a the consumer runs them shifted,
src/transform/pipeline_ws.cc): attention's shape, a score gemm, an elementwise pass and
a cast in one stage, a rescale of the output and the value gemm in a later one, in one of
the orders that keep the loop's meaning (FlashAttention-3's, or the value gemm first), and
sometimes a row count in a stage of its own further behind, so that the loop runs its
stages D = 2 apart (then a loop of fewer iterations runs one iteration at a time). 1 to 4
iterations, the keys ragged half of the time."""
from __future__ import annotations

from .fuzz_gen import Kernel, _size

# (stage, order) of the score gemm, the pass on the scores (a mask and a cast, one group),
# the rescale of the output, the value gemm: each keeps every dependence of the loop
# (pipeline_schedule.py checks it).
SCHEDULES = {
    "fa3": ((0, 0), (0, 3), (1, 1), (1, 2)),          # QKᵀ(k), rescale and PV(k-1), the pass on k
    "value_first": ((0, 2), (0, 3), (1, 0), (1, 1)),  # rescale and PV(k-1), then QKᵀ(k) and its pass
    "one_stage": ((1, 0), (1, 1), (1, 2), (1, 3)),
}


def gen_stage_shift(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_80"])
    dt = c.choice(["float16", "bfloat16"])
    threads = c.choice([128, 256])
    bm, bn, dim = 64 * threads // 128, c.choice([32, 64]), c.choice([32, 64])
    steps = c.int(1, 4)
    N = steps * bn - (c.int(1, bn - 1) if c.flip(0.5) else 0)
    M = _size(c, bm, 2)
    k.dtypes.update({dt, "float32"})
    Q = k.tensor("Q", [str(M), str(dim)], [M, dim], dt)
    K = k.tensor("K", [str(N), str(dim)], [N, dim], dt)
    V = k.tensor("V", [str(N), str(dim)], [N, dim], dt)
    O = k.tensor("O", [str(M), str(dim)], [M, dim], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as bx:"
    b = k.body
    Qs, Ks, Vs = (k.alloc("shared", shape, dt, name) for shape, name in
                  (((bm, dim), "Q_s"), ((bn, dim), "K_s"), ((bn, dim), "V_s")))
    s = k.alloc("fragment", (bm, bn), "float32", "acc_s")
    p = k.alloc("fragment", (bm, bn), dt, "acc_p")
    o = k.alloc("fragment", (bm, dim), "float32", "acc_o")
    name = c.choice(sorted(SCHEDULES))
    count = k.alloc("fragment", (bm,), "float32", "seen") if name != "one_stage" and c.flip(0.4) else None
    b.emit(f"T.copy({Q}[bx * {bm}, 0], {Qs})")
    b.emit(f"T.clear({o})")
    if count:
        b.emit(f"T.clear({count})")
    # The copies in TileLang's producer mark (-1 in both lists) or in stage 0 before the rest.
    mark = c.flip(0.5)
    base = 0 if mark else 1
    stage = [-1, -1] if mark else [0, 0]
    order = [-1, -1] if mark else [0, 1]
    first = 0 if mark else 2
    units = list(SCHEDULES[name]) + ([(2, 4)] if count else [])
    for st, od in units:
        stage.append(st + base)
        order.append(od + first)
    group = [[0], [1], [2], [3, 4], [5], [6]] + ([[7]] if count else [])
    loop = (f"T.Pipelined(T.ceildiv({N}, {bn}), num_stages={c.choice([2, 3])}, order={order}, stage={stage}, "
            f"group={group})")
    b.open(f"for kb in {loop}:")
    b.emit(f"T.copy({K}[kb * {bn}, 0], {Ks})")
    b.emit(f"T.copy({V}[kb * {bn}, 0], {Vs})")
    b.emit(f"T.gemm({Qs}, {Ks}, {s}, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullRow)")
    b.open(f"for i, j in T.Parallel({bm}, {bn}):")
    b.emit(f"{s}[i, j] = T.if_then_else(kb * {bn} + j < {N}, {s}[i, j] * 0.125, 0)")
    b.close()
    b.emit(f"T.copy({s}, {p})")
    b.open(f"for i, j in T.Parallel({bm}, {dim}):")
    b.emit(f"{o}[i, j] = {o}[i, j] * 0.5")
    b.close()
    b.emit(f"T.gemm({p}, {Vs}, {o}, policy=T.GemmWarpPolicy.FullRow)")
    if count:
        b.open(f"for i in T.Parallel({bm}):")
        b.emit(f"{count}[i] = {count}[i] + 1")
        b.close()
    b.close()
    if count:
        b.open(f"for i, j in T.Parallel({bm}, {dim}):")
        b.emit(f"{o}[i, j] = {o}[i, j] + {count}[i]")
        b.close()
    b.emit(f"T.copy({o}, {O}[bx * {bm}, 0])")
    k.features.update({"gen_stage_shift", f"stage_shift_{name}", f"stage_shift_{k.target}"})
    if count:
        k.features.add("stage_shift_two_apart")


FAMILIES = [(gen_stage_shift, 1)]
