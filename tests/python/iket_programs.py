"""Programs instrumented with tegula.tools.cuda.iket, shared by cpu/test_tools_iket.py and
gpu/test_tools_iket_gpu.py, with what they compute (`expected_*`, in float64 from the same
inputs) and the events each thread must record (`check_*_events`). `plain_scaled_add` is
scaled_add without its iket calls: outside a session the two compile to the same source."""
import struct

import torch

import tegula.language as T
from tegula.tools.cuda import iket


def scaled_add(n, threads=128):
    """C = (A + B) * S[0], one element per T.Parallel iteration, under a range beside
    T.Kernel; marks at the kernel level (payload: the block, int32 and uint32) and per
    element (payload: the index, and the value stored, float32)."""

    @T.prim_func
    def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32), S: T.Tensor((1,), T.float32),
             C: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx, iket.range("block"):
            iket.mark("enter", payload=iket.payload(bx, dtype="int32"))
            for i in T.Parallel(threads):
                idx = bx * threads + i
                if idx < n:
                    iket.mark("before", payload=iket.payload(idx, dtype="int32"))
                    C[idx] = (A[idx] + B[idx]) * S[0]
                    iket.mark("after", payload=iket.payload(C[idx]))
            iket.mark("exit", payload=iket.payload(bx, dtype="uint32"))

    return main


def plain_scaled_add(n, threads=128):
    """scaled_add without its iket calls."""

    @T.prim_func
    def main(A: T.Tensor((n,), T.float32), B: T.Tensor((n,), T.float32), S: T.Tensor((1,), T.float32),
             C: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            for i in T.Parallel(threads):
                idx = bx * threads + i
                if idx < n:
                    C[idx] = (A[idx] + B[idx]) * S[0]

    return main


def expected_scaled_add(A, B, S):
    return ((A.double() + B.double()) * S.double()[0]).float()


def tiled_rows(M, N, bm, bn, threads=128):
    """B = relu(A) * 2 + row index, tile by tile through shared memory: a range around
    the copy in (`with iket.range` inside the kernel), range_push / range_pop around the
    compute, and a mark in a serial loop over the tile's column halves."""

    @T.prim_func
    def main(A: T.Tensor((M, N), T.float32), B: T.Tensor((M, N), T.float32)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            a = T.alloc_shared((bm, bn), T.float32)
            b = T.alloc_shared((bm, bn), T.float32)
            with iket.range("copy_in"):
                T.copy(A[by * bm, bx * bn], a)
            iket.range_push("compute")
            for half in T.serial(2):
                iket.mark("half", payload=half)
                for i, j in T.Parallel(bm, bn // 2):
                    b[i, half * (bn // 2) + j] = T.max(a[i, half * (bn // 2) + j], 0.0) * 2.0 + (by * bm + i)
            iket.range_pop("compute")
            T.copy(b, B[by * bm, bx * bn])

    return main


def expected_tiled_rows(A):
    rows = torch.arange(A.shape[0], dtype=torch.float64, device=A.device)[:, None]
    return (A.double().clamp(min=0) * 2 + rows).float()


def f32(value: float) -> float:
    """value rounded to float32, as a record's payload holds it."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def check_scaled_add_events(launch, n, threads, C):
    """What every thread of scaled_add records, in order: the range opened, `enter` (its
    block), pairs of `before` (an index) and `after` (C at that index), `exit` (its block),
    the range closed; timestamps never decrease; every index is recorded exactly once.
    Returns the number of records checked."""
    C = C.float().cpu().tolist()
    blocks = (n + threads - 1) // threads
    assert launch.dropped == 0
    by_thread = launch.by_thread()
    assert sorted(by_thread) == [(b, t) for b in range(blocks) for t in range(threads)]
    seen = []
    for (block, thread), records in by_thread.items():
        times = [r.time_ns for r in records]
        assert times == sorted(times), f"block {block} thread {thread}: timestamps out of order"
        names = [(r.name, r.phase) for r in records]
        assert names[:2] == [("block", "range_start"), ("enter", "mark")], names
        assert names[-2:] == [("exit", "mark"), ("block", "range_end")], names
        assert records[1].payload == block and records[-2].payload == block
        middle = records[2:-2]
        assert len(middle) % 2 == 0
        for before, after in zip(middle[::2], middle[1::2]):
            assert (before.name, after.name) == ("before", "after")
            assert before.block == block and 0 <= before.payload < n
            assert before.payload // threads == block
            assert after.payload == f32(C[before.payload])
            seen.append(before.payload)
    assert sorted(seen) == list(range(n))
    assert len(launch.records) == blocks * threads * 4 + 2 * n
    return len(launch.records)


def check_tiled_rows_events(launch, blocks, threads):
    """Every thread of every block of tiled_rows: the copy_in range, then the compute
    range holding the two `half` marks (payloads 0 and 1), timestamps in order."""
    by_thread = launch.by_thread()
    assert launch.dropped == 0 and len(by_thread) == blocks * threads
    expected = [("copy_in", "range_start", None), ("copy_in", "range_end", None), ("compute", "range_start", None),
                ("half", "mark", 0), ("half", "mark", 1), ("compute", "range_end", None)]
    for key, records in by_thread.items():
        assert [(r.name, r.phase, r.payload) for r in records] == expected, key
        times = [r.time_ns for r in records]
        assert times == sorted(times), key
    ranges = launch.ranges
    assert len(ranges) == 2 * blocks * threads and all(g["end_ns"] >= g["start_ns"] for g in ranges)
