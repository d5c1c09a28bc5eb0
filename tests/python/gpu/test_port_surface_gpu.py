"""The porting surface on the GPU against torch: T.atomic_add with every memory_order,
T.Fragment user layouts, T.alloc_local kernels, TileLang's MLA combine, and the profiler's
three do_bench backends on one kernel."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import port_kernels as pk  # noqa: E402

from tegula import profiler  # noqa: E402

pytestmark = pytest.mark.gpu

ORDERS = [None, "relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst"]


def _randn(shape, seed, dtype=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def _near(out, ref, tol):
    """Whether out matches ref within tol, with no NaN left (an element left unwritten)."""
    out, ref = out.double(), ref.double()
    return not torch.isnan(out).any() and torch.allclose(out, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("M,N", [(256, 64), (1000, 72)])
def test_atomic_add_every_memory_order(order, M, N):
    x = _randn((M, N), seed=M)
    s0 = _randn((N,), seed=N)
    s = s0.clone()
    pk.column_sums(M, N, memory_order=order)(x, s)
    assert _near(s, s0.double() + x.double().sum(0), 1e-3)


@pytest.mark.parametrize("order", ["release", "seq_cst"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.float64])
def test_atomic_add_memory_order_types(order, dtype):
    M, N = 16, 32  # few adds into each element, so 16-bit rounding stays small
    if dtype == torch.int32:
        x = torch.randint(-5, 6, (M, N), device="cuda", dtype=dtype)
    else:
        x = _randn((M, N), seed=1, dtype=dtype) * 0.125
    s = torch.zeros(N, device="cuda", dtype=dtype)
    pk.column_sums(M, N, memory_order=order, dtype=str(dtype).replace("torch.", ""))(x, s)
    tol = {torch.float16: 1e-2, torch.bfloat16: 6e-2}.get(dtype, 1e-9)
    assert _near(s, x.double().sum(0), tol)


@pytest.mark.parametrize("K,N,threads", [(4, 128, 128), (3, 64, 128)])
def test_fragment_columns_in_threads(K, N, threads):
    x = _randn((K, N), seed=K)
    y, s = pk.column_fragment(K, N, threads=threads)(x)
    assert _near(y, x.double() * 2 + 1, 1e-6)
    assert _near(s, (x.double() * 2 + 1).sum(0), 1e-5)


def test_fragment_bit_linear_layout():
    x = _randn((16, 16), seed=16)
    assert _near(pk.mma_like_fragment()(x), (x.double() ** 2).amax(1, keepdim=True).expand(16, 16), 1e-6)


def test_fragment_on_part_of_the_threads_and_replicated():
    x = _randn((64,), seed=64)
    y, z = pk.partial_fragment()(x)
    assert _near(y, x.double() + 1, 1e-6)
    assert _near(z, x.double()[0::2] * 3, 1e-6)


def test_local_gemvs():
    a, b = _randn((96,), seed=2), _randn((256, 96), seed=3)
    assert _near(pk.gemv_local(256, 96)(a, b), b.double() @ a.double(), 1e-4)
    a, b = _randn((64,), seed=4), _randn((64, 64), seed=5)
    assert _near(pk.splitk_gemv_local(64, 64)(a, b), b.double() @ a.double(), 1e-4)


@pytest.mark.parametrize("M", [64, 100])
def test_local_rows(M):
    x = _randn((M, 12), seed=M)
    xd = x.double()
    assert _near(pk.local_rows(M, 12)(x), xd.flip(1) * 2 + xd.sum(1, keepdim=True) + 1, 1e-4)


def test_mla_combine():
    glse = _randn((2, 16, 7), seed=7) * 4
    partial = _randn((2, 16, 7, 128), seed=8)
    assert _near(pk.mla_combine(2, 16, 7, 128)(glse, partial), pk.mla_combine_reference(glse, partial), 1e-4)


def test_do_bench_backends_agree():
    kernel = pk.local_rows(1 << 14, 64)
    prof = kernel.get_profiler()
    times = {b: prof.do_bench(backend=b, n_warmup=5, n_repeat=50) for b in profiler.BACKENDS}
    assert all(t > 0 for t in times.values()), times
    # cupti counts the kernel alone: never much more than the event pair around it, and
    # the graph's per-launch time is within launch overhead of the event time.
    assert times["cupti"] <= times["event"] * 1.5 + 0.01, times
    assert times["cudagraph"] <= times["event"] * 1.5 + 0.01, times
    assert times["event"] <= 20 * max(times["cupti"], times["cudagraph"]) + 0.05, times
    quantiles = prof.do_bench(backend="cudagraph", quantiles=[0.2, 0.8], n_warmup=2, n_repeat=10)
    assert len(quantiles) == 2 and 0 < quantiles[0] <= quantiles[1]
