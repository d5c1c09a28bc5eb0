"""The GPU side of cpu/test_reduce_replicated.py: chained reductions over a replicated
source and cross-warp reductions in blocks of 96, 224 and 448 threads, against torch on
fresh inputs with the output poisoned."""
import pytest
import torch

import tegula
import reduce_replicated_programs as rp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["sum", "abssum", "max"])
@pytest.mark.parametrize("M,G,gs,threads", [(2, 8, 16, 128), (4, 16, 8, 256), (1, 56, 128, 448), (1, 12, 32, 96)])
def test_chained_reductions(kind, M, G, gs, threads):
    k = tegula.compile(rp.chained(M, G, gs, threads, kind))
    x = torch.randn(M, G, gs, device="cuda")
    y = torch.full((M,), float("nan"), device="cuda")
    k(x, y)
    want = {"sum": x.sum((1, 2)), "abssum": x.abs().sum((1, 2)), "max": x.amax((1, 2))}[kind]
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("M,N,threads", [(1, 7168, 448), (1, 3584, 224), (1, 4096, 96)])
def test_cross_warp_rows(M, N, threads):
    k = tegula.compile(rp.rows(M, N, threads))
    x = torch.randn(M, N, device="cuda")
    y = torch.full((M,), float("nan"), device="cuda")
    k(x, y)
    torch.testing.assert_close(y, x.sum(1), rtol=1e-5, atol=1e-3)
