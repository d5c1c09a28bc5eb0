"""The programs of tests/python/cpu/test_intrinsics_2.py run on the GPU, against torch:
T.Select / T.sigmoid / T.tanh / T.clamp / T.align_up / T.__ldg / T.assume, reduce_max /
reduce_min / reduce_absmax with nan_propagate, T.any_of / T.all_of, T.warp_reduce_*,
warp votes and matches, T.__fns, named barriers and T.pdl_trigger / T.pdl_sync."""
import importlib.util
import math
import os

import pytest
import torch

pytestmark = pytest.mark.gpu

_spec = importlib.util.spec_from_file_location(
    "intrinsics_2_programs", os.path.join(os.path.dirname(__file__), "..", "cpu", "test_intrinsics_2.py"))
progs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(progs)


def test_scalar_names():
    N = 1000
    k = progs.scalar_names(N, "auto")
    x = torch.randn(N, device="cuda") * 2
    y = k(x)
    xd = x.double()
    j = torch.arange(N, dtype=torch.float64, device="cuda")
    want = torch.stack([torch.where(xd > 0, xd, 0.5 * xd), torch.sigmoid(xd), torch.tanh(xd), xd.clamp(-0.5, 0.25),
                        xd.clamp(max=0.0) + xd.clamp(min=1.0), torch.ceil(j / 16) * 16])
    torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
@pytest.mark.parametrize("nan_propagate", [None, True, False])
@pytest.mark.parametrize("clear", [True, False])
def test_reduce_nan_propagate(dtype, kind, nan_propagate, clear):
    tdt = getattr(torch, dtype)
    a = torch.randn(4, 64).to(tdt)
    a[0, 7] = float("nan")
    a[2, :] = float("nan")
    k = progs.reduce_program(kind, dtype, nan_propagate, clear, "auto")
    out = k(a.cuda()).cpu()
    # The simulator's result is checked against torch in the CPU test; the GPU must match it.
    import tegula.testing as tt
    want = tt.simulate(progs.reduce_program(kind, dtype, nan_propagate, clear, "sm_80"), a)
    torch.testing.assert_close(out.double(), want.double(), equal_nan=True, rtol=0, atol=0)
    assert math.isnan(out[0].item()) == (nan_propagate is not False)


