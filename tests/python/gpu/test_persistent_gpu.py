"""T.Persistent on the GPU: the programs of tests/python/persistent_programs.py against
torch, ragged and aligned, outputs poisoned (the CPU side in cpu/test_persistent.py)."""
import pytest
import torch

import tegula
import persistent_programs as pp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M,N,K,blocks,group", [(200, 330, 64, 5, 3), (1000, 1000, 256, 132, 8), (64, 448, 32, 3, 2)])
def test_persistent_gemm_against_torch(M, N, K, blocks, group):
    prog, ref = pp.persistent_gemm(M, N, K, blocks, group)
    k = tegula.compile(prog)
    g = torch.Generator().manual_seed(M + N + K)
    A, B = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    C = torch.full((M, N), float("nan"), device="cuda")
    k(A.cuda(), B.cuda(), C)
    torch.testing.assert_close(C.double().cpu(), ref(A, B), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mt,nt,blocks,group", [(3, 7, 4, 3), (5, 2, 3, 8), (40, 33, 132, 8)])
def test_tile_order_against_the_grouped_order(mt, nt, blocks, group):
    prog, ref = pp.tile_owner(mt, nt, blocks, group)
    k = tegula.compile(prog)
    O = torch.full((mt, nt), -1, dtype=torch.int32, device="cuda")
    k(O)
    assert torch.equal(O.cpu(), ref())
