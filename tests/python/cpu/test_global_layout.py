"""Global tensors stored in a T.Layout's order (ir/index_map.h), on the CPU: the
reference and the simulator place each element where the map says, two kernels that
share the annotation pass a tensor between them, the generated code neither vectorises
nor bulk-copies such a tensor, and a map that is not a one-to-one rearrangement is an
error at the annotation's line."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from global_layout_programs import (accumulate_program, convert_program, placed,  # noqa: E402
                                    transposed_store_program)

SHAPE = (2, 64, 2, 32)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_accumulation_lands_in_fragment_order_and_converts_back(run):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(SHAPE, generator=g)
    acc = tegula.compile(accumulate_program(SHAPE), target="sm_90a")
    conv = tegula.compile(convert_program(SHAPE), out_idx=[1], target="sm_90a")
    dq = torch.zeros(SHAPE)
    run(acc, x, dq)
    assert torch.equal(placed(dq), 2 * x)
    assert not torch.equal(dq, 2 * x)  # the storage is not the usual order
    out = run(conv, dq)
    torch.testing.assert_close(out.float(), 2 * x, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("L", [64, 100])
def test_a_whole_dimension_moves_under_a_dynamic_size(run, L):
    k = tegula.compile(transposed_store_program(), out_idx=[1], target="sm_90a")
    x = torch.randn(L, 4, 32)
    y = run(k, x)
    assert y.shape == (L, 4, 32)
    torch.testing.assert_close(y.reshape(4, L, 32), (x + 1).permute(1, 0, 2))


def test_the_mapped_tensor_is_accessed_element_by_element():
    src = tegula.compile(convert_program(SHAPE), out_idx=[1], target="sm_90a").get_kernel_source()
    reads = [line for line in src.splitlines() if "dQ[" in line]
    assert reads and not any("Vec<" in line and "&dQ[" in line for line in reads)
    assert any("* 32 + (((tx" in line for line in reads)  # the map's last position: 4 * (l % 8) + ...
    k = tegula.compile(convert_program(SHAPE), out_idx=[1], target="sm_90a")
    assert not k._lowered.tensor_maps


def test_a_copy_through_the_map_deals_consecutive_elements_to_consecutive_threads():
    # No vector can cross the mapped side, so neither side takes one: thread tx writes
    # element tx of each run of 128, as the unmapped side lies, and every thread has work.
    src = tegula.compile(convert_program(SHAPE), out_idx=[1], target="sm_90a").get_kernel_source()
    writes = [line for line in src.splitlines() if line.strip().startswith("out[")]
    assert writes and all("Vec<" not in line for line in writes)
    # The output's last index moves with tx alone (tx, tx % 32, ...): no lane-times-width term.
    assert all(re.search(r"\+ \(?tx( % \d+)?\)?\] = ", line) for line in writes), writes[:2]
    assert "if (" not in src[src.index("__global__"):], "some threads are left idle"


def _error(fn):
    with pytest.raises(Exception) as info:
        tegula.compile(fn, target="sm_90a")
    return info


def test_a_map_that_folds_elements_together_is_refused_at_its_line():
    @T.prim_func
    def folded(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [i // 2, j, i % 3])})
            for i, j in T.Parallel(16, 16):
                A[i, j] = 1.0

    info = _error(folded)
    assert "T.Layout for 'A' maps its 256 elements into a range of 384 places" in info.value.message
    assert "T.annotate_layout({A: T.Layout(" in info.value.source_line

    @T.prim_func
    def collides(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [(i * j) % 16, j])})
            for i, j in T.Parallel(16, 16):
                A[i, j] = 1.0

    info = _error(collides)
    assert "puts A[0, 0] and A[1, 0] at the same place" in info.value.message


def test_a_map_with_more_places_than_elements_is_refused():
    @T.prim_func
    def sparse(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=32):
            T.annotate_layout({A: T.Layout(A.shape, lambda i, j: [i, 2 * j])})
            for i, j in T.Parallel(16, 16):
                A[i, j] = 1.0

    assert "maps its 256 elements into a range of 496 places" in str(_error(sparse).value)


def test_a_layout_on_shared_memory_or_of_another_shape_is_an_argument_error():
    with pytest.raises(Exception, match="places the elements of a global tensor; 's' is in shared memory"):
        @T.prim_func
        def on_shared(A: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((16, 16), "float32")
                T.annotate_layout({s: T.Layout(s.shape, lambda i, j: [j, i])})
                T.copy(A, s)
                T.copy(s, A)
    with pytest.raises(Exception, match=r"the T.Layout for 'A' has shape \[8, 32\], the tensor \[16, 16\]"):
        @T.prim_func
        def other_shape(A: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=32):
                T.annotate_layout({A: T.Layout((8, 32), lambda i, j: [j, i])})
                for i, j in T.Parallel(16, 16):
                    A[i, j] = 1.0
