"""LayerNorm over the last dimension (tegula.kernels.layernorm) against torch, on the GPU."""
import pytest
import torch
import torch.nn.functional as F

from tegula.kernels import layer_norm
from tegula.kernels import layernorm as layernorm_module

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import (DTYPES, assert_close, dtype_id, assert_argument_error, norm_weight,
                        poison, randn, same_storage, seed_of)
except ImportError:
    from _util import (DTYPES, assert_close, dtype_id, assert_argument_error, norm_weight,
                       poison, randn, same_storage, seed_of)

pytestmark = pytest.mark.gpu

EPS = 1e-5
ALIGNED = [(4096, 1024), (256, 4096), (64, 512)]
RAGGED = [(1, 8), (3, 24), (17, 520), (1000, 4104), (33, 1000)]


def _inputs(shape, dtype, *tag, scale=1.0, offset=0.0):
    n = shape[-1]
    x = randn(shape, dtype, seed_of("x", shape, dtype, *tag), scale=scale, offset=offset)
    w = norm_weight(n, dtype, seed_of("w", shape, dtype, *tag))
    b = randn((n,), dtype, seed_of("b", shape, dtype, *tag), scale=0.1)
    return x, w, b


def _ref(x, w, b):
    return F.layer_norm(x.double(), (x.shape[-1],), w.double(), b.double(), EPS)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ALIGNED + RAGGED, ids=str)
def test_layer_norm_into_poisoned_output(shape, dtype):
    x, w, b = _inputs(shape, dtype)
    out = poison(shape, dtype)
    y = layer_norm(x, w, b, EPS, out=out)
    assert same_storage(y, out)
    assert_close(y, _ref(x, w, b), dtype, f"layer_norm {shape}")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_layer_norm_allocates_output_and_keeps_leading_dims(dtype):
    x, w, b = _inputs((3, 5, 1032), dtype, "nd")
    y = layer_norm(x, w, b, EPS)
    assert y.shape == x.shape and y.dtype == dtype
    assert_close(y, _ref(x, w, b), dtype, "layer_norm 3-D")


@pytest.mark.parametrize("shape", [(64, 1024), (17, 520)], ids=str)
def test_layer_norm_with_offset_mean(shape):
    """Rows whose mean is far from zero: the variance must be taken of centred values, and
    (for N=520, padded) the padding columns must not count as -mean after centring."""
    x, w, b = _inputs(shape, torch.float32, "offset", offset=8.0)
    assert_close(layer_norm(x, w, b, EPS), _ref(x, w, b), torch.float32, "layer_norm offset")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=dtype_id)
def test_jit_kernel_forms(dtype):
    n = 4104
    x, w, b = _inputs((9, n), dtype, "jit")
    returns_y = layernorm_module.kernel_for(n, dtype, EPS, allocates_output=True)
    assert_close(returns_y(x, w, b), _ref(x, w, b), dtype, "layer_norm out_idx=[-1]")
    out = poison((9, n), dtype)
    layernorm_module.kernel_for(n, dtype, EPS)(x, w, b, out)
    assert_close(out, _ref(x, w, b), dtype, "layer_norm preallocated Y")


def test_argument_errors():
    x, w, b = _inputs((4, 64), torch.float16, "errors")
    assert_argument_error(lambda: layer_norm(x.double(), w, b), r"layer_norm: x must")
    assert_argument_error(lambda: layer_norm(x.cpu(), w, b), r"layer_norm: x must")
    assert_argument_error(lambda: layer_norm(x, w.float(), b), r"layer_norm: weight must")
    assert_argument_error(lambda: layer_norm(x, w, b.cpu()), r"layer_norm: bias must")
    assert_argument_error(lambda: layer_norm(x, w, b[:8]), r"layer_norm: bias must have shape")
    assert_argument_error(lambda: layer_norm(x, w, None), r"layer_norm: bias must")
    # Any hidden size is taken (no multiple-of-8 refusal): a row of 36 is normalised.
    odd = randn((4, 36), torch.float16, 5)
    ow, ob = norm_weight(36, torch.float16, 6), norm_weight(36, torch.float16, 7)
    assert_close(layer_norm(odd, ow, ob), F.layer_norm(odd.double(), (36,), ow.double(), ob.double(), 1e-5),
                 torch.float16, "layer_norm N=36")
