"""TileLang's T.tvm_warp_shuffle / _up / _down on the GPU against torch: fresh random
inputs, aligned and ragged sizes, outputs poisoned; the programs are
warp_shuffle_programs.py's (cpu/test_warp_shuffle.py checks them in the simulator)."""
import os
import sys

import pytest
import torch

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import warp_shuffle_programs as wp  # noqa: E402

pytestmark = pytest.mark.gpu
POISON = 12345


def _x(N, dtype):
    if dtype == "int32":
        return torch.randint(-1000, 1000, (N,), dtype=torch.int32, device="cuda")
    return torch.randn(N, device="cuda").to(getattr(torch, dtype))


@pytest.mark.parametrize("N", [256, 200, 37, 4096 + 5])
@pytest.mark.parametrize("width,up,down", [(32, 1, 2), (16, 3, 5), (8, 0, 7), (4, 2, 1), (1, 0, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_moves(N, width, up, down, dtype):
    k = tegula.compile(wp.moves_program(N, width, dtype, up, down))
    x = _x(N, dtype)
    y = torch.full((3, N), POISON, device="cuda").to(x.dtype)
    k(x, y)
    assert torch.equal(y, wp.expected_moves(x, N, width, up, down))


@pytest.mark.parametrize("N", [256, 200, 37, 4096 + 5])
@pytest.mark.parametrize("width", [2, 8, 32])
def test_butterfly_is_a_hadamard_transform(N, width):
    k = tegula.compile(wp.butterfly_program(N, width))
    x = torch.randn(N, device="cuda")
    y = torch.full((N,), float(POISON), device="cuda")
    k(x, y)
    torch.testing.assert_close(y.double(), wp.expected_butterfly(x, N, width), rtol=1e-5, atol=1e-5)
