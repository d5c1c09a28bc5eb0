"""Tensor helpers with the names and meaning of `tilelang.utils.tensor`.

    from tegula.utils.tensor import torch_assert_close, map_torch_type, TensorSupplyType

    torch_assert_close(out, ref, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.01)

`torch_assert_close` passes when at most `max_mismatched_ratio` of the elements lie outside
`atol + rtol * |ref|` (torch.isclose), so a kernel whose rounding differs from the
reference on a few elements still checks out; past that it raises AssertionError with the
count, the first mismatch and the largest errors. Shapes always have to agree; device,
dtype and layout too unless their `check_*` flag is off (then both sides are brought to
the CPU and a common dtype first).
"""
from __future__ import annotations

import torch

from ..profiler import TensorSupplyType, make_tensor

__all__ = ["torch_assert_close", "map_torch_type", "get_tensor_supply", "TensorSupplyType", "is_float8_dtype"]

# TVM's spellings of the 8-bit floats (as TileLang programs write them) -> torch's names.
_FLOAT8_NAMES = {
    "float8_e4m3": "float8_e4m3fn", "e4m3_float8": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2", "e5m2_float8": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz",
}


def map_torch_type(name) -> torch.dtype:
    """The torch dtype of a dtype written as a TileLang program writes it: "float16",
    "float8_e4m3", T.bfloat16, or a torch dtype (returned as is)."""
    if isinstance(name, torch.dtype):
        return name
    text = str(name)
    if text in _FLOAT8_NAMES and hasattr(torch, _FLOAT8_NAMES[text]):
        return getattr(torch, _FLOAT8_NAMES[text])
    from ..frontend.dtypes import is_dtype, to_torch

    if is_dtype(text):
        return to_torch(text)
    found = getattr(torch, text, None)
    if isinstance(found, torch.dtype):
        return found
    raise ValueError(f"map_torch_type: {name!r} names no torch dtype")


def is_float8_dtype(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def get_tensor_supply(supply_type: TensorSupplyType = TensorSupplyType.Integer):
    """A function from a kernel parameter (anything with `.shape` and a torch `.dtype`, as
    `kernel.params` holds) to a new tensor on the current CUDA device (the CPU without one),
    filled as `supply_type` says."""
    def supply(param) -> torch.Tensor:
        shape = list(param.shape)
        if not shape or any(not isinstance(d, int) for d in shape):
            raise ValueError(f"get_tensor_supply: parameter {getattr(param, 'name', '?')!r} has shape {shape}: "
                             "a tensor can only be made for a static shape")
        device = f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu"
        return make_tensor(shape, map_torch_type(param.dtype), supply_type, device=device)

    return supply


def _check_attributes(a: torch.Tensor, b: torch.Tensor, device: bool, dtype: bool, layout: bool, stride: bool):
    checks = [("shape", True, a.shape, b.shape), ("layout", layout, a.layout, b.layout),
              ("device", device, a.device, b.device), ("dtype", dtype, a.dtype, b.dtype)]
    if stride and a.layout == b.layout == torch.strided:
        checks.append(("stride()", True, a.stride(), b.stride()))
    for what, checked, left, right in checks:
        if checked and left != right:
            raise AssertionError(f"The values for attribute '{what}' do not match: {left} != {right}.")


def _common_form(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both on one device, in one dtype (unsigned wide integers as int64), strided."""
    if a.device != b.device:
        a, b = a.cpu(), b.cpu()
    if a.dtype != b.dtype:
        wide_unsigned = {getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)}
        left = torch.int64 if a.dtype in wide_unsigned else a.dtype
        right = torch.int64 if b.dtype in wide_unsigned else b.dtype
        common = torch.promote_types(left, right)
        a, b = a.to(common), b.to(common)
    a = a.to_dense() if a.layout != torch.strided else a
    b = b.to_dense() if b.layout != torch.strided else b
    return a, b


def torch_assert_close(tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, verbose: bool = False,
                       equal_nan: bool = True, check_device: bool = True, check_dtype: bool = True,
                       check_layout: bool = True, check_stride: bool = False, base_name: str = "LHS",
                       ref_name: str = "RHS"):
    """Returns True when all but `max_mismatched_ratio` of the elements of `tensor_a` are
    close to `tensor_b` (torch.isclose with rtol, atol, equal_nan); AssertionError otherwise.
    The number allowed to differ is `int(numel * max_mismatched_ratio)`."""
    _check_attributes(tensor_a, tensor_b, check_device, check_dtype, check_layout, check_stride)
    a, b = _common_form(tensor_a, tensor_b)
    if a.dtype == torch.bool:
        a, b = a.to(torch.uint8), b.to(torch.uint8)
    mismatch = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)
    bad, total = int(mismatch.sum().item()), a.numel()
    allowed = int(total * max_mismatched_ratio)
    if verbose:
        print(f"Number of mismatched elements: {bad} / {total} (allowed: {allowed})")
    if bad <= allowed:
        return True
    flat = int(torch.argmax(mismatch.reshape(-1).to(torch.int32)).item())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape)] if a.dim() else []
    left, right = a.reshape(-1)[flat].item(), b.reshape(-1)[flat].item()
    diff = (a.double() - b.double()).abs()
    rel = diff / (b.double().abs() + 1e-12)
    raise AssertionError(
        f"Too many mismatched elements: {bad} > {allowed} ({max_mismatched_ratio * 100:.2f}% allowed, "
        f"but get {bad / total * 100:.2f}%).\n"
        f"First mismatch at index {index}: lhs={left:.6f}, rhs={right:.6f}, abs_diff={abs(left - right):.6f}, "
        f"rel_diff={abs(left - right) / (abs(right) + 1e-12):.6f}\n"
        f"Greatest absolute difference: {diff.max().item()}, Greatest relative difference: {rel.max().item()}\n"
        f"{base_name}: {tensor_a}\n{ref_name}: {tensor_b}")
