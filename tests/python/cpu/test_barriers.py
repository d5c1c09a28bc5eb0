"""Named barriers of a run-time id on the CPU (barrier_programs.py): T.sync_threads(id, n)
with id an expression prints `barrier_sync(id, n)` and compiles; the simulator checks that
each warp names one barrier and each barrier gets its count, and computes the programs'
values against torch; the reference runs the tile program; bad ids are errors at the
line (the GPU side: gpu/test_barriers_gpu.py)."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import barrier_programs as bp  # noqa: E402


@pytest.mark.parametrize("n", [256, 600])
def test_halves_in_the_simulator(n):
    k = tegula.compile(bp.halves(n), target="sm_90a")
    src = k.get_kernel_source()
    assert "tegula::barrier_sync(((tx / 128) + 1), 128);" in src, src
    assert len(k.cubin()) > 0
    X = torch.randn(n)
    Y = torch.zeros(n)
    tt.simulate(k, X, Y)
    torch.testing.assert_close(Y.double(), bp.expected(X, 128), rtol=0, atol=0)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("n", [384, 300])
def test_block_indexed_barrier(run, n):
    k = tegula.compile(bp.per_block(n), target="sm_80")
    assert "barrier_sync(((bx % 2) + 1), 128)" in k.get_kernel_source()
    X = torch.randn(n)
    Y = torch.zeros(n)
    run(k, X, Y)
    torch.testing.assert_close(Y.double(), bp.expected(X, 128), rtol=0, atol=0)


def test_the_simulator_refuses_a_warp_split_over_barriers():
    @T.prim_func
    def main(Y: T.Tensor((256,), "int32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            T.sync_threads(tx % 4, 256)
            Y[tx] = tx

    k = tegula.compile(main, target="sm_90a")
    assert "barrier_sync((tx % 4), 256)" in k.get_kernel_source()
    with pytest.raises(Exception, match="a warp's threads must name one"):
        tt.simulate(k, torch.zeros(256, dtype=torch.int32))


def test_the_simulator_checks_the_count():
    @T.prim_func
    def main(Y: T.Tensor((256,), "int32")):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            T.sync_threads(tx // 64 + 1, 128)
            Y[tx] = tx

    k = tegula.compile(main, target="sm_90a")
    with pytest.raises(Exception, match="reached by 64 threads, but its arrive_count is 128"):
        tt.simulate(k, torch.zeros(256, dtype=torch.int32))


def test_a_float_barrier_id_is_refused_at_the_line():
    with pytest.raises(tegula.TegulaCompileError, match="'barrier_id' must be an int") as info:
        @T.prim_func
        def main(X: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                T.sync_threads(X[0], 128)
    assert "T.sync_threads(X[0], 128)" in str(info.value)


def test_a_run_time_id_inside_a_parallel_loop_is_refused():
    with pytest.raises(tegula.TegulaCompileError, match="inside a T.Parallel loop"):
        @T.prim_func
        def main(X: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                for i in T.Parallel(128):
                    X[i] = 1.0
                    T.sync_threads(i // 64 + 1, 64)
