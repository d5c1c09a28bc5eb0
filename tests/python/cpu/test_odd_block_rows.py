"""Rows over blocks whose threads are not a power of two (odd_block_programs.py): the
threads past the last whole group of a row's lanes hold nothing, so no block writes a row
of another. The simulator runs blocks one at a time; it reports two blocks storing
different values into one element (the race this layout once made), which these programs,
their maxima among the last lanes' elements, would show. The GPU run is
gpu/test_odd_block_rows_gpu.py."""
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
    # each row's max in a vector of the last quarter of its lanes (the threads past the
    # lanes once took the next row without them: another max, other stores)
    lanes = {448: 256, 224: 128, 96: 64}[threads]
    for row in range(5):
        x[row, (lanes - 1 - row) * 8] = 77.0 + row
    o = torch.full((5, n), float("nan"))
    r = torch.full((5,), float("nan"))
    run(k, x, o, r)
    ro, rr = op.reference(x)
    torch.testing.assert_close(o, ro, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(r, rr, rtol=0, atol=0)


def test_the_simulator_reports_blocks_storing_different_values_into_one_element():
    import tegula.language as T

    @T.prim_func
    def last_wins(A: T.Tensor((4, 32), "float32"), O: T.Tensor((32,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for j in T.Parallel(32):
                O[j] = A[bx, j]

    @T.prim_func
    def same_value(A: T.Tensor((4, 32), "float32"), O: T.Tensor((32,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for j in T.Parallel(32):
                O[j] = A[0, j] * 2

    a = torch.randn(4, 32)
    with pytest.raises(tt.SimulationError, match=r"block \(1\): thread 0 stores .* into O\[0\], where block \(0\) "
                       r"stored .*: on a GPU the blocks run at once, and which store lands is a race"):
        tt.simulate(tegula.compile(last_wins, target="sm_90a"), a, torch.zeros(32))
    o = torch.zeros(32)
    tt.simulate(tegula.compile(same_value, target="sm_90a"), a, o)   # the same value from every block: no race
    torch.testing.assert_close(o, a[0] * 2)
