"""Elementwise add with row broadcasting (tegula.kernels.elementwise) against torch."""
import pytest
import torch

from tegula.kernels import add
from tegula.kernels import elementwise as elementwise_module

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                        same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                       same_storage, seed_of)

pytestmark = pytest.mark.gpu

ALIGNED = [(4096, 1024), (256, 4096)]
# Row counts that leave a partial row tile, widths that leave a partial column tile.
RAGGED = [(1, 8), (3, 24), (17, 520), (1000, 4104), (33, 1000)]


def _ref(x, y):
    return x.double() + y.double()


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
def test_add_same_shape(shape, dtype):
    x = randn(shape, dtype, seed_of("x", shape, dtype))
    y = randn(shape, dtype, seed_of("y", shape, dtype))
    out = poison(shape, dtype)
    z = add(x, y, out=out)
    assert same_storage(z, out)
    assert_close(z, _ref(x, y), dtype, f"add {shape}")
    # fp32 math rounded once to dtype is exactly what torch computes.
    assert torch.equal(z, x + y)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
@pytest.mark.parametrize("row_shape", ["(N,)", "(1, N)"])
def test_add_broadcast_row(shape, dtype, row_shape):
    n = shape[-1]
    x = randn(shape, dtype, seed_of("x", shape, dtype, row_shape))
    y = randn((n,) if row_shape == "(N,)" else (1, n), dtype, seed_of("y", shape, dtype))
    out = poison(shape, dtype)
    z = add(x, y, out=out)
    assert_close(z, _ref(x, y), dtype, f"add {shape} + {row_shape}")
    assert torch.equal(z, x + y)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_add_leading_dims(dtype):
    x = randn((2, 3, 40), dtype, seed_of("nd", dtype))
    y = randn((40,), dtype, seed_of("nd-y", dtype))
    z = add(x, y)
    assert z.shape == x.shape and z.dtype == dtype
    assert torch.equal(z, x + y)
    y_full = randn((2, 3, 40), dtype, seed_of("nd-full", dtype))
    assert torch.equal(add(x, y_full), x + y_full)


def test_jit_kernel_forms():
    dtype, n = torch.float16, 1000
    x = randn((77, n), dtype, seed_of("jit-x"))
    y = randn((n,), dtype, seed_of("jit-y"))
    returns_z = elementwise_module.kernel_for(n, dtype, True, allocates_output=True)
    assert torch.equal(returns_z(x, y), x + y)
    out = poison((77, n), dtype)
    elementwise_module.kernel_for(n, dtype, True)(x, y, out)
    assert torch.equal(out, x + y)
    # M is dynamic: the same kernel object serves another row count.
    x2 = randn((5, n), dtype, seed_of("jit-x2"))
    out2 = poison((5, n), dtype)
    elementwise_module.kernel_for(n, dtype, True)(x2, y, out2)
    assert torch.equal(out2, x2 + y)


def test_argument_errors():
    x = randn((4, 64), torch.float16, seed_of("errors-x"))
    y = randn((4, 64), torch.float16, seed_of("errors-y"))
    assert_argument_error(lambda: add(x.double(), y.double()), r"add: x must")
    assert_argument_error(lambda: add(x.cpu(), y), r"add: x must")
    assert_argument_error(lambda: add(x, y.float()), r"add: y must")
    assert_argument_error(lambda: add(x, y.cpu()), r"add: y must")
    assert_argument_error(lambda: add(x, y[:, :32].contiguous()), r"add: y must have x's shape")
    assert_argument_error(lambda: add(x, y[:2].contiguous()), r"add: y must have x's shape")
    assert_argument_error(lambda: add(x, 1.0), r"add: y must")
    assert_argument_error(lambda: add(x, y, out=poison((4, 64), torch.float32)), r"add: out must")
