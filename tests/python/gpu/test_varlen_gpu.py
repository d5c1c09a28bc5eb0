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


@pytest.mark.parametrize("B,pages,page,D,total,reverse", [(3, 4, 64, 64, 16, False), (2, 5, 64, 128, 12, True),
                                                          (64, 16, 64, 128, 2048, True)])
def test_paged_against_torch(B, pages, page, D, total, reverse):
    prog, ref = vp.paged_scores(B, pages, page, D, total, reverse=reverse)
    k = tegula.compile(prog)
    g = torch.Generator().manual_seed(B * pages + D)
    Q = torch.randn(B, 64, D, generator=g).half()
    KV = torch.randn(total * page, D, generator=g).half()
    table = torch.stack([torch.randperm(total, generator=g)[:pages] for _ in range(B)]).int()
    S = torch.full((B, 64, page), float("nan"), device="cuda")
    k(Q.cuda(), KV.cuda(), table.cuda(), S)
    torch.testing.assert_close(S.double().cpu(), ref(Q, KV, table), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("B,pages,D,total,stages", [(1, 2, 384, 4, 3), (4, 6, 512, 32, 2), (16, 9, 384, 160, 3)])
def test_paged_values_against_torch(B, pages, D, total, stages):
    # Warp specialised with the output tile in the K/V stages' bytes.
    prog, ref = vp.paged_values(B, pages, D, total, stages=stages)
    k = tegula.compile(prog)
    g = torch.Generator().manual_seed(B * pages + D)
    Q = (torch.randn(B, 64, D, generator=g) / 8).half()
    KV = (torch.randn(total * 64, D, generator=g) / 8).half()
    table = torch.stack([torch.randperm(total, generator=g)[:pages] for _ in range(B)]).int()
    O = torch.full((B, 64, D), float("nan"), device="cuda").half()
    k(Q.cuda(), KV.cuda(), table.cuda(), O)
    torch.testing.assert_close(O.double().cpu(), ref(Q, KV, table), rtol=1e-2, atol=1e-2)
