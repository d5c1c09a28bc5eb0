"""The programs of tests/python/refusal_programs.py that compile, run on the GPU against
torch: the attention tile whose P·V wgmma needs one block a SM, bool reductions of every
kind, and a 2-D local array (row-major since it was indexed by its first index alone)."""
import pytest
import torch

import tegula
import refusal_programs as rp
from helpers import assert_close_rel

pytestmark = pytest.mark.gpu


def test_attention_tile_with_a_wide_pv_gemm():
    kernel = tegula.compile(rp.attention_program(200, 144, 256, 64, 16, 128), out_idx=[3])
    q, k, v = (torch.randn(2, 200 if i == 0 else 144, 256, device="cuda").half() for i in range(3))
    assert_close_rel(kernel(q, k, v), rp.attention_reference(q, k, v), 3e-3)


@pytest.mark.parametrize("kind", rp.REDUCE_KINDS)
def test_bool_reductions(kind):
    kernel = tegula.compile(rp.bool_reduce_program(kind), out_idx=[1])
    x = torch.rand(16, 32, device="cuda") < 0.08
    x[3], x[4] = True, False
    assert kernel(x).cpu().tolist() == rp.bool_reduce_expected(kind, x).cpu().tolist()


def test_local_array_of_two_dimensions():
    kernel = tegula.compile(rp.local_2d_program(4, 8), out_idx=[1])
    x = torch.randn(64, 8, device="cuda")
    assert_close_rel(kernel(x), rp.local_2d_expected(x, 4), 1e-6)
