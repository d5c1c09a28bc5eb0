"""TileLang names of the language on the CPU (tests/python/language_names_programs.py;
the GPU side in gpu/test_language_names_gpu.py): the reference and the simulator against
torch, the generated code compiles, and each mistake is an error naming what is wrong."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.language.kernel import _normalize_threads

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import language_names_programs as lp  # noqa: E402

RUNS = [tt.reference, tt.simulate]
IDS = ["reference", "simulate"]


def build(program, out_idx=-1, **kw):
    return tegula.compile(program, out_idx=out_idx, target="sm_90a", **kw)


# ---------------------------------------------------------------- T.Kernel's threads


@pytest.mark.parametrize("threads,expected", [(None, [128, 1, 1]), (256, [256, 1, 1]), ([32, 4], [32, 4, 1]),
                                              ((32, 2, 2), [32, 2, 2])])
def test_normalize_threads(threads, expected):
    assert _normalize_threads(threads) == expected


@pytest.mark.parametrize("threads", [-1, 0, [-1], [128, 0], (128, 1, -2)])
def test_normalize_threads_refuses_non_positive(threads):
    with pytest.raises(ValueError, match="threads must be positive"):
        _normalize_threads(threads)


@pytest.mark.parametrize("threads,message", [(0, "threads must be positive"), ([64, 32], "product is at most 1024"),
                                             (2048, "an int in 1..1024"), (1.5, "positive ints")])
def test_kernel_threads_mistakes(threads, message):
    with pytest.raises(tegula.TegulaCompileError, match=message) as info:
        @T.prim_func
        def f(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=threads):
                A[0] = 1.0
    assert "threads=threads" in str(info.value)  # the caret's line


def test_kernel_takes_a_3d_thread_list_of_one_dimension():
    @T.prim_func
    def f(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=[64, 1, 1]) as bx:
            for i in T.Parallel(64):
                A[i] = 1.0

    assert "__launch_bounds__(64)" in build(f, out_idx=None).get_kernel_source()


@pytest.mark.parametrize("n,dims", [(256, (32, 4, 1)), (300, (16, 2, 2)), (64, (8, 1, 8))])
def test_thread_block_of_several_dimensions(n, dims):
    # A block of [x, y, z] threads is a flat block of x * y * z threads numbered as CUDA
    # numbers them; the reference runs one logical thread a block, so only the simulator.
    prog, ref = lp.thread_block_program(n, dims)
    k = build(prog)
    assert f"__launch_bounds__({dims[0] * dims[1] * dims[2]})" in k.get_kernel_source() and k.cubin()
    a = torch.randn(n)
    torch.testing.assert_close(tt.simulate(k, a), ref(a))


def test_thread_binding_of_a_missing_dimension():
    with pytest.raises(tegula.TegulaCompileError, match="dim must be 0, 1 or 2"):
        @T.prim_func
        def f(A: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=(32, 2)) as bx:
                A[T.get_thread_binding(3)] = 0
    with pytest.raises(tegula.TegulaCompileError, match=r"along threadIdx.y, \[0, 2\)"):
        @T.prim_func
        def g(A: T.Tensor((64,), "int32")):
            with T.Kernel(1, threads=(32, 2)) as bx:
                A[T.thread_binding(0, 4, thread="threadIdx.y")] = 0


# ---------------------------------------------------------------- T.device_assert, T.shift_left / shift_right


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("n", [256, 300])
def test_tuple_swap_assert_and_shifts(run, n):
    prog, ref = lp.ordered_pairs_program(n)
    k = tegula.compile(prog, out_idx=[1, 2], target="sm_90a")
    src = k.get_kernel_source()
    assert "device_assert(" in src and "a pair out of order (language_names_programs.py:" in src and k.cubin()
    x = torch.randint(-1000, 1000, (n,), dtype=torch.int32)
    y, z = run(k, x)
    want_y, want_z = ref(x)
    assert torch.equal(y, want_y) and torch.equal(z, want_z)


def test_device_assert_that_fails_is_reported_at_its_line():
    k = tegula.compile(lp.assert_program(300, 50), out_idx=[1], target="sm_90a")
    x = torch.arange(300, dtype=torch.int32) % 50
    assert torch.equal(tt.reference(k, x), x) and torch.equal(tt.simulate(k, x), x)
    x[137] = 50
    with pytest.raises(tegula.TegulaCompileError, match="T.device_assert failed: an element past the bound") as info:
        tt.reference(k, x)
    assert "language_names_programs.py" in str(info.value)
    with pytest.raises(tt.SimulationError, match=r"block \(1\): T.device_assert\(an element past the bound\) failed in "
                                                 r"thread \d+ \(language_names_programs.py:\d+\)"):
        tt.simulate(k, x)


def test_device_assert_and_shift_mistakes():
    with pytest.raises(tegula.TegulaCompileError, match="the condition is always false"):
        @T.prim_func
        def f(A: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=32):
                T.device_assert(False, "never")
    with pytest.raises(tegula.TegulaCompileError, match="'y' must be an integer"):
        @T.prim_func
        def g(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                A[0] = T.shift_left(1, A[1])


# ---------------------------------------------------------------- T.isfinite / isinf / isnan


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32"])
def test_float_tests(run, dtype):
    prog, ref = lp.float_tests_program(100, dtype)
    k = build(prog)
    x = (torch.randn(100) * 3).to(getattr(torch, dtype))
    x = lp.special_values(x)
    assert torch.equal(run(k, x), ref(x))


def test_float_tests_print_cuda_functions_and_fold():
    k = build(lp.float_tests_program(64, "float16")[0])
    src = k.get_kernel_source()
    assert "isfinite(cast<float>(" in src and "isinf(" in src and "isnan(" in src
    assert k.cubin()
    assert T.isfinite(1.0) and T.isinf(float("inf")) and T.isnan(float("nan")) and not T.isnan(2)


# ---------------------------------------------------------------- T.transpose


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("M,N,bm,bn,via", [(64, 32, 32, 16, "shared"), (50, 70, 32, 32, "shared"),
                                           (64, 64, 32, 32, "fragment")])
def test_transpose(run, M, N, bm, bn, via):
    prog, ref = lp.transpose_program(M, N, bm, bn, via=via)
    a = torch.randn(M, N, generator=torch.Generator().manual_seed(M + N))
    assert torch.equal(run(build(prog), a), ref(a))


def test_transpose_compiles_and_refuses_wrong_extents():
    assert build(lp.transpose_program(128, 256, 128, 128, "float16")[0]).cubin()
    with pytest.raises(tegula.TegulaCompileError, match=r"dst must have src's extents reversed, \(16, 32\)"):
        @T.prim_func
        def f(A: T.Tensor((32, 16), "float32")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((32, 16), "float32")
                d = T.alloc_shared((32, 16), "float32")
                T.transpose(s, d)
    with pytest.raises(tegula.TegulaCompileError, match="a local buffer"):
        @T.prim_func
        def g(A: T.Tensor((4, 4), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_local((4, 4), "float32")
                d = T.alloc_local((4, 4), "float32")
                T.transpose(s, d)


# ---------------------------------------------------------------- T.annotate_safe_value


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("M,N,bm,bn,pad,copy", [(100, 64, 32, 32, 7.5, False), (128, 128, 64, 64, -2.0, True),
                                                (70, 40, 32, 32, 0.0, False)])
def test_safe_value(run, M, N, bm, bn, pad, copy):
    prog, ref = lp.safe_value_program(M, N, bm, bn, pad, copy=copy)
    a = torch.randn(M, N, generator=torch.Generator().manual_seed(M))
    assert torch.equal(run(build(prog, pass_configs={"tl.disable_warp_specialized": True}), a), ref(a))


def test_safe_value_keeps_reads_masked_and_copies_off_the_copy_engine():
    prog, _ = lp.safe_value_program(256, 128, 64, 64, 10.0, copy=True, dtype="float16")
    src = build(prog).get_kernel_source()
    assert "cast<half_t>(10.0f)" in src and "tma_load" not in src
    assert "Vec<half_t, 8>" in src  # the in-bounds rows are still read 16 bytes at a time


def test_safe_value_mistakes():
    with pytest.raises(tegula.TegulaCompileError, match="keys must be global tensors"):
        @T.prim_func
        def f(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((8,), "float32")
                T.annotate_safe_value({s: 1.0})
    with pytest.raises(tegula.TegulaCompileError, match="must be a constant number"):
        @T.prim_func
        def g(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                T.annotate_safe_value({A: A[0]})


# ---------------------------------------------------------------- T.let, T.launch_thread


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("n", [256, 200])
def test_let(run, n):
    prog, ref = lp.let_program(n)
    a = torch.randint(-100, 100, (n,), dtype=torch.int32)
    assert torch.equal(run(build(prog), a), ref(a))


@pytest.mark.parametrize("n", [256, 300])
def test_launch_thread(n):
    prog, ref = lp.launch_thread_program(n)
    a = torch.randn(n)
    torch.testing.assert_close(tt.simulate(build(prog), a), ref(a))


def test_launch_thread_mistakes():
    for thread, extent, message in [("threadIdx.x", 64, "spans the block's 128 threads"),
                                    ("threadIdx.y", 2, "along it"), ("blockIdx.y", 1, "no blockIdx.y"),
                                    ("warp", 1, "thread must be")]:
        with pytest.raises(tegula.TegulaCompileError, match=message):
            @T.prim_func
            def f(A: T.Tensor((8,), "float32")):
                with T.Kernel(1, threads=128):
                    t = T.launch_thread(thread, extent)
                    A[0] = t


# ---------------------------------------------------------------- T.annotate_min_blocks_per_sm, get_kernel_source


def test_min_blocks_per_sm_is_the_launch_bounds_second_argument():
    prog, ref = lp.min_blocks_program(300, 3)
    k = build(prog)
    assert "__launch_bounds__(128, 3)" in k.get_kernel_source() and k.cubin()
    assert "min_blocks_per_sm 3" in k.get_ir()
    a = torch.randn(300)
    for run in RUNS:
        torch.testing.assert_close(run(k, a), ref(a))
    with pytest.raises(tegula.TegulaCompileError, match="min_blocks must be an int in 1..32"):
        lp.min_blocks_program(64, 0)


def test_get_kernel_source_of_a_jit_function_and_lower():
    @tegula.jit(out_idx=[1], target="sm_90a")
    def scaled(n, blocks):
        return lp.min_blocks_program(n, blocks)[0]

    assert "__launch_bounds__(128, 2)" in scaled.get_kernel_source(256, 2)
    assert scaled.get_kernel_source(256, blocks=2) is not None and len(scaled._kernels) == 1
    artifact = tegula.lower(lp.min_blocks_program(64, 1)[0], target="sm_90a")
    assert "__launch_bounds__(128, 1)" in artifact.kernel_source


def test_copy_takes_annotations():
    @T.prim_func
    def f(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((64, 64), "float32")
            T.copy(A, s, annotations={"prefer_instruction": "tma"})
            T.copy(s, B)

    a = torch.randn(64, 64)
    assert torch.equal(tt.reference(build(f), a), a)
    with pytest.raises(tegula.TegulaCompileError, match="annotations must be a dict"):
        @T.prim_func
        def g(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.copy(A, B, annotations="tma")


# ---------------------------------------------------------------- error kinds


def test_errors_tilelang_raises_as_value_or_assertion_errors_are_also_those():
    with pytest.raises(ValueError, match="exceeds maximum of float32") as info:
        @T.prim_func
        def f(A: T.Tensor((1,), "float32")):
            with T.Kernel(1):
                v = T.alloc_var(T.float32, init=1e300)
                A[0] = v
    assert isinstance(info.value, tegula.TegulaCompileError)
    with pytest.raises(AssertionError, match=r"1056 elements against 1024"):
        @T.prim_func
        def g(A: T.Tensor((1024,), "float32"), B: T.Tensor((32, 33), "float32")):
            with T.Kernel(1):
                T.copy(T.reshape(A, [32, 33]), B)


# ---------------------------------------------------------------- T.assume checked at launch


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_host_evaluable_assumptions_are_checked_at_the_call(run):
    prog, ref = lp.host_assumption_program(4)
    k = build(prog, out_idx=None)
    a = torch.zeros(40)
    run(k, a, 3)
    assert torch.equal(a, ref(40, 3))
    with pytest.raises(RuntimeError, match=r"Assume: N % 4 == 0 does not hold for this call \(N = 42\)") as info:
        run(k, torch.zeros(42), 3)
    assert isinstance(info.value, tt.SimulationError)  # for the interpreters, a finding like the others
    with pytest.raises(RuntimeError, match=r"Assume: scale > 0 does not hold for this call \(scale = 0\)"):
        run(k, torch.zeros(40), 0)


def test_assumptions_under_a_branch_stay_hints_and_programs_keep_them():
    """Only the top of the kernel body is checked: an assumption under a branch holds there
    only. A built program keeps its checks through save and load (the persistent index)."""
    N = T.dynamic("N")

    @T.prim_func
    def branch(A: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32):
            if N > 100:
                T.assume(N % 4 == 0)
            for i in T.Parallel(32):
                if i < N:
                    A[i] = 1.0

    tt.reference(build(branch, out_idx=None), torch.zeros(42))  # no error: the branch is not taken
    C = tegula.env.native()
    k = build(lp.host_assumption_program(4)[0], out_idx=None)
    saved = C.build_program(k._lowered_all, [], 0).save()
    assert b"N % 4 == 0" in saved and C.load_program(saved) is not None


# ---------------------------------------------------------------- int64 dynamic sizes


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("n", [1000, 1536])
def test_int64_dynamic_size_indexes_in_64_bits(run, n):
    k = build(lp.int64_fill_program(), out_idx=None)
    src = k.get_kernel_source()
    assert "long long n" in src and "(long long)bx * 512LL" in src  # the block offset cannot wrap
    assert k.cubin()
    x = torch.zeros(n, dtype=torch.bfloat16)
    run(k, x)
    assert torch.equal(x, torch.ones(n, dtype=torch.bfloat16))


def test_int32_dynamic_sizes_keep_32_bit_indexing():
    N = T.dynamic("N")

    @T.prim_func
    def fill32(x: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, 512), threads=128) as bx:
            for i in T.Parallel(512):
                x[bx * 512 + i] = 1.0

    src = build(fill32, out_idx=None).get_kernel_source()
    assert "int N" in src and "long long" not in src.split("{", 1)[1].split("x[")[0]
