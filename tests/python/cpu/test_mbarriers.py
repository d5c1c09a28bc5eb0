"""Explicit mbarriers and manual warp specialisation (language/barriers.py) on the CPU: the
producer/consumer programs of mbarrier_programs.py lower and NVRTC-compile for sm_90a with
the barriers initialised once by thread 0, no block-wide barrier inside the warpgroups'
branches and no warp specialisation of the compiler's own; T.set_max_nreg and
T.disable_warp_group_reg_alloc leave what a program computes unchanged; the reference and the
simulator run the programs (their warpgroups as coroutines) and agree with torch, and report
a wait that nobody completes; a gemm operand picked from stacked stages runs on both interpreters; bad
arguments are errors at the DSL line. The GPU runs of the programs:
tests/python/gpu/test_mbarriers_gpu.py."""
import re

import pytest
import torch

import mbarrier_programs as bp
from helpers import compile_error_of_source

import tegula
import tegula.language as T
import tegula.testing as tt


RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
SHAPES = pytest.mark.parametrize("M,N,K", [(64, 64, 128), (128, 64, 96)])


def _kernel(prog):
    return tegula.compile(prog, target="sm_90a")


def _scoped_part(src: str) -> str:
    """The kernel's text from the first warpgroup branch on."""
    at = src.index("if ((tx < 128))")
    return src[at:]


@pytest.mark.parametrize("make,threads,expected", [
    (lambda: bp.tma_wgmma_program(64, 64, 128), 256, ["mbar_wait(&full[", "mbar_arrive(&full[", "setmaxnreg_inc<240>()",
                                                 "setmaxnreg_dec<24>()"]),
    (lambda: bp.cp_async_program(64, 64, 128), 160, ["cp_async_16", "mbar_cp_async_arrive_noinc(&full[",
                                                "mbar_wait(&empty["]),
], ids=["tma_wgmma", "cp_async"])
def test_programs_lower_and_compile(make, threads, expected):
    k = _kernel(make())
    src = k.get_kernel_source()
    for text in expected:
        assert text in src, text
    # Thread 0 initialises every barrier once, then the whole block meets, before any branch.
    assert src.count("mbar_init(") == 4
    assert "fence_barrier_init()" in src
    # Inside the warpgroups' branches only named barriers of one branch's threads: a
    # __syncthreads there would wait for threads that never come.
    scoped = _scoped_part(src)
    assert "__syncthreads" not in scoped and "sync_async_proxy" not in scoped
    # No warp specialisation of the compiler's own: the block keeps the threads it declared.
    assert f"__launch_bounds__({threads})" in src
    assert len(k.cubin()) > 0


