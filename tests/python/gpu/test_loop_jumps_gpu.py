"""break and continue in serial loops on the GPU (tests/python/loop_jump_programs.py; the CPU
side in cpu/test_loop_jumps.py), against torch with fresh inputs and poisoned outputs."""
import pytest
import torch

import tegula
import loop_jump_programs as lp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols,use_continue", [(200, 13, False), (128, 8, True), (1000, 32, True)])
def test_a_break_that_differs_between_threads(rows, cols, use_continue):
    k = tegula.compile(lp.first_negative_program(rows, cols, use_continue), out_idx=[1, 2])
    x = torch.randn(rows, cols, device="cuda") + 0.8
    x[x.abs() < 0.3] = 0
    x[::3] = x[::3].abs()
    first, total = k(x)
    want_first, want_total = lp.first_negative_expected(x.cpu())
    assert torch.equal(first.cpu(), want_first)
    torch.testing.assert_close(total.cpu(), want_total)


@pytest.mark.parametrize("n,limit", [(256, 20.0), (128, 1000.0), (200, 0.0), (1024, 100.0)])
def test_a_break_every_thread_takes_leaves_a_loop_of_tile_code(n, limit):
    k = tegula.compile(lp.rounds_program(n, 6), out_idx=[2, 3])
    x = torch.rand(n, device="cuda")
    y, rounds = k(x, torch.tensor([limit], device="cuda"))
    want_y, want_rounds = lp.rounds_expected(x.cpu(), limit, 6)
    assert rounds.item() == want_rounds
    torch.testing.assert_close(y.cpu(), want_y)


@pytest.mark.parametrize("M,N,skip", [(16, 128, 3), (8, 64, 1), (32, 96, 2)])
def test_a_continue_skips_the_rest_of_an_iteration(M, N, skip):
    k = tegula.compile(lp.skip_columns_program(M, N, skip))
    a = torch.randn(M, N, device="cuda")
    b = torch.zeros(M, N, device="cuda")
    k(a, b)
    assert torch.equal(b.cpu(), lp.skip_columns_expected(a.cpu(), skip))
