"""Row reductions (tegula.kernels.reduce: row_sum, row_max) against torch, on the GPU."""
import pytest
import torch

from tegula.kernels import reduce as reduce_module
from tegula.kernels import row_max, row_sum

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                        same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                       same_storage, seed_of)

pytestmark = pytest.mark.gpu

ALIGNED = [(4096, 1024), (256, 4096), (64, 512)]
RAGGED = [(1, 8), (3, 24), (17, 520), (1000, 4104), (33, 1000)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
def test_row_sum(shape, dtype):
    # An offset keeps the sums away from zero, where a relative error means little.
    x = randn(shape, dtype, seed_of("sum", shape, dtype), offset=0.5)
    out = poison(shape[:-1], dtype)
    y = row_sum(x, out=out)
    assert same_storage(y, out)
    assert_close(y, x.double().sum(-1), dtype, f"row_sum {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
def test_row_max(shape, dtype):
    x = randn(shape, dtype, seed_of("max", shape, dtype))
    out = poison(shape[:-1], dtype)
    y = row_max(x, out=out)
    assert same_storage(y, out)
    # The max of rounded inputs is one of them: exact.
    assert torch.equal(y, x.amax(-1)), f"row_max {shape}: differs from x.amax(-1)"


@pytest.mark.parametrize("shape", [(17, 520), (5, 1000)], ids=str)
def test_row_max_of_negative_rows_ignores_padding(shape):
    """Padding columns load as zero; in an all-negative row a zero would win the max."""
    x = -randn(shape, torch.float32, seed_of("negmax", shape)).abs() - 1.0
    assert torch.equal(row_max(x), x.amax(-1))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reductions_keep_leading_dims(dtype):
    x = randn((2, 3, 64), dtype, seed_of("nd", dtype), offset=0.5)
    s = row_sum(x)
    assert s.shape == (2, 3) and s.dtype == dtype
    assert_close(s, x.double().sum(-1), dtype, "row_sum 3-D")
    assert torch.equal(row_max(x), x.amax(-1))


def test_jit_kernel_forms():
    dtype, n = torch.float16, 520
    x = randn((37, n), dtype, seed_of("jit"), offset=0.5)
    returns_o = reduce_module.kernel_for(n, dtype, "sum", allocates_output=True)
    o = returns_o(x)
    assert tuple(o.shape) == (37, 1)
    assert_close(o.view(-1), x.double().sum(-1), dtype, "row_sum out_idx=[-1]")
    out = poison((37, 1), dtype)
    reduce_module.kernel_for(n, dtype, "max")(x, out)
    assert torch.equal(out.view(-1), x.amax(-1))


def test_argument_errors():
    x = randn((4, 64), torch.float16, seed_of("errors"))
    for fn, name in ((row_sum, "row_sum"), (row_max, "row_max")):
        assert_argument_error(lambda: fn(x.double()), rf"{name}: x must")
        assert_argument_error(lambda: fn(x.cpu()), rf"{name}: x must")
        odd = randn((4, 10), torch.float16, 1)  # any hidden size is taken
        ref = odd.double().sum(-1) if name == "row_sum" else odd.double().amax(-1)
        assert_close(fn(odd), ref, torch.float16, f"{name} N=10")
        assert_argument_error(lambda: fn(x, out=poison((4, 1), torch.float16)),
                              rf"{name}: out must")
