"""Each language feature, run on the GPU against torch on fresh random inputs."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lang_kernels as lk  # noqa: E402

pytestmark = pytest.mark.gpu


def _randn(shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def _rel(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the output (an element left unwritten?)"
    return ((out - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("M,N", [(256, 64), (1000, 72), (7, 8)])
def test_atomic_add_column_sums(M, N):
    x = _randn((M, N), seed=M)
    s0 = _randn((N,), seed=N)  # a random start: the kernel adds to it
    s = s0.clone()
    lk.column_sums(M, N)(x, s)
    assert _rel(s, s0.double() + x.double().sum(0)) < 1e-5


@pytest.mark.parametrize("M,N", [(64, 100), (5, 1)])
def test_serial_loop_alloc_var_and_branch(M, N):
    x = _randn((M, N), seed=3)
    y = torch.full((M,), float("nan"), device="cuda")
    lk.serial_row_sums(M, N)(x, y)
    sign = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(M)], device="cuda", dtype=torch.float64)
    assert _rel(y, x.double().sum(1) * sign) < 1e-6


@pytest.mark.parametrize("M,N,dtype", [(128, 256, "float32"), (100, 200, "float32"), (33, 72, "float16")])
def test_math_intrinsics(M, N, dtype):
    tdt = getattr(torch, dtype)
    x = _randn((M, N), tdt, seed=5)
    y = lk.math_mix(M, N, dtype)(x)
    tol = 1e-5 if dtype == "float32" else 2e-3
    assert _rel(y, lk.math_mix_reference(x).to(tdt)) < tol


@pytest.mark.parametrize("M,N", [(128, 128), (130, 70)])
def test_shared_fragment_fill_clear_unroll(M, N):
    x = _randn((M, N), torch.float16, seed=7)
    y = lk.staged_copy(M, N)(x)
    assert _rel(y, 2 * x.double() + 1) < 2e-3


@pytest.mark.parametrize("B,M,N", [(2, 3, 64), (3, 5, 40)])
def test_three_dimensional_grid_and_reductions(B, M, N):
    x = _randn((B, M, N), seed=11)
    out = lk.batched_row_stats(B, M, N)(x)
    ref = torch.stack([x.amin(-1), x.abs().amax(-1), 100.0 + x.abs().sum(-1)], dim=-1)
    assert _rel(out, ref) < 1e-6


@pytest.mark.parametrize("n", [1000, 4096, 1])
def test_scalar_argument_and_dynamic_length(n):
    k = lk.scaled_add(256)
    x, y = _randn((n,), seed=1), _randn((n,), seed=2)
    z = k(x, y, 1.5)
    assert _rel(z, 1.5 * x.double() + y.double()) < 1e-6


def test_profiler_checks_and_times_a_kernel():
    import tegula

    k = lk.math_mix(256, 512, "float32")
    prof = k.get_profiler(tensor_supply_type=tegula.TensorSupplyType.Randn)
    prof.assert_allclose(lambda x: lk.math_mix_reference(x), atol=1e-4, rtol=1e-4)
    with pytest.raises(AssertionError):
        prof.assert_allclose(lambda x: lk.math_mix_reference(x) + 1.0, atol=1e-4, rtol=1e-4)
    ms = prof.do_bench()
    assert 0 < ms < 100


def test_bad_arguments_name_the_argument():
    k = lk.scaled_add(256)
    x = _randn((100,), seed=1)
    with pytest.raises(ValueError, match="argument 'Y'.*float32"):
        k(x, x.half(), 1.0)
    with pytest.raises(ValueError, match="argument 'X'.*CUDA"):
        k(x.cpu(), x, 1.0)
    with pytest.raises(ValueError, match="argument 'Y'.*contiguous"):
        k(x, torch.randn(200, device="cuda")[::2], 1.0)
    with pytest.raises(ValueError, match="expected 3 argument"):
        k(x, x)


def test_kernel_runs_on_the_current_stream():
    k = lk.scaled_add(256)
    x, y = _randn((1 << 20,), seed=1), _randn((1 << 20,), seed=2)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        z = k(x, y, 2.0)
    s.synchronize()
    assert _rel(z, 2 * x.double() + y.double()) < 1e-6
