"""`and` / `or` in generated CUDA (condition_programs.py): the mask of a ragged tile is
spelled without a short circuit, which nvcc would compile into a branch around every
element's right operand; a left operand that guards a read or a division keeps it. The
reference and the simulator (which reports any read out of bounds) agree with torch."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import condition_programs as cp  # noqa: E402

RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])


def lines_with(src, text):
    return [line for line in src.splitlines() if text in line]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_a_mask_of_plain_comparisons_has_no_short_circuit(target):
    src = tegula.compile(cp.ragged_mask(64, 64)[0], target=target).get_kernel_source()
    masks = lines_with(src, "tegula::ninfinity<float>()")
    assert masks and all(" | " in line and "||" not in line for line in masks), masks[:2]


def test_a_guarded_read_keeps_its_short_circuit():
    src = tegula.compile(cp.guarded_read(100, 256)[0], target="sm_90a").get_kernel_source()
    guards = [line for line in src.splitlines() if re.search(r"A\[", line) and "if (" in line]
    assert guards and all("&&" in line for line in guards), guards


def test_a_guarded_division_keeps_its_short_circuit():
    src = tegula.compile(cp.guarded_division(256)[0], target="sm_90a").get_kernel_source()
    assert lines_with(src, "&&"), src


@RUNS
@pytest.mark.parametrize("lens", [(64, 64), (37, 5), (0, 64), (64, 0)])
def test_ragged_mask_agrees_with_torch(run, lens):
    prog, ref = cp.ragged_mask(64, 64)
    k = tegula.compile(prog, target="sm_90a")
    X = torch.randn(64, 64, generator=torch.Generator().manual_seed(sum(lens)))
    Lens = torch.tensor(lens, dtype=torch.int32)
    Out = torch.full((64, 64), float("nan"))
    run(k, X, Lens, Out)
    torch.testing.assert_close(Out.double(), ref(X, Lens))


@RUNS
@pytest.mark.parametrize("m", [0, 57, 100, 300])
def test_guarded_read_agrees_with_torch(run, m):
    prog, ref = cp.guarded_read(100, 256)
    k = tegula.compile(prog, target="sm_90a")
    A = torch.randn(100, generator=torch.Generator().manual_seed(m))
    Lens = torch.tensor([min(m, 100)], dtype=torch.int32)
    Out = torch.full((256,), float("nan"))
    run(k, A, Lens, Out)
    torch.testing.assert_close(Out.double(), ref(A, Lens))


@RUNS
@pytest.mark.parametrize("d", [0, 1, 3, -5])
def test_guarded_division_agrees_with_torch(run, d):
    prog, ref = cp.guarded_division(256)
    k = tegula.compile(prog, target="sm_90a")
    D = torch.tensor([d], dtype=torch.int32)
    Out = torch.full((256,), -7, dtype=torch.int32)
    run(k, D, Out)
    torch.testing.assert_close(Out, ref(D))
