"""Packed atomics on the CPU: a T.atomic_add group of a partitioned loop adds 4 floats (or 2
halves) in one instruction where the destination is global, contiguous and aligned, and
lane by lane otherwise; the reference and the simulator agree with torch exactly on aligned
and ragged shapes, in float32, float16 and bfloat16 (packed_atomic_programs.py; the GPU
side is gpu/test_packed_atomics_gpu.py)."""
import os
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import packed_atomic_programs as pa  # noqa: E402

SHAPES = [(64, 128), (50, 100), (33, 102), (40, 99)]


def _source(prog, target="sm_90a"):
    k = tegula.compile(prog, target=target)
    assert len(k.cubin()) > 0
    return k.get_kernel_source()


@pytest.mark.parametrize("build", [pa.tile_from_shared, pa.element_from_fragment], ids=["tile", "element"])
@pytest.mark.parametrize("dtype,packed", [("float32", "atomic_add_x4("), ("float16", "atomic_add_x2("),
                                          ("bfloat16", "atomic_add_x2(")])
def test_aligned_groups_add_in_one_instruction(build, dtype, packed):
    src = _source(build(64, 128, 2, dtype))
    assert packed in src
    assert "atomic_add(&Y" not in src, "an element of Y still added on its own"


def test_the_width_follows_the_rows_alignment():
    # A row of 102 floats starts every 408 bytes: pairs are aligned, quads are not.
    src = _source(pa.tile_from_shared(33, 102, 2))
    assert "atomic_add_x2(&Y" in src and "atomic_add_x4(" not in src
    # An odd row: every element on its own.
    src = _source(pa.tile_from_shared(40, 99, 2))
    assert "atomic_add(&Y" in src and "atomic_add_x" not in src


def test_the_launcher_checks_the_packed_width():
    # The base address is all the launcher can check: it must be a multiple of the widest add.
    k = tegula.compile(pa.tile_from_shared(64, 128, 2), target="sm_90a")
    assert k._build().alignment["Y"] == 16
    k = tegula.compile(pa.tile_from_shared(64, 128, 2, dtype="float16"), target="sm_90a")
    assert k._build().alignment["Y"] == 4


def test_what_has_no_packed_form_adds_element_by_element():
    assert "atomic_add_x" not in _source(pa.element_from_fragment(64, 128, 2, memory_order="release"))
    assert "atomic_add_x" not in _source(pa.tile_from_shared(64, 128, 2, dtype="int32"))
    # sm_80 has no packed float atomics: the same call is four adds there (atomic.h).
    assert "atomic_add_x4(" in _source(pa.tile_from_shared(64, 128, 2), target="sm_80")


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("build", [pa.tile_from_shared, pa.element_from_fragment], ids=["tile", "element"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_sums_match_torch(run, build, dtype, M, N):
    splits = 3
    k = tegula.compile(build(M, N, splits, dtype), target="sm_90a")
    x, y = pa.inputs(M, N, splits, dtype, seed=M * N)
    want = pa.expected(x, y)
    run(k, x, y)
    assert torch.equal(y, want), (y.double() - want.double()).abs().max()
