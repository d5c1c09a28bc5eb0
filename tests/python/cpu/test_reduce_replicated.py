"""A reduction over a source whose elements several threads hold counts each element once
(a sum or an xor over the copies of an earlier reduction's result was multiplied by the
copies), and a cross-warp reduction in a block of a thread count that is not a power of
two reads no scratch slot past the last warp. The reference, the simulator (which runs the
lowered code the GPU runs) and torch agree; the GPU side is gpu/test_reduce_replicated_gpu.py."""
import os
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import reduce_replicated_programs as rp  # noqa: E402


def _torch(kind, x):
    if kind == "sum":
        return x.sum((1, 2))
    if kind == "abssum":
        return x.abs().sum((1, 2))
    if kind == "max":
        return x.amax((1, 2))
    out = torch.zeros(x.shape[0], dtype=x.dtype)
    for v in x.flatten(1).unbind(1):
        out ^= v
    return out


@pytest.mark.parametrize("kind", ["sum", "abssum", "max", "xor"])
@pytest.mark.parametrize("M,G,gs,threads", [(2, 8, 16, 128), (4, 16, 8, 256), (1, 56, 128, 448), (1, 12, 32, 96)],
                         ids=["2x8x16-t128", "4x16x8-t256", "1x56x128-t448", "1x12x32-t96"])
def test_chained_reductions_count_each_element_once(kind, M, G, gs, threads):
    dtype = "int32" if kind == "xor" else "float32"
    k = tegula.compile(rp.chained(M, G, gs, threads, kind, dtype), out_idx=[1], target="sm_90a")
    gen = torch.Generator().manual_seed(M * 1000 + G * 10 + gs)
    if kind == "xor":
        x = torch.randint(0, 1 << 20, (M, G, gs), generator=gen, dtype=torch.int32)
    else:
        x = torch.randn(M, G, gs, generator=gen)
    want = _torch(kind, x)
    for run in (tt.reference, tt.simulate):
        got = run(k, x)
        if kind == "xor":
            assert torch.equal(got, want), run.__name__
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4, msg=run.__name__)
    assert k.cubin()


@pytest.mark.parametrize("M,N,threads", [(1, 7168, 448), (1, 3584, 224), (1, 4096, 96), (2, 1792, 224)])
def test_cross_warp_rows_in_blocks_of_any_warp_count(M, N, threads):
    # (2, 1792, 224): each row on 128 lanes, the last 96 threads idle (a row was once split
    # between the threads past the lanes and a second round, and refused at its store).
    k = tegula.compile(rp.rows(M, N, threads), out_idx=[1], target="sm_90a")
    x = torch.randn(M, N, generator=torch.Generator().manual_seed(N))
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(k, x), x.sum(1), rtol=1e-5, atol=1e-3, msg=run.__name__)


@pytest.mark.parametrize("program", [lambda: rp.chained(3, 6, 32, 96)], ids=["chained-3x6x32-t96"])
def test_results_held_by_an_uneven_group_of_threads_are_refused_at_the_store(program):
    # Each row's result is held by a group of threads that is not a power of two: the store
    # cannot pick one copy, and says so at its line instead of writing several.
    with pytest.raises(tegula.TegulaCompileError, match="not a power-of-two group of threads"):
        tegula.compile(program(), out_idx=[1], target="sm_90a")
