"""Kernels whose fragments do not fit the registers, rolled into loops by roll_loops, on
the GPU against torch in float64 (roll_loops_programs.py): TileLang's short-row softmax and
RMS norm written for rows of 1024 to 5120 elements, aligned and ragged, outputs poisoned
(the CPU side: cpu/test_roll_loops.py)."""
import re

import pytest
import torch

import roll_loops_programs as rp
import tegula

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore::tegula.RegisterPressureWarning")]


@pytest.mark.parametrize("M,N,block_M,threads", [(896, 2048, 32, 128), (1000, 5120, 32, 128), (77, 3000, 32, 256),
                                                 (512, 4096, 16, 128)])
def test_wide_softmax(M, N, block_M, threads):
    kernel = tegula.compile(rp.wide_softmax(M, N, block_M, threads))
    assert re.search(r"for \(int roll\d+ = ", kernel.get_kernel_source())
    x = torch.randn(M, N, device="cuda") * 3
    x[0, :5] = float("-inf")
    y = torch.full((M, N), float("nan"), device="cuda")
    kernel(x, y)
    torch.testing.assert_close(y.double(), rp.softmax_ref(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("M,N,block_M", [(896, 4096, 32), (333, 3000, 32), (64, 1024, 32)])
def test_wide_rms_norm(M, N, block_M):
    kernel = tegula.compile(rp.wide_rms_norm(M, N, block_M))
    assert re.search(r"for \(int roll\d+ = ", kernel.get_kernel_source())
    x, w = torch.randn(M, N, device="cuda"), torch.rand(N, device="cuda") + 0.5
    y = torch.full((M, N), float("nan"), device="cuda")
    kernel(x, w, y)
    torch.testing.assert_close(y.double(), rp.rms_norm_ref(x, w), rtol=1e-5, atol=1e-6)
