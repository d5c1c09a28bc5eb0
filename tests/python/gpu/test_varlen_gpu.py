"""Varlen kernels warp specialised through their lets, on the GPU: the programs of
tests/python/varlen_programs.py against torch, ragged and aligned, outputs poisoned (the
CPU side in cpu/test_varlen.py)."""
import pytest
import torch

import tegula
import varlen_programs as vp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("lens,D,first", [((100, 37, 64), 128, 0), ((64, 128), 64, 0), ((130, 70), 64, 1),
                                          ((1000, 3, 517, 64), 128, 0)])
def test_varlen_against_torch(lens, D, first):
    prog, ref = vp.varlen_tile_scores(lens, D, first=first)
    k = tegula.compile(prog)
    g = torch.Generator().manual_seed(sum(lens) + D)
    Q = torch.randn(sum(lens), D, generator=g).half()
    K = torch.randn(sum(lens), D, generator=g).half()
    cu = vp.cu_seqlens(lens)
    S = torch.full([int(d) for d in k.params[-1].shape], float("nan"), device="cuda")
    k(Q.cuda(), K.cuda(), cu.cuda(), S)
    torch.testing.assert_close(S.double().cpu(), ref(Q, K, cu), rtol=1e-3, atol=1e-2)
