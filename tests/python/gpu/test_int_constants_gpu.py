"""The extremes of every integer dtype (tests/python/int_constant_programs.py) written by a
kernel on the GPU: each element exactly the Python value, uint64's 2**64 - 1 included."""
import pytest
import torch

import tegula
from int_constant_programs import RANGES, extremes_program

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", sorted(RANGES))
def test_extremes_on_the_gpu(dtype):
    lo, hi = RANGES[dtype]
    kernel = tegula.compile(extremes_program(dtype))
    a = torch.zeros(6, dtype=getattr(torch, dtype), device="cuda")
    f = torch.zeros(2, dtype=torch.float64, device="cuda")
    kernel(a, f)
    torch.cuda.synchronize()
    assert [int(x) for x in a.cpu().tolist()] == [lo, hi, hi, lo, lo, hi]
    assert f.cpu().tolist() == [float(hi), float(lo)]
