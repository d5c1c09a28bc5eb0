"""A kernel's gemms choose their instruction per group on sm_90a: those that fit a
warpgroup run on wgmma while one that does not (a 32-row dQ tile) runs on mma.sync,
reading a shared operand that wgmma keeps in 128-byte panels. On the CPU: the generated
source names both paths (the mma.sync one with the operand's panel rows), and the
reference and the simulator agree with torch, ragged and aligned."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import mixed_gemm_programs as mp  # noqa: E402

CASES = [(128, 80, 192), (128, 64, 128), (128, 96, 64)]


def _gemm_calls(kernel):
    return re.findall(r"tegula::(wgmma_ss|gemm_ss)<([^(]*)>\(", kernel.get_kernel_source())


@pytest.mark.parametrize("M,L,D", CASES)
def test_each_gemm_takes_the_instruction_it_fits(M, L, D):
    k = tegula.compile(mp.shared_operand_two_paths(M, L, D)[0], target="sm_90a")
    calls = dict(_gemm_calls(k))
    assert set(calls) == {"wgmma_ss", "gemm_ss"}
    args = [a.strip() for a in calls["gemm_ss"].split(",")]
    # K's shared tile is B of the mma.sync gemm; wgmma stores it in panels when a row is
    # wider than 128 bytes, and the mma.sync gemm is then told its 128 stored rows (after
    # the operands' region arguments LDA, OA, LDB, OB: whole buffers here).
    assert args[10:] == (["0", "0", "0", "0", "0", str(M)] if D * 2 > 128 else [])


def test_all_on_mma_sync_below_sm90a():
    k = tegula.compile(mp.shared_operand_two_paths(128, 64, 192)[0], target="sm_80")
    assert [c for c, _ in _gemm_calls(k)] == ["gemm_ss", "gemm_ss"]


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("M,L,D", CASES)
def test_two_paths_agree_with_torch(run, M, L, D):
    prog, ref = mp.shared_operand_two_paths(M, L, D)
    k = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(M + L + D)
    K = torch.randn(M, D, generator=g).half()
    Q = torch.randn(L, D, generator=g).half()
    P = torch.full((M, L), float("nan"))
    dQ = torch.full((L, D), float("nan"))
    run(k, K, Q, P, dQ)
    p, _ = ref(K, Q)
    torch.testing.assert_close(P.double().cpu(), p, rtol=1e-3, atol=1e-3)
    # dQ from the kernel's own P: where float32 and float64 products round P to float16
    # differently the two differ by an ulp, which the second gemm would magnify.
    dq = P.double().cpu().to(torch.float16).double().T @ K.double().cpu()
    torch.testing.assert_close(dQ.double().cpu(), dq, rtol=1e-3, atol=1e-3)
