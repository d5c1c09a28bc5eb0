"""Rows over blocks whose threads are not a power of two (odd_block_programs.py) on the
GPU against torch, thousands of blocks at once: a layout that gave a block's last threads
a row of the next block raced here (cpu/test_odd_block_rows.py checks the guard)."""
import os
import sys

import pytest
import torch

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import odd_block_programs as op  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("threads,bm,n", [(448, 1, 7168), (224, 1, 7168), (896, 1, 7168), (448, 2, 7168),
                                          (96, 1, 1536), (160, 1, 2560)])
def test_odd_block_rows(threads, bm, n):
    k = tegula.compile(op.row_program(N=n, threads=threads, bm=bm))
    for m in (4096, 777):
        x = torch.randn(m, n, device="cuda").bfloat16()
        x[::7, -5] = 300.0   # maxima among the last lanes' elements
        o = torch.full((m, n), float("nan"), device="cuda")
        r = torch.full((m,), float("nan"), device="cuda")
        k(x, o, r)
        ro, rr = op.reference(x)
        torch.testing.assert_close(o, ro, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(r, rr, rtol=0, atol=0)
