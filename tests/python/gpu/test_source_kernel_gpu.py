"""T.CUDASourceCodeKernel on the GPU against torch: the user's CUDA launched with the
prim_func's arguments (tensor pointers, scalars, then the T.dynamic sizes), alone and after
a kernel written in the language (CPU side: cpu/test_source_kernel.py)."""
import pytest
import torch

import source_kernel_programs as sp
import tegula

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [1, 128, 1000, 65537])
def test_axpby_matches_torch(n):
    kernel = tegula.compile(sp.axpby())
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    want = 1.5 * x + 2 * y
    kernel(x, y, 1.5)
    torch.testing.assert_close(y, want)


@pytest.mark.parametrize("rows,cols", [(1, 7), (64, 32), (333, 65)])
def test_language_kernel_then_source_kernel(rows, cols):
    kernel = tegula.compile(sp.scaled_row_sum(), out_idx=[1, 2])
    x = torch.randn(rows, cols, device="cuda")
    x2, s = kernel(x)
    torch.testing.assert_close(x2, 3 * x)
    torch.testing.assert_close(s, 6 * x.sum(dim=1), rtol=1e-5, atol=1e-4)
