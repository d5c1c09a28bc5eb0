"""Fuzz families of explicit mbarriers (language/barriers.py, sm_90a): a producer side of
the block fills a ring of `stages` shared tiles, one per step, and the consumer side adds
each tile into a fragment it holds, the two ordered by a full and an empty barrier per
stage (`T.alloc_barrier`, `T.barrier_wait` with the phase parity of the step,
`T.barrier_arrive`). The producer is a warp or a warpgroup after the consumers (`else` or
`elif tx >= C`), copying with T.copy or T.tma_copy, or one thread moving 16 bytes at a time
with T.ptx_cp_async and arriving with T.cp_async_barrier_noinc. Sometimes the consumers
wait on the barrier of a whole-block arrival first, and the sides set their registers
(T.set_max_nreg).

The invalid family allocates a barrier inside a branch: an error at that line.
"""
from __future__ import annotations

from .fuzz_gen import Kernel

_FLOATS = ["float32", "float16", "bfloat16"]


def gen_barrier_ring(k: Kernel) -> None:
    c = k.c
    k.target = "sm_90a"
    consumers = c.choice([64, 128])
    mode = c.choice(["copy", "tma_copy", "ptx"])
    producers = 32 if mode == "ptx" else c.choice([32, 128])
    threads = consumers + producers
    stages = c.int(1, 3)
    steps = c.int(1, 5)
    dt = c.choice(_FLOATS)
    bytes_ = {"float32": 4, "float16": 2, "bfloat16": 2}[dt]
    lanes = 16 // bytes_
    bm = c.choice([8, 16, 32])
    bn = c.choice([16, 32, 64]) if mode == "ptx" else c.choice([8, 16, 32])
    M = c.int(1, 2) * bm
    N = bn
    if mode != "ptx" and c.flip(0.5):
        M -= c.int(1, bm - 1) if bm > 1 else 0  # ragged rows: the copy masks them
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(steps * N)], [M, steps * N], dt)
    O = k.tensor("O", [str(M), str(N)], [M, N], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as by:"
    ring = k.alloc("shared", (stages, bm, bn), dt, "ring")
    acc = k.alloc("fragment", (bm, bn), "float32", "acc")
    full_count = 1 if mode == "ptx" else producers
    full = k.fresh("full")
    empty = k.fresh("empty")
    k.body.emit(f"{full} = T.alloc_barrier(arrive_count=[{full_count}] * {stages})")
    k.body.emit(f"{empty} = T.alloc_barrier(arrive_count=[{consumers}] * {stages})")
    start = None
    if c.flip(0.3):
        start = k.fresh("start")
        k.body.emit(f"{start} = T.alloc_barrier(arrive_count={threads})")
        k.features.add("barrier_whole_block_arrival")
    k.body.emit("tx = T.get_thread_binding()")
    if start:
        k.body.emit(f"T.barrier_arrive({start})")
    regs = c.flip(0.3) and consumers == 128 and producers == 128
    # consumers
    k.body.open(f"if tx < {consumers}:")
    if regs:
        k.body.emit("T.set_max_nreg(240, 1)")
        k.features.add("barrier_set_max_nreg")
    if start:
        k.body.emit(f"T.barrier_wait({start}, 0)")
    k.body.emit(f"T.clear({acc})")
    k.body.open(f"for k in T.serial({steps}):")
    k.body.emit(f"T.barrier_wait({full}[k % {stages}], (k // {stages}) & 1)")
    scale = c.choice(["1", "2", "0.5"])
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.emit(f"{acc}[i, j] += T.cast({ring}[k % {stages}, i, j], \"float32\") * {scale}")
    k.body.close()
    k.body.emit(f"T.barrier_arrive({empty}[k % {stages}])")
    k.body.close()
    k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
    k.body.open(f"if by * {bm} + i < {M}:")
    k.body.emit(f"{O}[by * {bm} + i, j] = {acc}[i, j]")
    k.body.close(3)
    # producer
    k.features.add(f"barrier_producer_{mode}")
    if mode == "ptx":
        k.body.open(f"elif tx == {consumers}:")
    else:
        k.body.open("else:" if c.flip(0.5) else f"elif tx >= {consumers}:")
    if regs:
        k.body.emit("T.set_max_nreg(24, 0)")
    k.body.open(f"for k in T.serial({steps}):")
    k.body.emit(f"T.barrier_wait({empty}[k % {stages}], ((k // {stages}) & 1) ^ 1)")
    src = f"{X}[by * {bm}:(by + 1) * {bm}, k * {bn}:(k + 1) * {bn}]"
    dst = f"{ring}[k % {stages}, :, :]"
    if mode == "copy":
        k.body.emit(f"T.copy({src}, {dst})")
        k.body.emit(f"T.barrier_arrive({full}[k % {stages}])")
    elif mode == "tma_copy":
        k.body.emit(f"T.tma_copy({src}, {dst}, barrier={full}[k % {stages}])")
        k.body.emit(f"T.barrier_arrive({full}[k % {stages}])")
    else:
        k.body.open(f"for i in T.serial({bm}):")
        k.body.open(f"for u in T.serial({bn // lanes}):")
        k.body.emit(f"T.ptx_cp_async(T.access_ptr({ring}[k % {stages}, i, u * {lanes}], \"w\", {lanes}), "
                    f"T.access_ptr({X}[by * {bm} + i, k * {bn} + u * {lanes}], \"r\", {lanes}), {lanes})")
        k.body.close(2)
        k.body.emit(f"T.cp_async_barrier_noinc({full}[k % {stages}])")
    k.body.close(2)
    k.features.add(f"barrier_stages_{stages}")


def invalid_barrier_in_branch(k: Kernel) -> None:
    """T.alloc_barrier where not every thread runs it once: its line errs."""
    c = k.c
    k.target = "sm_90a"
    k.tensor("X", ["64"], [64], "float32")
    k.tensor("O", ["64"], [64], "float32", role="out")
    k.header = "with T.Kernel(1, threads=64) as bx:"
    k.body.emit("tx = T.get_thread_binding()")
    where = c.choice(["if tx < 32:", "for s in T.serial(2):"])
    k.body.open(where)
    k.body.emit(f"bar = T.alloc_barrier(arrive_count={c.choice([1, 32])})", mark=True)
    k.body.close()
    k.body.open("for i in T.Parallel(64):")
    k.body.emit("O[i] = X[i]")
    k.body.close()


FAMILIES: list = [(gen_barrier_ring, 2)]
INVALID = {"barrier_allocated_in_a_branch": invalid_barrier_in_branch}
