"""`while` loops and T.PersistentTileScheduler without a GPU: the reference and the
simulator agree with torch (ragged tiles, workers that take unequal numbers of tiles), every
tile goes to the worker and iteration the scheduler's numbering names, the IR shows the
state variables and the loop, the CUDA has a `while`, and misuse is an error at the line."""
import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
import tile_schedule_programs as tp

RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])


@RUNS
@pytest.mark.parametrize("mt,nt,workers,swizzle,column_major", [
    (4, 2, 3, 1, True), (5, 7, 4, 3, True), (3, 5, 16, 2, False), (6, 3, 5, 4, False), (1, 1, 2, 1, True)])
def test_each_tile_goes_to_its_worker_and_iteration(run, mt, nt, workers, swizzle, column_major):
    prog, ref = tp.tile_owner(mt, nt, workers, swizzle, column_major)
    kernel = tegula.compile(prog, target="sm_90a")
    O = torch.full((mt, nt), -1, dtype=torch.int32)
    run(kernel, O)
    assert torch.equal(O, ref())


def test_schedule_reference_worked_example():
    # The module docstring's example: 4 x 2 tiles, column major, no swizzle, one worker.
    assert [(m, n) for _, _, m, n in tp.schedule_reference(4, 2, 1)] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1), (3, 1)]


@RUNS
@pytest.mark.parametrize("M,N,workers", [(64, 64, 3), (50, 70, 4), (17, 100, 7)])
def test_scheduled_tiles_agree_with_torch(run, M, N, workers):
    prog, ref = tp.scheduled_scale(M, N, workers)
    kernel = tegula.compile(prog, target="sm_90a")
    a = torch.randn(M, N, generator=torch.Generator().manual_seed(M * N))
    b = torch.full((M, N), float("nan"))
    run(kernel, a, b)
    torch.testing.assert_close(b, ref(a))


@RUNS
@pytest.mark.parametrize("M,N,K,workers", [(128, 128, 64, 3), (100, 70, 32, 2)])
def test_scheduled_gemm_agrees_with_torch(run, M, N, K, workers):
    prog, ref = tp.scheduled_gemm(M, N, K, workers)
    kernel = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(M + N + K)
    A, B = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    C = torch.full((M, N), float("nan"))
    run(kernel, A, B, C)
    torch.testing.assert_close(C.double(), ref(A, B), rtol=1e-3, atol=1e-3)


@RUNS
@pytest.mark.parametrize("mt,nt,workers,swizzle", [(4, 3, 5, 1), (5, 6, 4, 2)])
def test_stateless_coordinates(run, mt, nt, workers, swizzle):
    prog, ref = tp.stateless_owner(mt, nt, workers, swizzle)
    kernel = tegula.compile(prog, target="sm_90a")
    O = torch.full((mt, nt), -1, dtype=torch.int32)
    run(kernel, O)
    assert torch.equal(O, ref())


@RUNS
def test_while_on_a_variable_agrees_with_python(run):
    prog, ref = tp.halving_steps(9)
    kernel = tegula.compile(prog, target="sm_90a")
    a = torch.tensor([1, 2, 3, 4, 7, 8, 1000, 1 << 20, 5], dtype=torch.int32)
    s = torch.full((9,), -1, dtype=torch.int32)
    run(kernel, a, s)
    assert torch.equal(s, ref(a))


def test_the_ir_and_the_cuda_show_the_loop():
    prog, _ = tp.tile_owner(4, 2, 3)
    script = prog.script()
    for name in ("sched_m_idx", "sched_n_idx", "sched_current_iter", "sched_linear_idx", "while "):
        assert name in script
    source = tegula.compile(prog, target="sm_90a").get_kernel_source()
    assert "while (" in source
    assert tegula.compile(prog, target="sm_90a").cubin()[:4] == b"\x7fELF"
    stateless, _ = tp.stateless_owner(4, 3, 5)
    assert "m_idx" not in stateless.script() and "while" not in stateless.script()


def test_a_while_that_never_ends_is_reported():
    @T.prim_func
    def forever(A: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_var("int32")
            x = 1
            while x > 0:
                A[0] = x
    kernel = tegula.compile(forever, target="sm_90a")
    with pytest.raises(Exception, match="never turned false"):
        tt.simulate(kernel, torch.zeros(4, dtype=torch.int32))


def test_scheduler_mistakes_are_named():
    def build(**kwargs):
        args = dict(num_workers=4)
        args.update(kwargs)

        @T.prim_func
        def main(O: T.Tensor((4,), "int32")):
            with T.Kernel(4, threads=32) as w:
                sched = T.PersistentTileScheduler(2, 2, **args)
                sched.init(w)
                while sched.valid():
                    O[sched.linear_idx] = sched.m_idx
                    sched.next_tile()
        return main

    for kwargs, pattern in [(dict(swizzle_size=0), "swizzle_size must be a positive int"),
                            (dict(num_workers=-1), "num_workers must be a positive int"),
                            (dict(name="two words"), "name must be an identifier"),
                            (dict(stateful=False), r"stateful=False\) keeps no current_iter"),
                            (dict(bogus=1), "unexpected keyword argument 'bogus'")]:
        with pytest.raises(tegula.TegulaCompileError, match=pattern):
            build(**kwargs)
    with pytest.raises(tegula.TegulaCompileError, match="while loop inside a T.Parallel loop"):
        @T.prim_func
        def inside(A: T.Tensor((32,), "int32")):
            with T.Kernel(1, threads=32):
                for i in T.Parallel(32):
                    while A[i] > 0:
                        A[i] = A[i] - 1


@pytest.mark.parametrize("n", [64, 100])
def test_a_while_that_diverges_between_threads_in_the_simulator(n):
    # The reference runs one logical thread per block, so it refuses the thread index.
    prog, ref = tp.per_thread_halving(n)
    kernel = tegula.compile(prog, target="sm_90a")
    a = torch.randint(1, 1 << 30, (n,), dtype=torch.int32, generator=torch.Generator().manual_seed(n))
    s = torch.full((n,), -1, dtype=torch.int32)
    tt.simulate(kernel, a, s)
    assert torch.equal(s, ref(a))
