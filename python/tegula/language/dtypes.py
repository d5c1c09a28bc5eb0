"""TileLang's tilelang.language.dtypes: the dtype objects (T.float16, ...), the torch
dtype a tensor of each is stored as, and the other way: the dtype's name of a torch dtype.

    resolve_torch_storage_dtype(T.int4)           # T.int8: two elements a byte
    resolve_torch_storage_dtype(T.float4_e2m1fn)  # T.float4_e2m1fnx2 where torch has it, else T.int8
    dtype(_TORCH_DTYPE_TO_STR[torch.half])        # T.float16
"""
from __future__ import annotations

import torch

from ..frontend.dtypes import PACKED_TYPES, DType, normalize_dtype
from .types import (DTYPES, bfloat16, bool, double, dtype, float, float4_e2m1fn, float4_e2m1fnx2, float8_e4m3,  # noqa: F401
                    float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float16, float32, float64, half, int4, int8, int16,
                    int32, int64, tfloat32, uint4, uint8, uint16, uint32, uint64)

# torch attribute -> the dtype of that name (where the two spell it differently)
_FROM_TORCH = {"float4_e2m1fn_x2": "float4_e2m1fnx2"}


def resolve_torch_storage_dtype(value) -> DType:
    """The dtype whose torch dtype holds a tensor of `value`: the dtype itself, or for a
    4-bit type the byte that holds two of its elements (what `.as_torch()` gives)."""
    name = str(DType(normalize_dtype(value)).as_torch()).rsplit(".", 1)[-1]
    return DType(_FROM_TORCH.get(name, name))


def _torch_names() -> dict:
    """Each torch dtype this torch has that is a tensor dtype here -> its canonical name
    (torch.half -> "float16"); a 4-bit float's pair of elements keeps TileLang's name."""
    out = {}
    for name in sorted(set(dir(torch))):
        value = getattr(torch, name)
        if not isinstance(value, torch.dtype):
            continue
        if name == "float4_e2m1fn_x2":
            out[value] = "float4_e2m1fnx2"
            continue
        try:
            canonical = normalize_dtype(value)
        except ValueError:
            continue  # complex, quantised and the other torch dtypes kernels do not take
        if canonical not in PACKED_TYPES:  # torch.int4 is not how a T.int4 tensor is passed
            out[value] = canonical
    return out


# TileLang's table, which its programs index with a tensor's dtype.
_TORCH_DTYPE_TO_STR = _torch_names()
