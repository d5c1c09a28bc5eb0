"""Rows over blocks whose threads are not a power of two (odd_block_programs.py): the
threads past the last whole group of a row's lanes hold nothing, so no block writes a row
of another. The interpreters run the blocks one at a time and cannot see that race, so the
generated code is checked for the guard; the GPU run is gpu/test_odd_block_rows_gpu.py."""
import re

import pytest
import torch

import odd_block_programs as op

import tegula
import tegula.testing as tt


@pytest.mark.parametrize("threads,bm,lanes", [(448, 1, 256), (224, 1, 128), (896, 1, 512), (448, 2, 256)])
def test_threads_past_the_lanes_hold_nothing(threads, bm, lanes):
    src = tegula.compile(op.row_program(threads=threads, bm=bm), target="sm_90a").get_kernel_source()
    body = src[src.find('extern "C"'):]
    # every access of the row goes under tx < lanes: the rest of the block idles
    assert re.search(rf"if \(+tx < {lanes}\)", body), body[:3000]
    assert "tx / %d" % lanes not in body or f"tx < {lanes}" in body


@pytest.mark.parametrize("threads,bm", [(448, 1), (224, 1), (448, 2), (96, 1)])
@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_odd_block_rows_agree_with_torch(threads, bm, run):
    k = tegula.compile(op.row_program(N=7168 if threads != 96 else 1536, threads=threads, bm=bm), target="sm_90a")
    n = 7168 if threads != 96 else 1536
    x = torch.randn(5, n).bfloat16()
    x[3, n - 3] = 77.0   # the row's max among the elements of the last lanes
    o = torch.full((5, n), float("nan"))
    r = torch.full((5,), float("nan"))
    run(k, x, o, r)
    ro, rr = op.reference(x)
    torch.testing.assert_close(o, ro, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(r, rr, rtol=0, atol=0)
