"""Fragments read in another layout than they are held in (layout_inference.cc), on the
CPU: a fragment indexed by a serial loop's variable inside a T.Parallel loop, a row
copied out of a 2-D fragment, and a reduction whose output another loop laid out first.
Reference and simulator against torch in float64, the shapes ragged against the warps."""
import os
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from layout_exchange_programs import (  # noqa: E402
    combine_expected, combine_program, combine_rows_program, row_max_program, split_store_program)

RUNS = [tt.reference, tt.simulate]


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("heads,num_split,dim,copy_rows", [(3, 4, 64, False), (2, 3, 32, True), (1, 8, 16, False)])
def test_split_kv_combine(run, heads, num_split, dim, copy_rows):
    k = tegula.compile(combine_program(heads, num_split, dim, copy_rows), out_idx=[2], target="sm_90a")
    g = torch.Generator().manual_seed(heads * 100 + num_split)
    glse, part = torch.randn(heads, num_split, generator=g) * 4, torch.randn(heads, num_split, dim, generator=g)
    torch.testing.assert_close(run(k, glse, part).double(), combine_expected(glse, part), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("rows,cols,accumulate", [(4, 128, False), (4, 128, True), (3, 64, True)])
def test_reduction_into_a_vector_laid_out_by_another_loop(run, rows, cols, accumulate):
    k = tegula.compile(row_max_program(rows, cols, accumulate), out_idx=[2, 3], target="sm_90a")
    g = torch.Generator().manual_seed(rows + cols)
    a, b = torch.randn(rows, 128, generator=g) - 1.5, torch.randn(128, cols, generator=g)
    m, c = run(k, a, b)
    want = a.max(0).values
    if accumulate:
        want = torch.maximum(want, torch.full_like(want, -1.0))
    assert torch.equal(m, want)
    assert torch.equal(c, b * want[:, None])


def test_the_crossings_are_in_the_generated_code():
    # lse[k, j] in a loop over j inside one over k: each thread holds column j for every k,
    # so the element is read from a register that is a function of k, no crossing.
    src = tegula.compile(combine_program(3, 4, 64), out_idx=[2], target="sm_90a").get_kernel_source()
    assert "lse_exchange" not in src
    src = tegula.compile(row_max_program(4, 128, True), out_idx=[2, 3], target="sm_90a").get_kernel_source()
    assert "m_rows" in src and "m_exchange" in src


def test_tilelangs_combine_reads_lse_from_registers():
    src = tegula.compile(combine_rows_program(32, 8, 128), out_idx=[2], target="sm_90a").get_kernel_source()
    combine = src[src.index("__global__"):]
    assert "_exchange" not in combine and "__syncthreads" not in combine and "barrier_sync" not in combine


def test_tilelangs_combine_runs_on_every_thread():
    # 128 columns over 128 threads: one column each, where a 16-byte row vector would have
    # put 8 on each of 16 threads and left the rest idle for the whole kernel.
    src = tegula.compile(combine_rows_program(32, 8, 128), out_idx=[2], target="sm_90a").get_kernel_source()
    combine = src[src.index("__global__"):]
    assert "float logsum[1]" in combine and "half_t lse[8]" in combine, combine[:600]
    assert "if (" not in combine


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("heads,num_split,dim", [(2, 8, 128), (3, 3, 64)])
def test_tilelangs_combine_agrees_with_torch(run, heads, num_split, dim):
    k = tegula.compile(combine_rows_program(heads, num_split, dim), out_idx=[2], target="sm_90a")
    g = torch.Generator().manual_seed(heads * num_split)
    glse = (torch.randn(heads, num_split, generator=g) * 2).half()
    part = torch.randn(heads, num_split, dim, generator=g).half()
    out = run(k, glse, part)
    torch.testing.assert_close(out.double(), combine_expected(glse.double(), part.double()), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("N,threads", [(300, 128), (64, 256), (1000, 128)])
def test_a_reduction_read_outside_the_loops_reaches_every_thread(run, N, threads):
    """The row's contributors are some warps only; every thread holds the result (it is read
    as a scalar) and one of the others may write it. Before the fix the other warps held
    the identity: a silent 0 where the maximum belongs."""
    from layout_exchange_programs import scalar_of_reduction_program

    k = tegula.compile(scalar_of_reduction_program(3, N, threads), out_idx=[1, 2], target="sm_90a")
    x = torch.randn(3, N, generator=torch.Generator().manual_seed(N)) * 5
    y, s = run(k, x)
    want = x.abs().amax(1).clamp_min(1e-4)
    torch.testing.assert_close(s, want)
    torch.testing.assert_close(y, x / want[:, None])


# (BS, D, K, split, exchanged on sm_90a): slices of 16 rows of an mma.sync accumulator stay
# in their threads; slices of 4 rows, or of 16 rows of a wgmma accumulator (a warp's rows),
# do not.
SPLIT_STORES = [(32, 64, 32, 2, False), (32, 96, 48, 2, False), (32, 64, 32, 8, True), (64, 128, 16, 4, True)]


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("BS,D,K,split,exchanged", SPLIT_STORES)
def test_an_accumulator_stored_in_row_slices(run, BS, D, K, split, exchanged):
    k = tegula.compile(split_store_program(BS, D, K, split), out_idx=[2], target="sm_90a")
    assert ("acc_exchange" in k.get_kernel_source()) == exchanged
    g = torch.Generator().manual_seed(BS * D + split)
    a, b = torch.randn(BS, K, generator=g).half(), torch.randn(K, D, generator=g).half()
    torch.testing.assert_close(run(k, a, b), a.float() @ b.float(), rtol=1e-4, atol=1e-4)
