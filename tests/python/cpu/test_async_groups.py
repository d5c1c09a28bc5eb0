"""Copies a program groups and waits for itself (T.ptx_commit_group, T.ptx_wait_group) and
TileLang's T.Parallel hints (prefer_async=, annotations=) on the CPU: the reference and the
simulator agree with torch on a prefetching ring and on per-thread T.ptx_cp_async groups;
a copy that lands at its wait is read by other threads only after a barrier that follows
the wait (the simulator finds the race otherwise); bad arguments are errors naming them.
The GPU runs: gpu/test_async_groups_gpu.py."""
import re

import pytest
import torch

import async_group_programs as ap

import tegula
import tegula.language as T
import tegula.testing as tt

RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])


@RUNS
@pytest.mark.parametrize("M,steps,stages,dtype,annotated", [
    (32, 3, 2, "float16", False), (21, 4, 3, "bfloat16", True), (16, 1, 2, "float32", False)])
def test_prefetch_ring_agrees_with_torch(run, M, steps, stages, dtype, annotated):
    k = tegula.compile(ap.prefetch_program(M, steps, stages=stages, dtype=dtype, annotated=annotated),
                       target="sm_90a")
    x = torch.randn(M, steps * 32).to(getattr(torch, dtype))
    o = torch.full((M, 32), float("nan"))
    run(k, x, o)
    torch.testing.assert_close(o, ap.prefetch_ref(x, steps, 32), rtol=1e-5, atol=1e-5)


def test_prefetch_ring_source_waits_then_syncs():
    src = tegula.compile(ap.prefetch_program(32, 3), target="sm_80").get_kernel_source()
    # each wait is followed by the block's barrier before the ring is read
    assert re.search(r"cp_async_wait<1>\(\);\s*__syncthreads\(\);", src), src
    assert re.search(r"cp_async_wait<0>\(\);\s*__syncthreads\(\);", src), src
    assert src.count("cp_async_commit();") == 2


def test_thread_groups_land_at_their_waits():
    k = tegula.compile(ap.thread_groups_program(), target="sm_90a")
    a = torch.randn(1024)
    b = torch.full((1024,), float("nan"))
    tt.simulate(k, a, b)
    torch.testing.assert_close(b, ap.thread_groups_ref(a), rtol=0, atol=0)
    src = k.get_kernel_source()
    # the barrier that orders another thread's read comes after each wait, not only after the issue
    assert re.search(r"cp_async_wait<1>\(\);\s*__syncthreads\(\);", src), src
    assert re.search(r"cp_async_wait<0>\(\);\s*__syncthreads\(\);", src), src


def test_wait_group_before_the_copies_land_is_a_race():
    """The read of the second half after only T.ptx_wait_group(1), its group possibly still in
    flight, is what the simulator reports: a barrier does not make a copy land."""
    k = tegula.compile(ap.thread_groups_program(early=True), target="sm_90a")
    with pytest.raises(tt.SimulationError, match=r"thread 0 reads S\[1023\] while a cp.async into it is in flight"):
        tt.simulate(k, torch.randn(1024), torch.zeros(1024))


def _build(body):
    @T.prim_func
    def bad(X: T.Tensor((64,), "float32"), O: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            body(X, O, bx)
    return bad


@pytest.mark.parametrize("num,shown", [(-1, "-1"), (1.5, "1.5"), ("two", "'two'")])
def test_wait_group_needs_a_constant_count(num, shown):
    def body(X, O, bx):
        T.ptx_wait_group(num)

    with pytest.raises(tegula.TegulaCompileError, match=r"T.ptx_wait_group: num is a constant int of at least 0, got " +
                       re.escape(shown)):
        _build(body)


def test_wait_group_of_a_block_index_is_refused():
    def body(X, O, bx):
        T.ptx_wait_group(bx)

    with pytest.raises(tegula.TegulaCompileError, match="num is a constant int"):
        _build(body)


def test_parallel_loop_layout_is_refused_by_name():
    def body(X, O, bx):
        for i in T.Parallel(64, loop_layout=object()):
            O[i] = X[i]

    with pytest.raises(tegula.TegulaCompileError, match="loop_layout is not supported"):
        _build(body)


def test_parallel_annotations_must_be_a_dict():
    def body(X, O, bx):
        for i in T.Parallel(64, annotations=["x"]):
            O[i] = X[i]

    with pytest.raises(tegula.TegulaCompileError, match="annotations is a dict"):
        _build(body)
