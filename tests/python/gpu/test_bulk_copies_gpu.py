"""Attention-backward-shaped bulk copies (bulk_copy_programs.py) on the GPU against torch:
a 1-D log-sum-exp row through the copy engine, a 32-row gemm on mma.sync beside the wgmma
ones, ragged and aligned; the CPU side in cpu/test_bulk_copies.py."""
import pytest
import torch

import bulk_copy_programs as bp
import tegula

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("B,N,stages", [(1, 64, 2), (2, 96, 2), (4, 1024, 2), (3, 512, 3)])
def test_backward_like_against_torch(B, N, stages):
    prog, ref = bp.backward_like(B, N, stages=stages)
    k = tegula.compile(prog)
    Q, K, Lse = bp.inputs(B, N, 64, B * N)
    dQ = torch.zeros(B, N, 64, device="cuda")
    dK = torch.full((B, N, 64), float("nan"), device="cuda")
    k(Q.cuda(), K.cuda(), Lse.cuda(), dQ, dK)
    want_dq, want_dk = ref(Q, K, Lse)
    torch.testing.assert_close(dK.double().cpu(), want_dk, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dQ.double().cpu(), want_dq, rtol=2e-2, atol=2e-2)