def test_any_of_all_of():
    k = progs.any_all_program("auto")
    mask = torch.rand(16, 8, device="cuda") < 0.2
    mask[3] = True
    mask[4] = False
    v = (torch.rand(16, 8, device="cuda") < 0.7).int() * torch.randint(1, 9, (16, 8), dtype=torch.int32, device="cuda")
    v[5] = 0
    want = torch.stack([mask.any(1), mask.all(1), (v != 0).any(1), (v[:, 2:6] != 0).all(1)], dim=1).int()
    assert torch.equal(k(mask, v), want)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_warp_reduce(dtype):
    threads = 64
    k = progs.warp_program(dtype, threads, "auto")
    if dtype == "float32":
        x = torch.randn(threads, device="cuda")
    else:
        x = torch.randint(0, 100, (threads,), dtype=torch.int32, device="cuda")
    out = k(x)
    for w in range(threads // 32):
        part = x[32 * w:32 * w + 32]
        seg = slice(32 * w, 32 * w + 32)
        if dtype == "float32":
            torch.testing.assert_close(out[0, seg], progs.butterfly_sum(part.cpu()).cuda(), rtol=1e-6, atol=1e-5)
        else:
            assert torch.all(out[0, seg] == part.sum())
            a, o = part[0].item(), part[0].item()
            for v in part.tolist():
                a, o = a & v, o | v
            assert torch.all(out[3, seg] == a) and torch.all(out[4, seg] == o)
        assert torch.all(out[1, seg] == part.max()) and torch.all(out[2, seg] == part.min())


def test_warp_votes():
    k = progs.vote_program("auto")
    x = torch.randint(-3, 8, (64,), dtype=torch.int32, device="cuda")
    x[32:64] = torch.randint(1, 8, (32,), dtype=torch.int32, device="cuda")
    out = k(x).cpu()
    x = x.cpu()
    for w in range(2):
        part = x[32 * w:32 * w + 32]
        seg = slice(32 * w, 32 * w + 32)
        bits = sum(1 << l for l in range(32) if part[l] > 0)
        nonzero = sum(1 << l for l in range(32) if part[l] != 0)
        assert torch.all((out[0, seg] != 0) == bool((part > 0).any()))
        assert torch.all((out[1, seg] != 0) == bool((part > 0).all()))
        assert torch.all(out[2, 32 * w:32 * w + 16] == bits & 0xFFFF)
        assert torch.all(out[2, 32 * w + 16:32 * w + 32] == 7)
        assert torch.all(out[3, seg] == nonzero)
        assert torch.all(out[4, seg] == 0xFFFFFFFF)
        assert torch.all((out[5, seg] != 0) == bool((part > 5).any()))


@pytest.mark.parametrize("dtype", ["int32", "float32", "int64", "float64"])
def test_warp_match_and_fns(dtype):
    k = progs.match_program("auto", dtype)
    x = torch.randint(0, 3, (64,)).to(getattr(torch, dtype))
    x[32:64] = 2
    torch.testing.assert_close(k(x.cuda()).cpu(), progs.expected_matches(x), rtol=0, atol=0)


def test_named_barriers_and_pdl():
    k = progs.barrier_program("auto")
    x = torch.randn(128, device="cuda")
    for _ in range(3):  # back to back on one stream: pdl_sync waits for nothing wrong
        torch.testing.assert_close(k(x), x.flip(0) * 2, rtol=0, atol=0)


@pytest.mark.parametrize("generator", ["curandStatePhilox4_32_10_t", "curandStateXORWOW_t"])
def test_random_numbers_are_curands_philox(generator):
    M, seed = 300, 1234
    k = progs.rand_program(M, seed, generator, "auto")
    A = torch.empty(M, 6, dtype=torch.uint32, device="cuda")
    U = k(A)
    want_a, want_u = progs.expected_draws(M, seed)
    assert torch.equal(A.cpu().to(torch.int64), want_a)
    uniform, normal = [0, 2, 4, 5], [1, 3]
    torch.testing.assert_close(U.cpu().double()[:, uniform], want_u[:, uniform], rtol=1e-6, atol=0)
    # __sincosf is an approximation (a few 1e-6 of the angle's sine), scaled by up to ~6.7.
    torch.testing.assert_close(U.cpu().double()[:, normal], want_u[:, normal], rtol=1e-4, atol=1e-4)


def test_random_numbers_distribution():
    import tegula
    import tegula.language as T

    @tegula.jit(out_idx=[-1])
    def program(N):
        @T.prim_func
        def f(U: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 256), threads=256) as bx:
                T.rng_init(7)
                for i in T.Parallel(256):
                    U[bx * 256 + i] = T.rng_rand_float()
                    Z[bx * 256 + i] = T.rng_rand_float(dist="normal")
        return f

    N = 1 << 20
    U = torch.empty(N, device="cuda")
    Z = program(N)(U)
    assert U.min() > 0 and U.max() <= 1 and abs(U.mean().item() - 0.5) < 2e-3
    assert abs(Z.mean().item()) < 5e-3 and abs(Z.std().item() - 1) < 5e-3


def test_assume():
    k = progs.assume_program("auto", True)
    a, b = torch.randn(50, device="cuda"), torch.randn(50, device="cuda")
    want_a, want_b = a.clone(), b.clone()
    want_a[3:18] = 0
    want_b[3] = 1
    k(a, b, 3, 17)
    assert torch.equal(a, want_a) and torch.equal(b, want_b)


def test_shuffles_sync_warp_ffs():
    k = progs.shuffle_program("auto")
    x = torch.randn(64).half()
    y = k(x.cuda()).cpu()
    torch.testing.assert_close(y.double(), progs.expected_shuffles(x), rtol=0, atol=0)


def test_block_votes_and_thread_index_helpers():
    k = progs.block_vote_program("auto")
    x = torch.randint(-10, 6, (256,), dtype=torch.int32)
    assert torch.equal(k(x.cuda()).cpu(), progs.expected_block_votes(x))


@pytest.mark.parametrize("extent,threads", [(64, 256), (0, 128), (32, 96)])
def test_shuffle_elect_picks_the_first_thread_of_each_group(extent, threads):
    import tegula
    from thread_index_programs import leaders_program

    out = tegula.compile(leaders_program(extent, threads), out_idx=[0])().cpu()
    idx = torch.arange(threads)
    assert torch.equal(out, ((idx == 0) if extent == 0 else (idx % extent == 0)).to(torch.int32))


def test_thread_binding_is_the_blocks_thread_index():
    import tegula
    from thread_index_programs import mark_program

    out = tegula.compile(mark_program(), out_idx=[0])().cpu()
    assert torch.equal(out, torch.arange(128, dtype=torch.int32) * 2)
