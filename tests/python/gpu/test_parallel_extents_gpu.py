"""T.Parallel over a bounded run-time extent on the GPU (tests/python/parallel_extent_programs.py;
the CPU side in cpu/test_parallel_extents.py), outputs poisoned."""
import pytest
import torch

import tegula
import parallel_extent_programs as pe

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("valid", [0, 13, 200, 512, 600, -5])
def test_a_bounded_span(valid):
    k = tegula.compile(pe.span_program(), out_idx=[1])
    a = torch.randn(512, device="cuda")
    want = torch.zeros(512, device="cuda")
    n = max(0, min(valid, 512))
    want[:n] = a[:n] - 1
    assert torch.equal(k(a, valid), want)


@pytest.mark.parametrize("valid", [0, 1, 37, 64, 100])
def test_a_bounded_outer_extent_over_a_fragment(valid):
    k = tegula.compile(pe.rows_program(), out_idx=[1])
    a = torch.randn(64, 128, device="cuda")
    want = torch.zeros(64, 128, device="cuda")
    n = max(0, min(valid, 64))
    want[:n] = a[:n] * 2
    assert torch.equal(k(a, valid), want)
