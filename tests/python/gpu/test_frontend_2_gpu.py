"""The kernels of tests/python/cpu/test_frontend_2.py, launched: comprehensions and
generator expressions (compile-time over Python values, expressions over kernel values)."""
import importlib.util
import pathlib

import pytest
import torch

import tegula

pytestmark = pytest.mark.gpu

_spec = importlib.util.spec_from_file_location(
    "frontend_2_cpu", pathlib.Path(__file__).parents[1] / "cpu" / "test_frontend_2.py")
cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu)


def test_generator_expressions_on_the_gpu():
    kernel = tegula.compile(cpu.block_sums(cpu.SIZES, 4))
    x = torch.randn(sum(cpu.SIZES), 4, device="cuda")
    out = torch.full((len(cpu.SIZES) + 1,), float("nan"), device="cuda")
    kernel(x, out)
    torch.testing.assert_close(out.cpu(), cpu.block_sums_torch(x.cpu(), cpu.SIZES, 4))


def test_const_before_its_annotation_on_the_gpu():
    kernel = cpu.padded_window_sums(1).compile(torch.empty(19, device="cuda"), torch.empty(3, 3, device="cuda"))
    x, w = torch.randn(19, device="cuda"), torch.randn(3, 3, device="cuda")
    torch.testing.assert_close(kernel(x, w).cpu(), cpu.window_torch(x.cpu(), w.cpu(), 1))
