"""Explicit mbarriers and manual warp specialisation on the GPU (sm_90a) against torch:
the producer/consumer programs of mbarrier_programs.py (cpu/test_mbarriers.py checks their
lowering), fresh random inputs each run, the output poisoned first."""
import os
import sys

import pytest
import torch

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import mbarrier_programs as bp  # noqa: E402

pytestmark = pytest.mark.gpu
POISON = 12345.0


def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


needs_hopper = pytest.mark.skipif(not _hopper(), reason="mbarrier programs need sm_90")


@needs_hopper
@pytest.mark.parametrize("M,N,K", [(64, 64, 128), (64, 128, 256), (128, 64, 96)])
def test_tma_copy_and_wgmma_gemm_ring(M, N, K):
    k = tegula.compile(bp.tma_wgmma_program(M, N, K))
    a, b = bp.inputs(M, N, K, device="cuda")
    c = torch.full((M, N), POISON, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c, bp.ref(a, b), rtol=1e-3, atol=1e-3)


@needs_hopper
@pytest.mark.parametrize("M,N,K", [(64, 64, 128), (64, 128, 256), (128, 64, 96)])
def test_ptx_cp_async_and_noinc_arrival_ring(M, N, K):
    k = tegula.compile(bp.cp_async_program(M, N, K))
    a, b = bp.inputs(M, N, K, transpose_B=True, device="cuda")
    c = torch.full((M, N), POISON, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c, bp.ref(a, b, transpose_B=True), rtol=1e-3, atol=1e-3)


@needs_hopper
@pytest.mark.parametrize("M,N,K", [(64, 64, 128), (128, 64, 96)])
def test_ptx_cp_async_ring_with_one_producer_thread(M, N, K):
    k = tegula.compile(bp.cp_async_single_program(M, N, K))
    a, b = bp.inputs(M, N, K, transpose_B=True, device="cuda")
    c = torch.full((M, N), POISON, device="cuda")
    k(a, b, c)
    torch.testing.assert_close(c, bp.ref(a, b, transpose_B=True), rtol=1e-3, atol=1e-3)
