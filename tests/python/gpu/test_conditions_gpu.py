"""`and` / `or` spelled with and without a short circuit (condition_programs.py), on the
GPU against torch, outputs poisoned; the CPU side in cpu/test_conditions.py."""
import pytest
import torch

import condition_programs as cp
import tegula

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M,N,lens", [(64, 64, (64, 64)), (64, 64, (37, 5)), (128, 64, (0, 64)), (64, 128, (100, 77))])
def test_ragged_mask(M, N, lens):
    prog, ref = cp.ragged_mask(M, N)
    k = tegula.compile(prog)
    X = torch.randn(M, N, generator=torch.Generator().manual_seed(M + sum(lens)))
    X[3, 4] = float("nan")
    Lens = torch.tensor(lens, dtype=torch.int32)
    Out = torch.full((M, N), float("nan"), device="cuda")
    k(X.cuda(), Lens.cuda(), Out)
    torch.testing.assert_close(Out.double().cpu(), ref(X, Lens), equal_nan=True)


@pytest.mark.parametrize("m", [0, 57, 100])
def test_guarded_read(m):
    prog, ref = cp.guarded_read(100, 256)
    k = tegula.compile(prog)
    A = torch.randn(100, generator=torch.Generator().manual_seed(m))
    Lens = torch.tensor([m], dtype=torch.int32)
    Out = torch.full((256,), float("nan"), device="cuda")
    k(A.cuda(), Lens.cuda(), Out)
    torch.testing.assert_close(Out.double().cpu(), ref(A, Lens))


@pytest.mark.parametrize("d", [0, 1, 3, -5])
def test_guarded_division(d):
    prog, ref = cp.guarded_division(256)
    k = tegula.compile(prog)
    D = torch.tensor([d], dtype=torch.int32)
    Out = torch.full((256,), -7, dtype=torch.int32, device="cuda")
    k(D.cuda(), Out)
    torch.testing.assert_close(Out.cpu(), ref(D))
