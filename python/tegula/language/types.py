"""Types a kernel's signature is written with: dtypes, `T.Tensor`, `T.dynamic`, enums.

The spec a T.Tensor gives (TensorSpec) is the frontend's (frontend/params.py), which
reads signatures; T.Tensor and T.StridedTensor are its forms."""
from __future__ import annotations

import enum
import numbers
import re

from ..frontend.dtypes import DType, normalize_dtype
from ..frontend.params import TensorForm, TensorSpec, strided_spec
from ..frontend.values import PrimExpr

float16 = half = DType("float16")
bfloat16 = DType("bfloat16")
float32 = float = DType("float32")  # noqa: A001 - TileLang's name
float64 = double = DType("float64")
int8, int16, int32, int64 = DType("int8"), DType("int16"), DType("int32"), DType("int64")
uint8, uint16, uint32, uint64 = DType("uint8"), DType("uint16"), DType("uint32"), DType("uint64")
bool = DType("bool")  # noqa: A001 - TileLang's name
# 8-bit floats: storage (loads, stores, copies, casts); arithmetic on them is float32.
float8_e4m3fn = DType("float8_e4m3fn")
float8_e4m3 = DType("float8_e4m3")  # TileLang: a dtype of its own, the same CUDA and torch type as float8_e4m3fn
float8_e5m2 = DType("float8_e5m2")
float8_e8m0fnu = DType("float8_e8m0fnu")  # 2^(e - 127): MX block scales
# 4-bit types: two elements a byte in a tensor (a torch int8/uint8 tensor, the last
# dimension halved), a byte each on chip; arithmetic on them is float32 / int32.
int4, uint4, float4_e2m1fn = DType("int4"), DType("uint4"), DType("float4_e2m1fn")
# TileLang's pair of e2m1 values in one byte: named so that programs naming it import; a
# tensor of it is refused (declare float4_e2m1fn with the last dimension doubled).
float4_e2m1fnx2 = DType("float4_e2m1fnx2")
# tf32: a float32 of 10 mantissa bits, stored in 32 (a torch float32 tensor). Converting into
# it rounds to nearest, ties away from zero; arithmetic on it is float32; T.gemm on it (or
# on float32) runs on the tf32 tensor cores.
tfloat32 = DType("tfloat32")

DTYPES = ("float16", "half", "bfloat16", "float32", "float", "float64", "double", "int8", "int16",
          "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e4m3",
          "float8_e5m2", "float8_e8m0fnu", "int4", "uint4", "float4_e2m1fn", "tfloat32")


def dtype(name) -> DType:
    """Any spelling (string, torch dtype, T.float16) as a DType."""
    return DType(normalize_dtype(name))


def dynamic(name: str, dtype="int32"):
    """A shape dimension that varies without recompiling: `M = T.dynamic("m")`, created
    outside the prim_func and used in parameter shapes; its value comes from the tensors
    at launch. Several names at once, as in TileLang: `B, S = T.dynamic("batch, seq_len")`
    (commas, or spaces) gives a tuple of vars."""
    if isinstance(name, str) and ("," in name or " " in name.strip()):
        names = [n for n in re.split(r"[,\s]+", name.strip()) if n]
        if names and all(n.isidentifier() for n in names):
            return tuple(PrimExpr.var(n, normalize_dtype(dtype), dynamic=True) for n in names)
    if not isinstance(name, str) or not name.strip().isidentifier():
        raise ValueError(f"T.dynamic: name must be an identifier or names such as \"batch, seq_len\", got {name!r}")
    return PrimExpr.var(name.strip(), normalize_dtype(dtype), dynamic=True)


symbolic = dynamic


class _TensorType(TensorForm):
    """`T.Tensor((M, N), dtype)` and TileLang's subscript form `T.Tensor[(M, N), dtype]`
    (also `T.Tensor[[M, N], dtype]`, `T.Tensor[N, dtype]`, and `T.Tensor[(M, N)]` for
    float32): both give the TensorSpec of a global tensor parameter."""

    def __call__(self, shape, dtype="float32", data=None):
        # TileLang's T.Tensor(shape, dtype, buf.data) in a kernel: a view of buf.
        if data is not None:
            from .views import make_view

            return make_view(data, shape, "T.Tensor", dtype)
        return TensorSpec(shape, dtype)

    def __getitem__(self, item) -> TensorSpec:
        if isinstance(item, tuple) and len(item) == 2 and not isinstance(item[1], (numbers.Integral, PrimExpr)):
            return TensorSpec(item[0], item[1])
        return TensorSpec(item)

    def __repr__(self):
        return "T.Tensor"


Tensor = _TensorType()  # TileLang's name
Buffer = Tensor


class _StridedTensorType(TensorForm):
    """`T.StridedTensor((M, N), (s, 1), dtype)` and `T.StridedTensor[(M, N), (s, 1), dtype]`:
    a global tensor parameter whose strides (in elements) are given: ints, or T.dynamic vars
    read off the tensor at launch. Element [i, j] is at i * s + j * 1."""

    strided = True

    def __call__(self, shape, strides, dtype="float32"):
        return strided_spec(shape, strides, dtype)

    def __getitem__(self, item) -> TensorSpec:
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise ValueError("T.StridedTensor[shape, strides, dtype] takes a shape, strides and a dtype")
        return strided_spec(*item)

    def __repr__(self):
        return "T.StridedTensor"


StridedTensor = _StridedTensorType()  # TileLang's name


class ScopedBufferSpec(TensorSpec):
    """`buf: T.SharedBuffer([N], dtype)` (also T.FragmentBuffer, T.LocalBuffer): the
    annotation of a T.macro parameter that takes a buffer of that scope; a macro's
    arguments are the caller's buffers, so it documents the parameter."""

    def __init__(self, scope: str, shape, dtype="float32"):
        super().__init__(shape, dtype)
        self.scope = scope

    def __repr__(self):
        return f"T.{self.scope.capitalize()}Buffer({list(self.shape)}, {self.dtype})"


def SharedBuffer(shape, dtype="float32") -> ScopedBufferSpec:  # noqa: N802 - TileLang's name
    return ScopedBufferSpec("shared", shape, dtype)


def FragmentBuffer(shape, dtype="float32") -> ScopedBufferSpec:  # noqa: N802 - TileLang's name
    return ScopedBufferSpec("fragment", shape, dtype)


def LocalBuffer(shape, dtype="float32") -> ScopedBufferSpec:  # noqa: N802 - TileLang's name
    return ScopedBufferSpec("local", shape, dtype)


class GemmWarpPolicy(enum.Enum):
    """How T.gemm splits the tile among warps (TileLang's names)."""

    Square = "Square"
    FullRow = "FullRow"
    FullCol = "FullCol"
