"""`while` loops and T.PersistentTileScheduler on the GPU against torch (the CPU side, with
the reference and the simulator, is cpu/test_tile_schedule.py)."""
import pytest
import torch

import tegula
import tile_schedule_programs as tp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mt,nt,workers,swizzle,column_major", [(4, 2, 3, 1, True), (9, 13, 8, 3, True),
                                                                 (7, 5, 132, 2, False)])
def test_each_tile_goes_to_its_worker_and_iteration(mt, nt, workers, swizzle, column_major):
    prog, ref = tp.tile_owner(mt, nt, workers, swizzle, column_major)
    O = torch.full((mt, nt), -1, dtype=torch.int32, device="cuda")
    tegula.compile(prog)(O)
    assert torch.equal(O.cpu(), ref())


@pytest.mark.parametrize("M,N,workers", [(64, 64, 3), (1000, 333, 20), (4096, 4096, 132)])
def test_scheduled_tiles_match_torch(M, N, workers):
    prog, ref = tp.scheduled_scale(M, N, workers)
    a = torch.randn(M, N, device="cuda")
    b = torch.full((M, N), float("nan"), device="cuda")
    tegula.compile(prog)(a, b)
    torch.testing.assert_close(b, ref(a))


@pytest.mark.parametrize("M,N,K,workers", [(128, 128, 64, 3), (1000, 700, 256, 16), (2048, 2048, 1024, 132)])
def test_scheduled_gemm_matches_torch(M, N, K, workers):
    prog, ref = tp.scheduled_gemm(M, N, K, workers)
    A = torch.randn(M, K, device="cuda").half()
    B = torch.randn(K, N, device="cuda").half()
    C = torch.full((M, N), float("nan"), device="cuda")
    tegula.compile(prog)(A, B, C)
    torch.testing.assert_close(C.double(), ref(A, B), rtol=1e-3, atol=1e-2)


def test_stateless_coordinates():
    prog, ref = tp.stateless_owner(9, 7, 10, 3)
    O = torch.full((9, 7), -1, dtype=torch.int32, device="cuda")
    tegula.compile(prog)(O)
    assert torch.equal(O.cpu(), ref())


def test_while_on_a_variable_matches_python():
    prog, ref = tp.halving_steps(1000)
    a = torch.randint(1, 1 << 30, (1000,), dtype=torch.int32, device="cuda")
    s = torch.full((1000,), -1, dtype=torch.int32, device="cuda")
    tegula.compile(prog)(a, s)
    assert torch.equal(s.cpu(), ref(a.cpu()))


@pytest.mark.parametrize("n", [64, 1000, 100000])
def test_a_while_that_diverges_between_threads_matches_python(n):
    prog, ref = tp.per_thread_halving(n)
    a = torch.randint(1, 1 << 30, (n,), dtype=torch.int32, device="cuda")
    s = torch.full((n,), -1, dtype=torch.int32, device="cuda")
    tegula.compile(prog)(a, s)
    assert torch.equal(s.cpu(), ref(a.cpu()))
