"""Data types: every spelling a user may write, reduced to one canonical name.

`T.float16`, "float16", "half", "fp16" and `torch.float16` all mean "float16". The
canonical names are the IR's (`DataType::name()` in src/ir/dtype.cc).
"""
from __future__ import annotations

import builtins

# spelling -> canonical name
_SPELLINGS = {
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float64": "float64", "double": "float64", "fp64": "float64",
    "int8": "int8", "int16": "int16", "int32": "int32", "int": "int32", "int64": "int64",
    "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "bool": "bool",
    "float8_e4m3fn": "float8_e4m3fn", "float8_e4m3": "float8_e4m3fn", "e4m3_float8": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2", "e5m2_float8": "float8_e5m2",
    "float8_e8m0fnu": "float8_e8m0fnu",
    # 4-bit types: packed two to a byte in global memory (a torch int8/uint8 tensor whose
    # last dimension is halved), a byte each on chip.
    "int4": "int4", "uint4": "uint4", "float4_e2m1fn": "float4_e2m1fn",
    # The tensor cores' tf32: a float32 of 10 mantissa bits, 32 bits in memory (a torch
    # float32 tensor); converting into it rounds, arithmetic on it is float32.
    "tfloat32": "tfloat32", "tf32": "tfloat32",
}

# Python types used as annotations or dtypes: `n: int`.
_PY_TYPES = {builtins.int: "int32", builtins.float: "float32", builtins.bool: "bool"}

FLOAT_TYPES = frozenset({"float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
                         "float4_e2m1fn", "tfloat32"})
# 8-bit floats are storage types: arithmetic on them computes in float32.
FLOAT8_TYPES = frozenset({"float8_e4m3fn", "float8_e5m2"})
# Storage types computed on in a wider type: the 8-bit and 4-bit floats in float32, the
# 4-bit integers in int32.
WIDENED_TYPES = {"float8_e4m3fn": "float32", "float8_e5m2": "float32", "float8_e8m0fnu": "float32",
                 "float4_e2m1fn": "float32", "int4": "int32", "uint4": "int32", "tfloat32": "float32"}
PACKED_TYPES = frozenset({"int4", "uint4", "float4_e2m1fn"})
# The torch dtypes a 4-bit tensor may be passed as (bytes of two elements).
PACKED_STORAGE = frozenset({"int8", "uint8", "float4_e2m1fn_x2"})
INT_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int4", "uint4"})

# The largest finite value of each floating type: a constant past it is refused where
# TileLang (TVM) refuses it.
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
             "float64": 1.7976931348623157e308, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0,
             "float8_e8m0fnu": 1.7014118346046923e38, "float4_e2m1fn": 6.0, "tfloat32": 3.4011621342146535e38}

# canonical name -> torch attribute: a 4-bit type's is the bytes that hold two elements
# (TileLang's choice; torch.float4_e2m1fn_x2 where this torch has it).
_TORCH_NAMES = {name: name for name in FLOAT_TYPES | INT_TYPES | {"bool"}}
_TORCH_NAMES.update({"tfloat32": "float32", "int4": "int8", "uint4": "uint8", "float4_e2m1fn": "float4_e2m1fn_x2"})


# (cast_value, unbound_var) of values.py, which registers them when it is imported (it is
# imported with the frontend, before any kernel code calls a dtype).
_VALUE_HOOKS: tuple = ()


