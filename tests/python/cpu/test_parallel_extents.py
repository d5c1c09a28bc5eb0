"""T.Parallel over an extent known only at launch but bounded (transform/bound_parallel.cc):
the loop runs over the bound with its body guarded, so the reference, the simulator and
the generated code agree for extents of 0, negative, inside and past the bound; an
extent with no bound is an error at the loop's line."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import parallel_extent_programs as pe  # noqa: E402


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("valid", [0, 13, 200, 512, 600, -5])
def test_a_bounded_span(run, valid):
    k = tegula.compile(pe.span_program(), out_idx=[1], target="sm_90a")
    a = torch.randn(512, generator=torch.Generator().manual_seed(valid + 10))
    want = torch.zeros(512)
    n = max(0, min(valid, 512))
    want[:n] = a[:n] - 1
    assert torch.equal(run(k, a, valid), want)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("valid", [0, 1, 37, 64, 100])
def test_a_bounded_outer_extent_over_a_fragment(run, valid):
    k = tegula.compile(pe.rows_program(), out_idx=[1], target="sm_90a")
    a = torch.randn(64, 128, generator=torch.Generator().manual_seed(valid))
    want = torch.zeros(64, 128)
    n = max(0, min(valid, 64))
    want[:n] = a[:n] * 2
    assert torch.equal(run(k, a, valid), want)


def test_the_generated_loop_is_over_the_bound_and_guarded():
    src = tegula.compile(pe.span_program(), out_idx=[1], target="sm_90a").get_kernel_source()
    assert "min(valid_len, 512)" in src


def test_an_unbounded_extent_is_refused_at_the_loop():
    @T.prim_func
    def f(A: T.Tensor((512,), "float32"), n: T.int32):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(n):
                A[i] = 1.0

    with pytest.raises(tegula.TegulaCompileError, match="T.Parallel extents must be constants, or bounded") as info:
        tegula.compile(f, target="sm_90a")
    assert "for i in T.Parallel(n):" in info.value.source_line
