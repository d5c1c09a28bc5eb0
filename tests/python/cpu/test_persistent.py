"""T.Persistent on the CPU: the reference and the simulator agree with torch on a
persistent gemm (ragged, blocks that leave the last wave short) and give every tile to the
block and wave TileLang's grouped order names; bad arguments are errors at the line."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import persistent_programs as pp  # noqa: E402


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("M,N,K,blocks,group", [(200, 330, 64, 5, 3), (128, 128, 96, 4, 8), (64, 448, 32, 3, 2)])
def test_persistent_gemm_agrees_with_torch(run, M, N, K, blocks, group):
    prog, ref = pp.persistent_gemm(M, N, K, blocks, group)
    k = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(M + N + K)
    A, B = torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()
    C = torch.full((M, N), float("nan"))
    run(k, A, B, C)
    torch.testing.assert_close(C.double(), ref(A, B), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("mt,nt,blocks,group", [(3, 7, 4, 3), (5, 2, 3, 8), (4, 4, 16, 1), (2, 9, 5, 4)])
def test_each_tile_goes_to_the_block_and_wave_of_the_grouped_order(run, mt, nt, blocks, group):
    prog, ref = pp.tile_owner(mt, nt, blocks, group)
    k = tegula.compile(prog, target="sm_90a")
    O = torch.full((mt, nt), -1, dtype=torch.int32)
    run(k, O)
    assert torch.equal(O, ref())


def test_bad_arguments_are_errors_at_the_line():
    def build():
        @T.prim_func
        def main(O: T.Tensor((4, 4), "float32")):
            with T.Kernel(2, threads=32) as b:
                for i, j in T.Persistent([4, 4], 0, b):
                    O[i, j] = 1.0

        return tegula.compile(main, target="sm_90a")

    with pytest.raises(tegula.TegulaCompileError, match=r"test_persistent.py:\d+:\d+: T.Persistent: wave_size must be "
                       "positive, got 0"):
        build()
