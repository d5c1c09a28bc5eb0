"""Bulk copies of attention's backward shape (bulk_copy_programs.py) on the CPU: on sm_90a
the loop is warp specialised with a 1-D shared destination (a log-sum-exp row through a
tensor map) and a 32-row gemm on mma.sync beside the wgmma ones; the reference and the
simulator agree with torch."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import bulk_copy_programs as bp  # noqa: E402


def test_the_row_copy_is_a_bulk_copy_and_the_small_gemm_stays_on_mma_sync():
    k = tegula.compile(bp.backward_like(2, 128)[0], target="sm_90a")
    assert k._lowered.warp_specialized
    src = k.get_kernel_source()
    assert re.search(r"tma_load_2d\(&lse_s\[", src), "the Lse row is not a bulk copy"
    assert "cp_async" not in src
    assert "tegula::gemm_ss<" in src and "tegula::wgmma_ss<" in src


def _two_gemms(small_reads_own_tile):
    import tegula.language as T

    @T.prim_func
    def main(A: T.Tensor((256, 64), "float16"), W: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32"),
             D: T.Tensor((32, 64), "float32")):
        with T.Kernel(1, threads=128) as _:
            a_s = T.alloc_shared((64, 64), "float16")
            t_s = T.alloc_shared((32, 64), "float16")
            w_s = T.alloc_shared((64, 64), "float16")
            big = T.alloc_fragment((64, 64), "float32")
            small = T.alloc_fragment((32, 64), "float32")
            T.copy(W, w_s)
            T.clear(big)
            T.clear(small)
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k * 64: (k + 1) * 64, :], a_s)
                T.gemm(a_s, w_s, big)
                if small_reads_own_tile:
                    T.copy(A[k * 32: (k + 1) * 32, :], t_s)
                    T.gemm(t_s, w_s, small)
            T.copy(big, C)
            T.copy(small, D)

    return main


def test_a_tile_only_mma_sync_reads_is_not_filled_by_the_copy_engine():
    # t_s feeds the 32-row gemm alone: its ldmatrix layout is no box's, so the loop keeps
    # the cp.async pipeline; without it the same loop is warp specialised.
    assert not tegula.compile(_two_gemms(True), target="sm_90a")._lowered.warp_specialized
    assert tegula.compile(_two_gemms(False), target="sm_90a")._lowered.warp_specialized


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("B,N", [(1, 64), (2, 96)])
def test_backward_like_agrees_with_torch(run, B, N):
    prog, ref = bp.backward_like(B, N)
    k = tegula.compile(prog, target="sm_90a")
    Q, K, Lse = bp.inputs(B, N, 64, B + N)
    dQ = torch.zeros(B, N, 64)
    dK = torch.full((B, N, 64), float("nan"))
    run(k, Q, K, Lse, dQ, dK)
    want_dq, want_dk = ref(Q, K, Lse)
    torch.testing.assert_close(dK.double(), want_dk, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dQ.double(), want_dq, rtol=2e-2, atol=2e-2)
