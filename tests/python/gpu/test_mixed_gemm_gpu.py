"""Gemms on two instructions in one kernel on the GPU (sm_90a: wgmma and mma.sync, the
latter reading wgmma's panelled operand): the programs of tests/python/
mixed_gemm_programs.py against torch, ragged and aligned, outputs poisoned (the CPU side
in cpu/test_mixed_gemm.py)."""
import pytest
import torch

import tegula
import mixed_gemm_programs as mp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M,L,D", [(128, 80, 192), (128, 64, 128), (128, 96, 64), (128, 1000, 192)])
def test_two_paths_against_torch(M, L, D):
    prog, ref = mp.shared_operand_two_paths(M, L, D)
    k = tegula.compile(prog)
    g = torch.Generator().manual_seed(M + L + D)
    K = torch.randn(M, D, generator=g).half().cuda()
    Q = torch.randn(L, D, generator=g).half().cuda()
    P = torch.full((M, L), float("nan"), device="cuda")
    dQ = torch.full((L, D), float("nan"), device="cuda")
    k(K, Q, P, dQ)
    p, _ = ref(K.cpu(), Q.cpu())
    torch.testing.assert_close(P.double().cpu(), p, rtol=1e-3, atol=1e-3)
    # dQ from the kernel's own P: where float32 and float64 products round P to float16
    # differently the two differ by an ulp, which the second gemm would magnify.
    dq = P.double().cpu().to(torch.float16).double().T @ K.double().cpu()
    torch.testing.assert_close(dQ.double().cpu(), dq, rtol=1e-3, atol=1e-3)
