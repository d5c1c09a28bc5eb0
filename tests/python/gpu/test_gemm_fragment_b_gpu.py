"""T.gemm with B in a fragment on the GPU (tests/python/gemm_fragment_b_programs.py; the
CPU side in cpu/test_gemm_fragment_b.py), against torch in float64 with fresh inputs, K
ragged and aligned."""
import pytest
import torch

import tegula
import gemm_fragment_b_programs as gp

pytestmark = pytest.mark.gpu

# (M, N, K, block_K, dtype, transpose_B, a_in_fragment)
CASES = [
    (64, 64, 128, 32, "float16", False, False),
    (64, 64, 100, 32, "bfloat16", True, False),
    (16, 64, 80, 16, "float32", False, False),
    (32, 32, 40, 16, "float32", True, False),
    (64, 32, 96, 32, "float16", False, True),
    (128, 128, 512, 64, "float16", False, False),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[4]}-tB{int(c[5])}-rA{int(c[6])}-{c[2]}" for c in CASES])
def test_agrees_with_torch(case):
    M, N, K, block_K, dtype, tb, ra = case
    prog, ref = gp.accumulate(M, N, K, block_K, dtype, tb, ra)
    k = tegula.compile(prog, out_idx=-1)
    A = torch.randn(M, K, device="cuda").to(getattr(torch, dtype))
    B = torch.randn(*((N, K) if tb else (K, N)), device="cuda").to(getattr(torch, dtype))
    torch.testing.assert_close(k(A, B).double(), ref(A, B), rtol=1e-4, atol=1e-3)
