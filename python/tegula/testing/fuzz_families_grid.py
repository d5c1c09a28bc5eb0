"""Fuzz family of barriers between blocks: T.sync_grid, and the cluster barrier of a
T.ClusterKernel (sm_90+), where each block reads what another block wrote before it."""
from __future__ import annotations

from .fuzz_gen import Kernel


def gen_block_exchange(k: Kernel) -> None:
    """Every block writes its tile of W (from X), meets the others at a barrier, then
    writes O from another block's tile of W: a grid barrier (the partner anywhere in the
    grid) or, on sm_90+, a cluster barrier (the partner in its cluster). The barrier is a
    statement between two T.Parallel loops, its two halves with work between them (the
    cluster's arrive and wait), or a statement inside one T.Parallel body, which splits the
    loop there. Tensors may end inside the last block's tile (masked)."""
    c = k.c
    bm = c.choice([16, 32, 64])
    cluster = c.choice([2, 4]) if k.target != "sm_80" and c.flip(0.5) else 0
    blocks = (cluster or 1) * c.int(1, 3) if cluster else c.int(2, 6)
    N = blocks * bm - (c.int(1, bm - 1) if c.flip(0.5) else 0)
    dt = c.choice(["float32", "float16"])
    k.dtypes.add(dt)
    X = k.tensor("X", [str(N)], [N], dt)
    W = k.tensor("W", [str(N)], [N], dt, role="out")
    O = k.tensor("O", [str(N)], [N], dt, role="out")
    threads = c.choice([32, 64, 128])
    shift = c.int(1, (cluster or blocks) - 1)
    if cluster:
        k.header = f"with T.ClusterKernel({blocks}, threads={threads}, cluster_dims={cluster}) as bx:"
        partner = f"(bx - bx % {cluster} + (T.block_rank_in_cluster() + {shift}) % {cluster})"
        form = c.choice(["sync", "split", "in_parallel"])
        barrier = "T.cluster_sync()"
    else:
        k.header = f"with T.Kernel({blocks}, threads={threads}) as bx:"
        partner = f"((bx + {shift}) % {blocks})"
        form = c.choice(["sync", "in_parallel"])
        barrier = "T.sync_grid()"
    k.features.add(f"{'cluster' if cluster else 'grid'}_barrier_{form}")
    own, theirs = f"bx * {bm} + i", f"{partner} * {bm} + i"
    if form == "in_parallel":
        k.body.open(f"for i in T.Parallel({bm}):")
        k.body.emit(f"{W}[{own}] = {X}[{own}] * 2 + 1")
        k.body.emit(barrier)
        k.body.emit(f"{O}[{own}] = {W}[{theirs}] + {X}[{own}]")
        k.body.close()
        return
    k.body.open(f"for i in T.Parallel({bm}):")
    k.body.emit(f"{W}[{own}] = {X}[{own}] * 2 + 1")
    k.body.close()
    if form == "split":
        k.body.emit("T.cluster_arrive()")
        k.body.open(f"for i in T.Parallel({bm}):")  # work that needs no other block
        k.body.emit(f"{O}[{own}] = {X}[{own}]")
        k.body.close()
        k.body.emit("T.cluster_wait()")
        k.body.open(f"for i in T.Parallel({bm}):")
        k.body.emit(f"{O}[{own}] = {W}[{theirs}] + {O}[{own}]")
        k.body.close()
        return
    k.body.emit(barrier)
    k.body.open(f"for i in T.Parallel({bm}):")
    k.body.emit(f"{O}[{own}] = {W}[{theirs}] + {X}[{own}]")
    k.body.close()


FAMILIES = [(gen_block_exchange, 1)]
