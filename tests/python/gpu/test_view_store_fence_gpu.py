"""The GPU side of cpu/test_view_store_fence.py: a wgmma operand written through views of
another dtype, against torch, the output poisoned."""
import pytest
import torch

import tegula
import view_fence_programs as vp

pytestmark = pytest.mark.gpu


def test_view_store_gemm():
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the fence is wgmma's (sm_90a)")
    k = tegula.compile(vp.view_store_gemm())
    a, b = torch.randn(64, 64, device="cuda").half(), torch.randn(64, 64, device="cuda").half()
    c = torch.full((64, 64), float("nan"), device="cuda")
    k(a.view(torch.int32).view(torch.uint32), b.view(torch.int32).view(torch.uint32), c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-2)
