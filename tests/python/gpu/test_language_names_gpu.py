"""TileLang names of the language on the GPU (tests/python/language_names_programs.py;
the CPU side in cpu/test_language_names.py): against torch, fresh inputs, ragged and
aligned sizes, outputs poisoned."""
import pytest
import torch

import tegula
import language_names_programs as lp

pytestmark = pytest.mark.gpu


def poisoned_call(kernel, *inputs, out_shape, dtype):
    out = torch.full(out_shape, float("nan") if dtype.is_floating_point else -7, dtype=dtype, device="cuda")
    kernel(*inputs, out)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int32"])
@pytest.mark.parametrize("n", [100, 256])
def test_float_tests(dtype, n):
    prog, ref = lp.float_tests_program(n, dtype)
    x = lp.special_values((torch.randn(n, device="cuda") * 3).to(getattr(torch, dtype)))
    out = poisoned_call(tegula.compile(prog), x, out_shape=(n, 3), dtype=torch.int32)
    assert torch.equal(out, ref(x))


@pytest.mark.parametrize("M,N,bm,bn,via", [(128, 128, 64, 64, "shared"), (256, 256, 128, 128, "shared"),
                                           (100, 70, 32, 32, "shared"), (64, 64, 32, 32, "fragment")])
def test_transpose(M, N, bm, bn, via):
    prog, ref = lp.transpose_program(M, N, bm, bn, via=via)
    a = torch.randn(M, N, device="cuda")
    out = poisoned_call(tegula.compile(prog), a, out_shape=(N, M), dtype=torch.float32)
    assert torch.equal(out, ref(a))


@pytest.mark.parametrize("M,N,bm,bn,pad,copy", [(1024, 1024, 128, 128, 10.0, False), (100, 64, 32, 32, 7.5, False),
                                                (128, 128, 64, 64, -2.0, True), (70, 40, 32, 32, 0.0, True)])
def test_safe_value(M, N, bm, bn, pad, copy):
    prog, ref = lp.safe_value_program(M, N, bm, bn, pad, copy=copy)
    a = torch.randn(M, N, device="cuda")
    out = poisoned_call(tegula.compile(prog), a, out_shape=(M, N), dtype=torch.float32)
    assert torch.equal(out, ref(a))


@pytest.mark.parametrize("n", [256, 200])
def test_let(n):
    prog, ref = lp.let_program(n)
    a = torch.randint(-100, 100, (n,), dtype=torch.int32, device="cuda")
    out = poisoned_call(tegula.compile(prog), a, out_shape=(n,), dtype=torch.int32)
    assert torch.equal(out.cpu(), ref(a.cpu()))


@pytest.mark.parametrize("n", [256, 300])
def test_launch_thread(n):
    prog, ref = lp.launch_thread_program(n)
    a = torch.randn(n, device="cuda")
    out = poisoned_call(tegula.compile(prog), a, out_shape=(n,), dtype=torch.float32)
    torch.testing.assert_close(out, ref(a))


@pytest.mark.parametrize("blocks", [1, 2, 4])
def test_min_blocks_per_sm(blocks):
    prog, ref = lp.min_blocks_program(1000, blocks)
    a = torch.randn(1000, device="cuda")
    out = poisoned_call(tegula.compile(prog), a, out_shape=(1000,), dtype=torch.float32)
    torch.testing.assert_close(out, ref(a))


def test_host_evaluable_assumptions_are_checked_at_launch():
    prog, ref = lp.host_assumption_program(4)
    k = tegula.compile(prog)
    a = torch.full((40,), float("nan"), device="cuda")
    k(a, 3)
    torch.testing.assert_close(a.cpu(), ref(40, 3))
    b = torch.full((42,), -1.0, device="cuda")
    # The launcher's own error type (a RuntimeError), not an internal error.
    with pytest.raises(tegula.env.native().AssumptionError,
                       match=r"Assume: N % 4 == 0 does not hold for this call \(N = 42\)"):
        k(b, 3)
    assert (b == -1).all()  # nothing launched
    with pytest.raises(RuntimeError, match=r"Assume: scale > 0"):
        k(a, 0)


def test_run_once_runs_on_generated_inputs():
    """TileLang's `kernel.run_once()` (test_tilelang_language_alias): one run on the
    profiler's inputs, returning the output; with a function, that function's result."""
    prog, _ = lp.min_blocks_program(256, 1)
    k = tegula.compile(prog, out_idx=[1])
    out = k.run_once()
    assert out.shape == (256,) and out.is_cuda and torch.isfinite(out).all()
    assert k.run_once(lambda a: a.shape) == (256,)


@pytest.mark.parametrize("n,dims", [(256, (32, 4, 1)), (1000, (16, 2, 2)), (64, (8, 1, 8)), (5000, (128, 8, 1))])
def test_thread_block_of_several_dimensions(n, dims):
    prog, ref = lp.thread_block_program(n, dims)
    a = torch.randn(n, device="cuda")
    out = poisoned_call(tegula.compile(prog), a, out_shape=(n,), dtype=torch.float32)
    assert torch.equal(out, ref(a))


@pytest.mark.parametrize("n", [256, 3000])
def test_tuple_swap_assert_and_shifts(n):
    # Only assertions that hold: a failing one stops the kernel and poisons the context.
    prog, ref = lp.ordered_pairs_program(n)
    x = torch.randint(-1000, 1000, (n,), dtype=torch.int32, device="cuda")
    y, z = tegula.compile(prog, out_idx=[1, 2])(x)
    want_y, want_z = ref(x)
    assert torch.equal(y, want_y) and torch.equal(z, want_z)
