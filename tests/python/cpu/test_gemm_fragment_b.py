"""T.gemm with B in a fragment on the CPU (gemm_fragment_b_programs.py): the reference and
the simulator (which reports races, so a missing barrier around the staged copy of B
fails) against torch in float64, float16 / bfloat16 / float32 (tf32) operands, B
transposed or not, A from shared memory or a fragment, on the mma.sync path (sm_80) and
on sm_90a (wgmma where the operands fit); NVRTC compiles the device code."""
import os
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import gemm_fragment_b_programs as gp  # noqa: E402

# (M, N, K, block_K, dtype, transpose_B, a_in_fragment)
CASES = [
    (64, 64, 128, 32, "float16", False, False),
    (64, 64, 100, 32, "bfloat16", True, False),  # ragged K
    (16, 64, 80, 16, "float32", False, False),   # tf32, the kda chunk_bwd_intra tile
    (32, 32, 40, 16, "float32", True, False),
    (64, 32, 96, 32, "float16", False, True),    # A in registers too
]


def _inputs(k, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn([int(d) for d in p.shape], generator=g).to(getattr(torch, p.dtype_name))
            for p in k.params[:2]]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[4]}-tB{int(c[5])}-rA{int(c[6])}-{c[2]}" for c in CASES])
def test_agrees_with_torch(case, run, target):
    M, N, K, block_K, dtype, tb, ra = case
    prog, ref = gp.accumulate(M, N, K, block_K, dtype, tb, ra)
    k = tegula.compile(prog, out_idx=-1, target=target)
    A, B = _inputs(k, M + N + K)
    torch.testing.assert_close(run(k, A, B).double(), ref(A, B), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_device_code_compiles_and_reads_b_from_shared_memory(target):
    prog, _ = gp.accumulate(64, 64, 128, 32, "float16")
    k = tegula.compile(prog, out_idx=-1, target=target)
    assert k.cubin()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    assert "b_f_shared" in src and ("gemm_ss" in src or "wgmma_ss" in src)
