"""Softmax over the last dimension (tegula.kernels.row_softmax) against torch, on the GPU."""
import importlib

import pytest
import torch

from tegula.kernels import softmax

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                        same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_close, dtype_id, assert_argument_error, poison, randn,
                       same_storage, seed_of)

pytestmark = pytest.mark.gpu

softmax_module = importlib.import_module("tegula.kernels.row_softmax")

ALIGNED = [(4096, 1024), (256, 4096), (64, 512)]
RAGGED = [(1, 8), (3, 24), (17, 520), (1000, 4104), (33, 1000)]


def _ref(x):
    return torch.softmax(x.double(), dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
def test_softmax_into_poisoned_output(shape, dtype):
    x = randn(shape, dtype, seed_of("x", shape, dtype), scale=2.0)
    out = poison(shape, dtype)
    y = softmax(x, out=out)
    assert same_storage(y, out)
    assert_close(y, _ref(x), dtype, f"softmax {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_softmax_allocates_output_and_keeps_leading_dims(dtype):
    x = randn((2, 7, 520), dtype, seed_of("nd", dtype))
    y = softmax(x)
    assert y.shape == x.shape and y.dtype == dtype
    assert_close(y, _ref(x), dtype, "softmax 3-D")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_softmax_is_stable_for_large_logits(dtype):
    """Logits in the hundreds overflow exp() unless the row max is subtracted first; the
    offset also makes every padding column's -inf matter (N=1000 is padded)."""
    x = randn((64, 1000), dtype, seed_of("large", dtype), scale=20.0, offset=200.0)
    y = softmax(x)
    assert_close(y, _ref(x), dtype, "softmax large logits")
    sums = y.double().sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=5e-2 if dtype != torch.float32 else 1e-5)


def test_softmax_negative_rows():
    """All-negative rows: a padding column that loaded as 0 would win the max."""
    x = -randn((16, 520), torch.float32, seed_of("neg"), scale=1.0).abs() - 5.0
    assert_close(softmax(x), _ref(x), torch.float32, "softmax negative rows")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
def test_jit_kernel_forms(dtype):
    n = 1000
    x = randn((19, n), dtype, seed_of("jit", dtype))
    returns_y = softmax_module.kernel_for(n, dtype, allocates_output=True)
    assert_close(returns_y(x), _ref(x), dtype, "softmax out_idx=[-1]")
    out = poison((19, n), dtype)
    softmax_module.kernel_for(n, dtype)(x, out)
    assert_close(out, _ref(x), dtype, "softmax preallocated Y")


def test_argument_errors():
    x = randn((4, 64), torch.float16, seed_of("errors"))
    assert_argument_error(lambda: softmax(x.double()), r"softmax: x must")
    assert_argument_error(lambda: softmax(x.cpu()), r"softmax: x must")
    assert_argument_error(lambda: softmax(None), r"softmax: x must")
    odd = randn((4, 20), torch.float16, 1)  # any hidden size is taken
    assert_close(softmax(odd), torch.softmax(odd.double(), -1), torch.float16, "softmax N=20")
    assert_argument_error(lambda: softmax(x, out=poison((4, 64), torch.float32)),
                          r"softmax: out must")
