"""Transpose through shared memory (tegula.kernels.matrix_transpose) against torch, on the GPU."""
import importlib

import pytest
import torch

from tegula.kernels import transpose

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                        same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                       same_storage, seed_of)

pytestmark = pytest.mark.gpu

transpose_module = importlib.import_module("tegula.kernels.matrix_transpose")

ALIGNED = [(4096, 1024), (1024, 4096), (256, 256), (64, 64)]
# Tiles hanging over one edge, the other, or both; a single row; odd sizes whose rows are
# not 16-byte aligned.
RAGGED = [(1000, 1000), (1, 8), (8, 1), (17, 520), (520, 17), (33, 70), (65, 129)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
def test_transpose_into_poisoned_output(shape, dtype):
    x = randn(shape, dtype, seed_of("x", shape, dtype))
    out = poison((shape[1], shape[0]), dtype)
    y = transpose(x, out=out)
    assert same_storage(y, out)
    assert_close(y, x.double().t(), dtype, f"transpose {shape}")
    # A transpose moves values without arithmetic: it must be exact.
    assert torch.equal(y, x.t().contiguous())


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_transpose_allocates_output(dtype):
    x = randn((300, 200), dtype, seed_of("alloc", dtype))
    y = transpose(x)
    assert y.shape == (200, 300) and y.dtype == dtype and y.is_contiguous()
    assert torch.equal(y, x.t().contiguous())


def test_jit_kernel_forms():
    dtype, m, n = torch.bfloat16, 100, 72
    x = randn((m, n), dtype, seed_of("jit"))
    returns_y = transpose_module.kernel_for(m, n, dtype, allocates_output=True)
    assert torch.equal(returns_y(x), x.t().contiguous())
    out = poison((n, m), dtype)
    transpose_module.kernel_for(m, n, dtype)(x, out)
    assert torch.equal(out, x.t().contiguous())


def test_argument_errors():
    x = randn((16, 32), torch.float16, seed_of("errors"))
    assert_argument_error(lambda: transpose(x.double()), r"transpose: x must")
    assert_argument_error(lambda: transpose(x.cpu()), r"transpose: x must")
    assert_argument_error(lambda: transpose(x.view(2, 8, 32)), r"transpose: x must be a 2-D")
    assert_argument_error(lambda: transpose(x, out=poison((16, 32), torch.float16)),
                          r"transpose: out must")
    assert_argument_error(lambda: transpose("x"), r"transpose: x must")
