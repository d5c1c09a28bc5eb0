"""The low-precision kernels as PyTorch operators: the FP8 GEMM with its three kinds of
scales, the FP8 activation quantization (alone and fused into RMSNorm) and the 4-bit-weight
GEMM. kernels/_ops.py registers them beside the others, in the same three layers (the public
function here, `_calls._call`, the module's eager entry point `_calls.EAGER[name]`).

None has a backward (the inputs are quantized, which has no useful gradient): each public
function refuses a floating input that requires grad, before anything runs. Each fake is the
kernel module's own `<name>_fake`, which runs the entry point's argument checks and gives
the outputs' shapes and dtypes; the ops return fresh tensors.

    fp8_gemm(a, b, scale_a, scale_b, bias, out_dtype)        kernels/scaled_gemm.py
    quantize_fp8(x, group_size, dtype, scale_ue8m0)           kernels/fp8_quantization.py
    rms_norm_quantize_fp8(x, weight, eps, ...)                kernels/fp8_quantization.py
    w4a16_gemm(x, qweight, scales, zeros, group_size, ...)    kernels/dequant_gemm.py
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _calls
from . import dequant_gemm as _w4, fp8_quantization as _quant, scaled_gemm as _fp8

Tensor = torch.Tensor

# The modules' public functions that become the operators' callers (see _ops._publish).
PUBLIC = {
    _fp8: ("fp8_gemm",), _quant: ("quantize_fp8", "rms_norm_quantize_fp8"), _w4: ("w4a16_gemm",),
}


def _eager(name: str):
    return _calls.EAGER[name]


def _fp8_gemm_impl(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, bias: Optional[Tensor],
                   out_dtype: str) -> Tensor:
    return _eager("fp8_gemm")(a, b, scale_a, scale_b, bias, out_dtype)


def _quantize_fp8_impl(x: Tensor, group_size: Optional[int], dtype: str, scale_ue8m0: bool) -> tuple[Tensor, Tensor]:
    return _eager("quantize_fp8")(x, group_size, dtype, scale_ue8m0)


def _rms_norm_quantize_fp8_impl(x: Tensor, weight: Tensor, eps: float, group_size: Optional[int], dtype: str,
                                scale_ue8m0: bool) -> tuple[Tensor, Tensor]:
    return _eager("rms_norm_quantize_fp8")(x, weight, eps, group_size, dtype, scale_ue8m0)


def _w4a16_gemm_impl(x: Tensor, qweight: Tensor, scales: Tensor, zeros: Optional[Tensor], group_size: int,
                     weight_format: str) -> Tensor:
    return _eager("w4a16_gemm")(x, qweight, scales, zeros, group_size, weight_format)


# (name, implementation, fake, backward, setup_context), as kernels/_ops.py registers them.
OPS = [
    ("fp8_gemm", _fp8_gemm_impl, _fp8.fp8_gemm_fake, None, None),
    ("quantize_fp8", _quantize_fp8_impl, _quant.quantize_fp8_fake, None, None),
    ("rms_norm_quantize_fp8", _rms_norm_quantize_fp8_impl, _quant.rms_norm_quantize_fp8_fake, None, None),
    ("w4a16_gemm", _w4a16_gemm_impl, _w4.w4a16_gemm_fake, None, None),
]


# ---------------------------------------------------------------------------------------
# The public functions (re-exported by tegula.kernels).

def _optional(op: str, name: str, value):
    return None if value is None else _calls._tensor(op, name, value)


# Each public function runs its module's argument checks before the call: a bad argument
# is named there even where the call is traced (a value the op's schema cannot take, such
# as a float group_size, would otherwise meet the dispatcher's own message first).


def fp8_gemm(a, b, scale_a, scale_b, bias=None, out_dtype: str = "bfloat16"):
    """(a · scale_a) @ (b · scale_b)ᵀ [+ bias]: a (M, K) and b (N, K) float8, float32 scales
    per tensor, per row or per block (DeepSeek-V3's 1x128 / 128x128). See the module
    `tegula.kernels.scaled_gemm`. No backward."""
    op = "fp8_gemm"
    a, b = _calls._tensor(op, "a", a), _calls._tensor(op, "b", b)
    scale_a, scale_b = _calls._tensor(op, "scale_a", scale_a), _calls._tensor(op, "scale_b", scale_b)
    bias = _optional(op, "bias", bias)
    _fp8.check_fp8_gemm_args(a, b, scale_a, scale_b, bias, out_dtype)
    _calls._refuse_all(op, a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias)
    return _calls._call(op, a, b, scale_a, scale_b, bias, out_dtype)


def quantize_fp8(x, group_size=None, dtype: str = "float8_e4m3fn", scale_ue8m0: bool = False):
    """(q, scales): x quantized to 8-bit floats per token (group_size None) or per group of
    group_size columns, with float32 scales, x ≈ q · scales. See the module
    `tegula.kernels.fp8_quantization`. No backward."""
    op = "quantize_fp8"
    x = _calls._tensor(op, "x", x)
    dtype = _quant.check_quantize_fp8_args(op, x, group_size, dtype, scale_ue8m0)
    _calls._refuse_all(op, x=x)
    return _calls._call(op, x, group_size, dtype, scale_ue8m0)


def rms_norm_quantize_fp8(x, weight, eps: float = 1e-6, group_size=None, dtype: str = "float8_e4m3fn",
                          scale_ue8m0: bool = False):
    """quantize_fp8 of RMSNorm(x) · weight in one pass (the normalised rows stay in float32
    registers). See the module `tegula.kernels.fp8_quantization`. No backward."""
    op = "rms_norm_quantize_fp8"
    x, weight = _calls._tensor(op, "x", x), _calls._tensor(op, "weight", weight)
    eps, dtype = _quant.check_rms_norm_quantize_fp8_args(op, x, weight, eps, group_size, dtype, scale_ue8m0)
    _calls._refuse_all(op, x=x, weight=weight)
    return _calls._call(op, x, weight, eps, group_size, dtype, scale_ue8m0)


def w4a16_gemm(x, qweight, scales, zeros=None, group_size: int = 128, weight_format: str = "int4"):
    """x @ Wᵀ with W (N, K) stored as 4-bit values two a byte (qweight (N, K/2)) and group
    scales: INT4 (symmetric, or with zero points) or FP4 e2m1 (e8m0 or e4m3 scales),
    dequantized in registers. See the module `tegula.kernels.dequant_gemm`. No backward."""
    op = "w4a16_gemm"
    x, qweight = _calls._tensor(op, "x", x), _calls._tensor(op, "qweight", qweight)
    scales, zeros = _calls._tensor(op, "scales", scales), _optional(op, "zeros", zeros)
    _w4.check_w4a16_gemm_args(x, qweight, scales, zeros, group_size, weight_format)
    _calls._refuse_all(op, x=x, scales=scales, zeros=zeros)
    return _calls._call(op, x, qweight, scales, zeros, group_size, weight_format)
