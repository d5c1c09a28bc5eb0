"""Tile code under a branch on the thread index, on the GPU (the programs of
tests/python/guard_programs.py, the CPU side in tests/python/cpu/test_thread_guards.py):
fresh random inputs, outputs poisoned, aligned and ragged shapes."""
import pytest
import torch

import guard_programs as gp

pytestmark = pytest.mark.gpu


def target():
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if major == 9 else f"sm_{major}{minor}"


@pytest.mark.parametrize("how", gp.COPY_GUARDS)
@pytest.mark.parametrize("shape", [(1024, 1024), (1000, 776)], ids=["aligned", "ragged"])
def test_copy_under_guard(how, shape):
    kernel = gp.copy_guarded(target(), how)(*shape)
    a = torch.randn(*shape, device="cuda").half()
    assert torch.equal(kernel(a), a)


@pytest.mark.parametrize("shape", [(1024, 512), (1000, 520)], ids=["aligned", "ragged"])
def test_dependent_steps_in_one_scope(shape):
    kernel = gp.chain_in_scope(target())(*shape)
    a = torch.randn(*shape, device="cuda")
    full = shape[0] // 64 * 64
    out = kernel(a)
    expected = gp.chain_expected(a[:full].cpu())
    assert torch.equal(out[:full].cpu(), expected)


def test_gemm_and_reduction_under_guard():
    kernel = gp.gemm_reduce_guarded(target())()
    a = torch.randn(64, 32, device="cuda").half()
    b = torch.randn(32, 64, device="cuda").half()
    c, r = kernel(a, b)
    expected = a.double() @ b.double()
    torch.testing.assert_close(c.double(), expected, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(r.double(), expected.sum(1), rtol=1e-4, atol=1e-2)


def test_uniform_branch_gets_its_barrier_inside():
    kernel = gp.uniform_branch_chain(target())(1024)
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.full((1024, 1024), float("nan"), device="cuda")
    expected = gp.uniform_expected(a.cpu(), b.cpu())
    kernel(a, b)
    torch.testing.assert_close(b.cpu(), expected, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("stages", [0, 1, 2, 3])
@pytest.mark.parametrize("shape", [(1024, 512, 1024), (1000, 520, 1000)], ids=["aligned", "ragged"])
def test_masked_k_steps_get_their_barriers(stages, shape):
    M, N, K = shape
    kernel = gp.masked_block_gemm(target(), stages)(M, N, K)
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    mask = (torch.rand((M + 63) // 64, (K + 31) // 32, device="cuda") < 0.5).to(torch.int8)
    mask[:, 0] = 1
    expected = gp.masked_block_gemm_expected(a.cpu(), b.cpu(), mask.cpu())
    torch.testing.assert_close(kernel(a, b, mask).cpu().double(), expected, rtol=1e-3, atol=1e-2)
