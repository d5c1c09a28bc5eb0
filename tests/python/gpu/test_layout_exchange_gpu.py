"""Fragments read in another layout than they are held in, on the GPU (the programs of
tests/python/layout_exchange_programs.py; the CPU side in cpu/test_layout_exchange.py),
against torch in float64 with fresh inputs and poisoned outputs."""
import pytest
import torch

import tegula
from layout_exchange_programs import (combine_expected, combine_program, combine_rows_program, row_max_program,
                                      split_store_program)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("heads,num_split,dim,copy_rows", [(3, 4, 64, False), (2, 3, 32, True), (64, 8, 128, False)])
def test_split_kv_combine(heads, num_split, dim, copy_rows):
    k = tegula.compile(combine_program(heads, num_split, dim, copy_rows), out_idx=[2])
    glse = torch.randn(heads, num_split, device="cuda") * 4
    part = torch.randn(heads, num_split, dim, device="cuda")
    out = k(glse, part)
    torch.testing.assert_close(out.double().cpu(), combine_expected(glse.cpu(), part.cpu()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("heads,num_split,dim", [(32, 8, 128), (3, 3, 64), (64, 16, 128)])
def test_tilelangs_combine(heads, num_split, dim):
    k = tegula.compile(combine_rows_program(heads, num_split, dim), out_idx=[2])
    glse = (torch.randn(heads, num_split, device="cuda") * 2).half()
    part = torch.randn(heads, num_split, dim, device="cuda").half()
    out = k(glse, part)
    torch.testing.assert_close(out.double().cpu(), combine_expected(glse.cpu().double(), part.cpu().double()),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("rows,cols,accumulate", [(4, 128, False), (4, 128, True), (3, 64, True)])
def test_reduction_into_a_vector_laid_out_by_another_loop(rows, cols, accumulate):
    k = tegula.compile(row_max_program(rows, cols, accumulate), out_idx=[2, 3])
    a, b = torch.randn(rows, 128, device="cuda") - 1.5, torch.randn(128, cols, device="cuda")
    m, c = k(a, b)
    want = a.max(0).values
    if accumulate:
        want = torch.maximum(want, torch.full_like(want, -1.0))
    assert torch.equal(m, want)
    assert torch.equal(c, b * want[:, None])


@pytest.mark.parametrize("N,threads", [(300, 128), (64, 256), (1000, 128)])
def test_a_reduction_read_outside_the_loops_reaches_every_thread(N, threads):
    from layout_exchange_programs import scalar_of_reduction_program

    k = tegula.compile(scalar_of_reduction_program(3, N, threads), out_idx=[1, 2])
    x = torch.randn(3, N, device="cuda") * 5
    y, s = k(x)
    want = x.abs().amax(1).clamp_min(1e-4)
    torch.testing.assert_close(s, want)
    torch.testing.assert_close(y, x / want[:, None])


@pytest.mark.parametrize("BS,D,K,split", [(32, 64, 32, 2), (32, 96, 48, 2), (32, 512, 64, 2), (32, 64, 32, 8),
                                          (64, 128, 16, 4)])
def test_an_accumulator_stored_in_row_slices(BS, D, K, split):
    k = tegula.compile(split_store_program(BS, D, K, split), out_idx=[2])
    a = torch.randn(BS, K, device="cuda").half()
    b = torch.randn(K, D, device="cuda").half()
    torch.testing.assert_close(k(a, b), a.float() @ b.float(), rtol=1e-4, atol=1e-4)
