"""break and continue in serial loops on the CPU (tests/python/loop_jump_programs.py; the GPU
side in gpu/test_loop_jumps_gpu.py): the reference and the simulator against torch, a jump
that differs between threads in a loop with no barrier, one every thread takes alike in a
loop of tile code, the generated `break;` / `continue;`, and the refusals at the DSL line."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import loop_jump_programs as lp  # noqa: E402

RUNS = [tt.reference, tt.simulate]


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("rows,cols,use_continue", [(200, 13, False), (128, 8, True), (77, 32, True)])
def test_a_break_that_differs_between_threads(run, rows, cols, use_continue):
    k = tegula.compile(lp.first_negative_program(rows, cols, use_continue), out_idx=[1, 2], target="sm_90a")
    g = torch.Generator().manual_seed(rows * cols)
    x = torch.randn(rows, cols, generator=g) + 0.8
    x[x.abs() < 0.3] = 0
    x[::3] = x[::3].abs()  # every third row has no negative element
    first, total = run(k, x)
    want_first, want_total = lp.first_negative_expected(x)
    assert torch.equal(first, want_first)
    torch.testing.assert_close(total, want_total)
    assert 0 < (want_first < cols).sum() < rows  # some rows break, some run to the end


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("n,limit", [(256, 20.0), (128, 1000.0), (200, 0.0)])
def test_a_break_every_thread_takes_leaves_a_loop_of_tile_code(run, n, limit):
    k = tegula.compile(lp.rounds_program(n, 6), out_idx=[2, 3], target="sm_90a")
    x = torch.rand(n, generator=torch.Generator().manual_seed(n))
    y, rounds = run(k, x, torch.tensor([limit]))
    want_y, want_rounds = lp.rounds_expected(x, limit, 6)
    assert rounds.item() == want_rounds
    torch.testing.assert_close(y, want_y)


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("M,N,skip", [(16, 128, 3), (8, 64, 1), (32, 96, 2)])
def test_a_continue_skips_the_rest_of_an_iteration(run, M, N, skip):
    k = tegula.compile(lp.skip_columns_program(M, N, skip), target="sm_90a")
    a = torch.randn(M, N, generator=torch.Generator().manual_seed(M + N))
    b = torch.zeros(M, N)
    run(k, a, b)
    assert torch.equal(b, lp.skip_columns_expected(a, skip))


def test_the_generated_code_breaks_and_continues():
    src = tegula.compile(lp.first_negative_program(64, 8, True), out_idx=[1, 2], target="sm_80").get_kernel_source()
    assert "break;" in src and "continue;" in src
    assert tegula.compile(lp.rounds_program(128, 4), out_idx=[2, 3], target="sm_90a").cubin()


def test_a_break_some_threads_take_past_a_barrier_is_refused():
    with pytest.raises(tegula.TegulaCompileError, match="break under a condition that may differ") as err:
        tegula.compile(lp.divergent_break_over_barrier_program(), target="sm_90a")
    assert "loop_jump_programs.py:126" in str(err.value)


def _jump_in(kind):
    @T.prim_func
    def f(X: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            if kind == "parallel":
                for i in T.Parallel(128):
                    if X[i] < 0:
                        break
            elif kind == "pipelined":
                for i in T.Pipelined(4, num_stages=2):
                    continue
            else:
                for i in [1, 2]:
                    break

    return f


@pytest.mark.parametrize("kind,message", [("parallel", "this is a T.Parallel loop"), ("pipelined", "T.Pipelined"),
                                          ("python", "Python sequence")])
def test_jumps_out_of_other_loops_are_refused_at_their_line(kind, message):
    with pytest.raises(tegula.TegulaCompileError, match=message):
        tegula.compile(_jump_in(kind), target="sm_90a")


def test_the_reference_refuses_a_break_only_some_threads_take():
    @T.prim_func
    def f(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding(0)
            for j in T.serial(4):
                if tx < 64:
                    break
                Y[tx] = X[tx] + j

    k = tegula.compile(f, target="sm_90a")
    x, y = torch.randn(128), torch.zeros(128)
    with pytest.raises(tegula.TegulaCompileError, match="cannot take a break that only some threads take"):
        tt.reference(k, x, y)
    tt.simulate(k, x, y)
    assert torch.equal(y[64:], x[64:] + 3) and torch.equal(y[:64], torch.zeros(64))
