"""Dimensions a * n + b of a dynamic size n on the GPU, against torch, outputs allocated
from n; tensors that give no integer n, or two different ones, are a ValueError naming the
argument (the CPU side in cpu/test_affine_dims.py)."""
import pytest
import torch

import tegula
from affine_dim_programs import inputs, program

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m", [1, 37, 64, 1000])
def test_affine_dimensions(m):
    prog, ref = program()
    k = tegula.compile(prog, out_idx=[2])
    A, B = (t.cuda() for t in inputs(m, torch.Generator().manual_seed(m)))
    C = k(A, B)
    assert C.shape == (m,)
    torch.testing.assert_close(C, ref(A, B))


def test_a_dimension_with_no_integer_n_is_refused():
    prog, _ = program()
    k = tegula.compile(prog, out_idx=[2])
    with pytest.raises(ValueError, match="'A'.*not n \\* 4|A.*which is not"):
        k(torch.zeros(10, device="cuda"), torch.zeros(3, 8, device="cuda"))
    with pytest.raises(ValueError, match="'B'.*earlier argument gave 4"):
        k(torch.zeros(16, device="cuda"), torch.zeros(3, 8, device="cuda"))
