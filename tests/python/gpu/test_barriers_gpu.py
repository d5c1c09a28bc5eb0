"""Named barriers of a run-time id on the GPU (barrier_programs.py): the halves of a block
each at its own barrier, and a barrier id from the block index, against torch; ragged and
aligned sizes, fresh inputs (the CPU side: cpu/test_barriers.py)."""
import pytest
import torch

import tegula
import barrier_programs as bp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [256, 600, 4096])
def test_halves(n):
    k = tegula.compile(bp.halves(n))
    X = torch.randn(n, device="cuda")
    Y = torch.zeros(n, device="cuda")
    k(X, Y)
    torch.testing.assert_close(Y.double(), bp.expected(X, 128), rtol=0, atol=0)


@pytest.mark.parametrize("n", [384, 300, 10000])
def test_block_indexed_barrier(n):
    k = tegula.compile(bp.per_block(n))
    X = torch.randn(n, device="cuda")
    Y = torch.zeros(n, device="cuda")
    k(X, Y)
    torch.testing.assert_close(Y.double(), bp.expected(X, 128), rtol=0, atol=0)