def test_stage_operand_runs_on_both_interpreters():
    """T.gemm on A_s[s, :, :] of a (2, 64, 32) buffer: the stacked-stage form the barrier
    programs use, without barriers, against torch."""

    @T.prim_func
    def staged(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((2, 64, 32), "float16")
            B_s = T.alloc_shared((2, 32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for s in T.serial(2):
                T.copy(A[0:64, s * 32:(s + 1) * 32], A_s[s, :, :])
                T.copy(B[s * 32:(s + 1) * 32, 0:64], B_s[s, :, :])
            for s in T.unroll(2):
                T.gemm(A_s[s, :, :], B_s[s, :, :], acc)
            T.copy(acc, C)

    k = _kernel(staged)
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    want = a.float() @ b.float()
    for run in (tt.reference, tt.simulate):
        c = torch.zeros(64, 64)
        run(k, a, b, c)
        torch.testing.assert_close(c, want, rtol=1e-3, atol=1e-3)


@RUNS
def test_register_counts_leave_results_alone(run):
    @T.prim_func
    def regs(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            T.disable_warp_group_reg_alloc()
            tx = T.get_thread_binding()
            if tx < 128:
                T.set_max_nreg(240, 1)
                for i in T.Parallel(128):
                    B[i] = A[i] * 2
            else:
                T.set_max_nreg(40, 0)
                for i in T.Parallel(128):
                    B[128 + i] = A[128 + i] + 1

    k = _kernel(regs)
    src = k.get_kernel_source()
    assert "setmaxnreg_inc<240>()" in src and "setmaxnreg_dec<40>()" in src
    a = torch.randn(256)
    b = torch.zeros(256)
    run(k, a, b)
    assert torch.equal(b[:128], a[:128] * 2) and torch.equal(b[128:], a[128:] + 1)


@RUNS
def test_tilelang_register_annotations_are_set_max_nreg(run):
    # TileLang's marks on hand-written producer / consumer branches (its minference kernel).
    @T.prim_func
    def regs(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            tx = T.get_thread_binding()
            if tx >= 128:
                T.annotate_producer_reg_dealloc()
                for i in T.Parallel(128):
                    B[128 + i] = A[128 + i] - 3
            else:
                T.annotate_consumer_reg_alloc(232)
                for i in T.Parallel(128):
                    B[i] = A[i] * 5

    k = _kernel(regs)
    src = k.get_kernel_source()
    assert "setmaxnreg_dec<24>()" in src and "setmaxnreg_inc<232>()" in src
    a = torch.randn(256)
    b = torch.zeros(256)
    run(k, a, b)
    assert torch.equal(b[:128], a[:128] * 5) and torch.equal(b[128:], a[128:] - 3)


@RUNS
@SHAPES
def test_tma_copy_and_wgmma_gemm_ring(run, M, N, K):
    k = _kernel(bp.tma_wgmma_program(M, N, K))
    a, b = bp.inputs(M, N, K)
    c = torch.full((M, N), 12345.0)
    run(k, a, b, c)
    torch.testing.assert_close(c, bp.ref(a, b), rtol=1e-3, atol=1e-3)


@RUNS
@SHAPES
def test_ptx_cp_async_ring_with_one_producer_thread(run, M, N, K):
    k = _kernel(bp.cp_async_single_program(M, N, K))
    a, b = bp.inputs(M, N, K, transpose_B=True)
    c = torch.full((M, N), 12345.0)
    run(k, a, b, c)
    torch.testing.assert_close(c, bp.ref(a, b, transpose_B=True), rtol=1e-3, atol=1e-3)


@SHAPES
def test_ptx_cp_async_ring_with_a_producer_warp_simulated(M, N, K):
    # Each producer thread copies its own chunks (the thread index in the indices): the
    # simulator runs it; the reference runs one logical thread per warpgroup.
    k = _kernel(bp.cp_async_program(M, N, K))
    a, b = bp.inputs(M, N, K, transpose_B=True)
    c = torch.full((M, N), 12345.0)
    tt.simulate(k, a, b, c)
    torch.testing.assert_close(c, bp.ref(a, b, transpose_B=True), rtol=1e-3, atol=1e-3)


@RUNS
def test_a_wait_nobody_completes_is_reported(run):
    k = _kernel(bp.deadlock_program())
    with pytest.raises(Exception, match=r"wait for each other forever.*T.barrier_wait\(full\[0\], 0\)"):
        run(k, torch.randn(128), torch.zeros(128))


def _compile_error(body, threads=128, target="sm_90a"):
    src = f'''
import tegula
import tegula.language as T

@T.prim_func
def f(X: T.Tensor((128,), "float16"), Y: T.Tensor((128,), "float16")):
    with T.Kernel(1, threads={threads}) as bx:
        S = T.alloc_shared((128,), "float16")
        tx = T.get_thread_binding()
{body}
tegula.compile(f, target="{target}")
'''
    return compile_error_of_source(src, f"bar_bad_{abs(hash(body))}")


IND = "        "


@pytest.mark.parametrize("body,match", [
    (IND + "bar = T.alloc_barrier(arrive_count=0)", "arrive count must be an int of at least 1"),
    (IND + "bar = T.alloc_barrier(arrive_count=[32, 'x'])", "arrive count must be an int"),
    (IND + "bar = T.alloc_barrier(arrive_count=256)", "exceeds the block's 128 threads"),
    (IND + "if tx < 32:\n" + IND + "    bar = T.alloc_barrier(arrive_count=32)", "kernel's top level"),
    (IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND + "T.barrier_wait(bar, 2)", "parity is 0 or 1"),
    (IND + "bar = T.alloc_barrier(arrive_count=[128, 128])\n" + IND + "T.barrier_arrive(bar)", "name one"),
    (IND + "T.barrier_arrive(S[0])", "must be a barrier of T.alloc_barrier"),
    (IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND + "T.tma_copy(X[0:128], S)", "barrier=bar"),
    (IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND + "T.tma_copy(X[0:128], S, barrier=bar)\n" + IND +
     "T.barrier_wait(bar, 0)", "no T.barrier_arrive(bar) follows"),
    (IND + "T.ptx_cp_async(T.access_ptr(S[0], 'w', 3), T.access_ptr(X[0], 'r', 3), 3)", "6 bytes"),
    (IND + "T.ptx_cp_async(T.access_ptr(X[0], 'w', 8), T.access_ptr(S[0], 'r', 8), 8)", "into shared memory"),
    (IND + "T.ptx_cp_async(S[0], X[0], 8)", "must be a T.access_ptr"),
    (IND + "T.set_max_nreg(250, 1)", "multiple of 8"),
    (IND + "T.annotate_consumer_reg_alloc(300)", "reg_count is an int in 24..256"),
    (IND + "T.wait_wgmma(-1)", "int >= 0"),
    (IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND + "for i in T.Parallel(128):\n" + IND +
     "    T.barrier_arrive(bar)", "inside a T.Parallel loop"),
    (IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND + "for k in T.Pipelined(4, num_stages=2):\n" + IND +
     "    T.barrier_wait(bar, k % 2)", "inside a T.Pipelined loop"),
])
def test_bad_arguments_are_errors(body, match):
    err = _compile_error(body)
    assert match in str(err), str(err)


def test_barriers_need_sm90():
    err = _compile_error(IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND + "T.barrier_arrive(bar)",
                         target="sm_80")
    assert "need sm_90" in str(err), str(err)
    assert re.search(r"alloc_barrier|barrier_arrive", err.source_line)