class DType(str):
    """A dtype that is also its name (so it works anywhere a string does) and, called on a
    value, a cast: `T.float32(x)` (TileLang/TVM behaviour). The name is the canonical one,
    but for TileLang's own spellings of one type (T.float8_e4m3, the same CUDA type as
    T.float8_e4m3fn), which keep theirs; `.name` is always the canonical one."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return normalize_value_dtype(str(self))

    def __call__(self, value=None, *rest):
        cast_value, unbound_var = _VALUE_HOOKS  # set by values.py, which imports this module
        if rest:
            raise TypeError(f"T.{self}(...) takes one value; vector values such as T.bfloat16x2(a, b) "
                            "are not in Tegula")
        # TileLang: with no value, a fresh variable of this type (TVM's T.int32()).
        return unbound_var(self.name) if value is None else cast_value(value, self.name)

    def as_torch(self):
        """The torch dtype: `T.float16.as_torch()` is torch.float16 (TileLang's name); a 4-bit
        type's is the bytes of two (T.float4_e2m1fn and T.float4_e2m1fnx2: torch.float4_e2m1fn_x2)."""
        if str(self) == "float4_e2m1fnx2":
            return to_torch("float4_e2m1fn")
        return to_torch(self.name)

    @property
    def bits(self) -> int:
        return 4 if self.name in PACKED_TYPES else value_bits(self.name)

    @property
    def itemsize(self) -> int:
        return value_bits(self.name) // 8

    bytes = itemsize

    @property
    def lanes(self) -> int:
        vec = vector_lanes(str(self))
        return vec[1] if vec else 1

    def is_float(self) -> bool:
        return self.name in FLOAT_TYPES

    is_floating_point = is_float

    def __repr__(self):
        return f"T.{str(self)}"


def normalize_dtype(value) -> str:
    """The canonical name of any dtype spelling; ValueError naming the value otherwise."""
    if isinstance(value, str):
        name = _SPELLINGS.get(value.strip())
        if name is not None:
            return name
    elif isinstance(value, type) and value in _PY_TYPES:
        return _PY_TYPES[value]
    elif type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        name = _SPELLINGS.get(str(value).rsplit(".", 1)[-1])
        if name is not None:
            return name
    if str(value).rsplit(".", 1)[-1] in ("float4_e2m1fnx2", "float4_e2m1fn_x2"):
        raise ValueError(f"{value!r} (two e2m1 values a byte) is not an element type in Tegula: declare the tensor "
                         "T.float4_e2m1fn with its last dimension doubled (a torch.float4_e2m1fn_x2 tensor may be "
                         "passed for it)")
    known = ", ".join(sorted(set(_SPELLINGS.values())))
    raise ValueError(f"unknown dtype {value!r} (known: {known})")


def vector_lanes(name: str) -> tuple[str, int] | None:
    """("uint32", 4) for the vector dtype "uint32x4" (T.uint32x4: a value of 4 lanes, what
    T.reinterpret and the explicit-width loads give); None for anything else."""
    base, sep, lanes = str(name).strip().rpartition("x")
    if not sep or not lanes.isdigit() or base not in _SPELLINGS or _SPELLINGS[base] in ("bool", *PACKED_TYPES):
        return None
    if not 2 <= int(lanes) <= 32:
        return None
    return _SPELLINGS[base], int(lanes)


def normalize_value_dtype(value) -> str:
    """The canonical name of a scalar or vector dtype ("float32x2"); ValueError otherwise.
    Only values may be vectors: tensors and buffers take normalize_dtype's scalar types."""
    if isinstance(value, str):
        vec = vector_lanes(value)
        if vec is not None:
            return f"{vec[0]}x{vec[1]}"
    return normalize_dtype(value)


def value_bits(name: str) -> int:
    """Bits of a scalar or vector value: "float16" -> 16, "uint32x4" -> 128."""
    vec = vector_lanes(name)
    return 8 * itemsize(vec[0]) * vec[1] if vec else 8 * itemsize(name)


def is_dtype(value) -> bool:
    try:
        normalize_dtype(value)
    except (ValueError, TypeError):
        return False
    return True


def to_torch(name: str):
    import torch

    return getattr(torch, _TORCH_NAMES[normalize_dtype(name)], torch.int8)


def is_packed(name: str) -> bool:
    """A 4-bit type: two elements a byte in a tensor."""
    return str(name) in PACKED_TYPES


def is_float(name: str) -> bool:
    return name in FLOAT_TYPES


def is_int(name: str) -> bool:
    return name in INT_TYPES


def itemsize(name: str) -> int:
    """Bytes of one element: float16 -> 2, bool -> 1, float8_e4m3fn -> 1."""
    if name == "bool" or name in FLOAT8_TYPES or name == "float8_e8m0fnu" or name in PACKED_TYPES:
        return 1
    return int(name.lstrip("abcdefghijklmnopqrstuvwxyz")) // 8


def int_range(name: str) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype or bool: int8 -> (-128, 127),
    uint64 -> (0, 2**64 - 1), bool -> (0, 1)."""
    if name == "bool":
        return 0, 1
    bits = int(name.lstrip("uint"))
    if name.startswith("u"):
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
