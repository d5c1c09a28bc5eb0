"""Kernels whose names are C++ keywords, CUDA built-ins, device-library names, the printer's
own names and reserved identifiers (tests/python/name_programs.py), run on the GPU against
torch: the renaming the CPU tests check in the source (test_cuda_names.py) also computes
the right values."""
import pytest
import torch

import tegula
from helpers import assert_close_rel
from name_programs import gemm_program, keyword_expected, keyword_program

pytestmark = pytest.mark.gpu


def test_keyword_names_run():
    kernel = tegula.compile(keyword_program(40), out_idx=[1])
    x = torch.randn(40, 64, device="cuda")
    y = kernel(x, 0.5, 3)
    assert_close_rel(y, keyword_expected(x, 0.5, 3), 1e-6)


def test_gemm_operands_named_like_the_printers_structs_run():
    kernel = tegula.compile(gemm_program(96, 64, 64), out_idx=[2])
    a = torch.randn(96, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    c = kernel(a, b)
    assert_close_rel(c, a.double() @ b.double(), 2e-3)
