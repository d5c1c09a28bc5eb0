"""A one-warpgroup attention kernel lowered on two warpgroups (widen_programs.py), on the
GPU against torch in float64: fresh random inputs, aligned and ragged sequences, and the
same program kept on its declared threads gives the same numbers."""
import pytest
import torch

import widen_programs as wp

pytestmark = pytest.mark.gpu


def target():
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if major == 9 else f"sm_{major}{minor}"


@pytest.mark.parametrize("seq", [1024, 1000], ids=["aligned", "ragged"])
def test_widened_attention_matches_torch(seq):
    if target() != "sm_90a":
        pytest.skip("widening applies to wgmma kernels (sm_90a)")
    wide = wp.attention(seq, target=target())
    kept = wp.attention(seq, target=target(), keep_threads=True)
    assert wide._lowered_all[0].tile_threads == 256 and kept._lowered_all[0].tile_threads == 128
    q, k, v = (torch.randn(seq, 128, device="cuda").half() for _ in range(3))
    want = wp.expected(q, k, v)
    for kernel in (wide, kept):
        out = kernel(q, k, v).double()
        torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
