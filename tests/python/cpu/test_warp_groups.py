"""Warp-group scopes (`with T.ws(g):`) and gemms whose clear_accum is a run-time condition,
on the CPU: the programs of tests/python/ws_programs.py lower and compile; the reference
(the tile program, each warp group's code as a side of its own) and the simulator (the
lowered code, thread by thread) agree with torch, aligned and ragged; a consumer written
before its producer in the loop body runs (each warp group goes its own way: no barrier
of the compiler's between them); bad arguments are errors at the DSL line.
tests/python/gpu/test_warp_groups_gpu.py runs the programs on the GPU."""
import re

import pytest
import torch

import ws_programs as wp
from helpers import compile_error_of_source

import tegula
import tegula.testing as tt

RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
SHAPES = pytest.mark.parametrize("shape", [(128, 128, 128), (96, 80, 72)], ids=["aligned", "ragged"])


def _as_float(got, want):
    """got (any float type) against want, in float32."""
    return got.float(), want


@RUNS
@SHAPES
@pytest.mark.parametrize("consumer_first", [False, True], ids=["producer_first", "consumer_first"])
def test_ring_gemm(run, shape, consumer_first):
    kernel = wp.ring_gemm("sm_90a", consumer_first)(*shape)
    a, b = wp.gemm_inputs(*shape)
    torch.testing.assert_close(*_as_float(run(kernel, a, b), a.float() @ b.float()), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("consumer_first", [False, True], ids=["producer_first", "consumer_first"])
def test_each_warp_group_runs_its_own_loop(consumer_first):
    src = wp.ring_gemm("sm_90a", consumer_first)(128, 128, 128).get_kernel_source()
    body = src[src.index("fence_barrier_init"):]
    # One loop per warp group, each inside its group's branch, and no block-wide barrier
    # after the barriers' initialisation: the groups meet only at the program's mbarriers.
    assert len(re.findall(r"for \(int k\w* = 0;", body)) == 2
    after_init = body[body.rindex("__syncthreads();"):]
    assert after_init.count("__syncthreads") == 1
    assert "if ((tx < 128))" in after_init and "} else {" in after_init
    # The producer's reuse of its ring across iterations waits for its own threads alone.
    assert "barrier_sync(" in after_init
    assert "__launch_bounds__(256)" in src


@RUNS
@SHAPES
def test_two_warp_groups_consume_together(run, shape):
    kernel = wp.two_consumer_groups("sm_90a")(*shape)
    src = kernel.get_kernel_source()
    assert "if ((tx < 256))" in src  # T.ws(0, 1): one scope of 256 threads
    a, b = wp.gemm_inputs(*shape)
    torch.testing.assert_close(*_as_float(run(kernel, a, b), a.float() @ b.float()), rtol=1e-3, atol=1e-3)


@RUNS
@SHAPES
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_warp_groups_split_the_columns(run, shape, target):
    kernel = wp.split_columns(target)(*shape)
    a, b = wp.gemm_inputs(*shape)
    torch.testing.assert_close(*_as_float(run(kernel, a, b), a.float() @ b.float()), rtol=1e-3, atol=1e-3)


@RUNS
@pytest.mark.parametrize("n", [512, 300], ids=["aligned", "ragged"])
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_elementwise_work_per_warp_group(run, n, target):
    kernel = wp.elementwise_groups(target)(n)
    src = kernel.get_kernel_source()
    assert "if ((tx >= 128))" in src and "if ((tx < 128))" in src
    a = torch.randn(n)
    assert torch.equal(run(kernel, a), wp.elementwise_expected(a))


@RUNS
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("loop", ["serial", "pipelined"])
@pytest.mark.parametrize("when", wp.CLEAR_WHEN)
@pytest.mark.parametrize("shape", [(128, 128, 128), (96, 80, 72)], ids=["aligned", "ragged"])
def test_clear_accum_at_run_time(run, target, loop, when, shape):
    kernel = wp.gemm_clear_when(target, when, loop)(*shape)
    a, b = wp.gemm_inputs(*shape)
    torch.testing.assert_close(*_as_float(run(kernel, a, b), wp.clear_expected(a, b, when)), rtol=1e-3, atol=1e-3)


def test_clear_accum_at_run_time_before_wgmma():
    # sm_90a, no thread guard: the gemm runs on wgmma; the accumulator is cleared where the
    # condition holds, then the instruction accumulates.
    src = wp.gemm_clear_when("sm_90a", "first", "serial")(128, 128, 128).get_kernel_source()
    assert "wgmma_ss<" in src
    assert re.search(r"if \(\(k == 0\)\) \{\s+acc\[0\] = 0\.0f;", src)


@RUNS
@pytest.mark.parametrize("D", [128, 192])
def test_unrolled_slices_with_clear_accum_in_a_warp_group(run, D):
    kernel = wp.split_k_attention("sm_90a")(64, 64, D)
    src = kernel.get_kernel_source()
    # T.unroll over the slices: one gemm per slice, each at its own constant column
    assert src.count("tegula::gemm_ss<") == D // 64
    # the P V gemm reads P where Q Kᵀ left it: wgmma's warp split, no exchange
    assert "gemm_rs<" in src and "exchange" not in src
    q, k, v = torch.randn(64, D).half(), torch.randn(64, D).half(), torch.randn(64, 64).half()
    s, o = run(kernel, q, k, v)
    want_s, _ = wp.split_k_attention_expected(q, k, v)
    torch.testing.assert_close(s, want_s, rtol=1e-4, atol=1e-3)
    # P is S rounded to float16: O against the product of the S the kernel computed
    _, want_o = wp.split_k_attention_expected(q, k, v, s)
    torch.testing.assert_close(o, want_o, rtol=1e-4, atol=1e-3)


def _compile_error(body, threads=256, target="sm_90a"):
    src = f'''
import tegula
import tegula.language as T

@T.prim_func
def f(A: T.Tensor((128, 128), "float16"), B: T.Tensor((128, 128), "float16"), C: T.Tensor((128, 128), "float32")):
    with T.Kernel(1, threads={threads}) as bx:
        A_s = T.alloc_shared((128, 128), "float16")
        B_s = T.alloc_shared((128, 128), "float16")
        S = T.alloc_shared((4,), "float32")
        acc = T.alloc_fragment((128, 128), "float32")
        tx = T.get_thread_binding()
{body}
tegula.compile(f, target="{target}")
'''
    return compile_error_of_source(src, f"ws_bad_{abs(hash(body))}")


IND = "        "


@pytest.mark.parametrize("body,threads,match,at", [
    (IND + "with T.ws(0, 2):\n" + IND + "    T.clear(acc)", 384, "one contiguous range", "T.ws(0, 2)"),
    (IND + "with T.ws(2):\n" + IND + "    T.clear(acc)", 256, "past the block's 256 threads", "T.ws(2)"),
    (IND + "with T.ws():\n" + IND + "    T.clear(acc)", 256, "name at least one warp group", "T.ws()"),
    (IND + "with T.ws(0.5):\n" + IND + "    T.clear(acc)", 256, "constant int >= 0", "T.ws(0.5)"),
    (IND + "with T.ws(-1):\n" + IND + "    T.clear(acc)", 256, "constant int >= 0", "T.ws(-1)"),
    (IND + "with T.ws(0) as g:\n" + IND + "    T.clear(acc)", 256, "binds no name", "as g"),
    (IND + "for i in T.Parallel(128):\n" + IND + "    with T.ws(0):\n" + IND + "        S[0] = 1.0", 256,
     "inside a T.Parallel loop", "with T.ws(0)"),
    (IND + "T.gemm(A_s, B_s, acc, clear_accum='yes')", 256, "'clear_accum' must be True, False", "clear_accum"),
    (IND + "T.gemm(A_s, B_s, acc, clear_accum=S[0])", 256, "bool (or int) condition", "clear_accum"),
    (IND + "T.gemm(A_s, B_s, acc, clear_accum=(tx < 64))", 256, "reads the thread index", "T.gemm"),
])
def test_bad_arguments_are_errors(body, threads, match, at):
    err = _compile_error(body, threads)
    assert match in str(err), str(err)
    assert at in err.source_line, (err.source_line, str(err))


def test_ws_needs_a_kernel():
    src = '''
import tegula.language as T

@T.prim_func
def f(A: T.Tensor((128,), "float32")):
    with T.ws(0):
        pass
'''
    assert re.search(r"inside `with T.Kernel", str(compile_error_of_source(src, "ws_outside")))


def test_barrier_in_a_pipelined_loop_needs_a_warp_group_scope():
    # Outside a T.ws scope, the pipeline would reorder the program's own barriers.
    err = _compile_error(IND + "bar = T.alloc_barrier(arrive_count=128)\n" + IND +
                         "for k in T.Pipelined(4, num_stages=2):\n" + IND + "    T.barrier_wait(bar, k % 2)")
    assert "inside a T.Pipelined loop" in str(err)
