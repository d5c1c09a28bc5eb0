"""Explicit-width memory accesses and bit reinterpretation, with TileLang's names and
meaning: `T.reinterpret`, `T.ldg32 / ldg64 / ldg128 / ldg256` and `T.stg*` (global memory),
`T.lds32 / lds64 / lds128` and `T.sts*` (shared memory), and the vector dtypes their
values have (`T.uint32x4`, `T.float32x2`, ...).

    v = T.ldg128(X[i * 4 : i * 4 + 4])               # one 16-byte load: a uint32x4
    Y[i * 4 : i * 4 + 4] = T.reinterpret(v, T.float32x4)
    T.stg32(Y[i], T.reinterpret(X[i], T.uint32), pred=i < n)

An access names the elements it covers: one element (`X[i]`) or a slice of the last
dimension (`X[i : i + 4]`), exactly 4, 8, 16 or 32 bytes of them. Each is one IR call
(ir/wide_access.h) whose address is a load of that many lanes; the printer spells it as
the device library's `load_global_64(...)` (kernels/include/tegula/ldst.h).
"""
from __future__ import annotations

import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.dtypes import DType, normalize_value_dtype, value_bits, vector_lanes
from ..frontend.errors import ArgError
from ..frontend.values import (BufferValue, LoadValue, PrimExpr, RegionValue, VarBuffer, binop, call, cast_value,
                               ir, to_expr)

_RAW = {32: "uint32", 64: "uint32x2", 128: "uint32x4", 256: "uint32x8"}


def _is_dtype_like(value) -> bool:
    try:
        normalize_value_dtype(value)
    except (ValueError, TypeError):
        return False
    return isinstance(value, str) or type(value).__name__ == "dtype"


def _scalar(value, fn: str, arg: str) -> PrimExpr:
    if isinstance(value, VarBuffer):
        value = value.load()
    if isinstance(value, bool):
        return cast_value(value, "bool")
    if isinstance(value, numbers.Integral):
        return cast_value(value, "int32")
    if isinstance(value, float):
        return cast_value(value, "float32")
    if not isinstance(value, PrimExpr):
        raise ArgError(arg, f"{fn}: '{arg}' must be a kernel value or a number, got {value!r}")
    return value


@intrinsic("T.reinterpret")
def reinterpret(value, dtype):
    """`T.reinterpret(x, T.uint32)`: x's bits as a value of `dtype`, which has x's width
    (float32 <-> uint32, float16 / bfloat16 <-> uint16, uint32x4 <-> float32x4, ...)."""
    if _is_dtype_like(value) and not _is_dtype_like(dtype):
        value, dtype = dtype, value  # TVM's older order: T.reinterpret(dtype, value)
    try:
        target = normalize_value_dtype(dtype)
    except (ValueError, TypeError) as err:
        raise ArgError("dtype", f"T.reinterpret: {err}") from None
    value = _scalar(value, "T.reinterpret", "value")
    source = str(value.expr.dtype)
    if source == "bool":
        raise ArgError("value", "T.reinterpret: a bool has no bit pattern of its own; cast it to an integer first")
    if value_bits(source) != value_bits(target):
        raise ArgError("dtype", f"T.reinterpret: {target} ({value_bits(target)} bits) has not the width of the "
                                f"value, a {source} ({value_bits(source)} bits); reinterpret between types of one "
                                "width, or T.cast to change the width")
    if source == target:
        return value
    return call("reinterpret", [value], target)


def _address(ref, fn: str, arg: str, scope: str, bits: int):
    """The load of `bits` / 8 bytes of elements an access names, as (IR load, buffer)."""
    if isinstance(ref, VarBuffer) or not isinstance(ref, (LoadValue, RegionValue, BufferValue)):
        raise ArgError(arg, f"{fn}: '{arg}' must be an element or slice of a {scope} buffer (X[i], "
                            f"X[i : i + n]), got {ref!r}")
    if isinstance(ref, BufferValue):
        ref = ref.full_region()
    buffer = ref.buffer
    if buffer.scope != scope:
        raise ArgError(arg, f"{fn}: '{buffer.name}' is a {buffer.scope} buffer; {fn} accesses {scope} memory")
    if isinstance(ref, LoadValue):
        mins, count = list(ref.indices), 1
    else:
        mins, count = list(ref.mins), None
        for dim, extent in enumerate(ref.extents):
            if not isinstance(extent, numbers.Integral):
                raise ArgError(arg, f"{fn}: the slice of '{buffer.name}' must have a constant length in dimension "
                                    f"{dim}, got {extent}")
            if dim + 1 < len(ref.extents) and extent != 1:
                raise ArgError(arg, f"{fn}: the slice of '{buffer.name}' must be contiguous: one element in every "
                                    f"dimension but the last (dimension {dim} has {extent})")
            count = extent
    elem_bits = 8 * buffer.dtype.itemsize
    if count * elem_bits != bits:
        raise ArgError(arg, f"{fn} moves {bits // 8} bytes, but '{buffer.name}[...]' names {count} {buffer.dtype} "
                            f"element(s), {count * elem_bits // 8} bytes: give {bits // elem_bits} element(s)"
                            if bits % elem_bits == 0 else
                            f"{fn} moves {bits // 8} bytes, which is no whole number of {buffer.dtype} elements")
    exprs = [to_expr(m, "int32") for m in mins]
    return PrimExpr(ir().load(buffer.buf, exprs, count), True), buffer


def _pred(pred, fn: str):
    if pred is None:
        return None
    if isinstance(pred, bool):
        return None if pred else cast_value(False, "bool")
    pred = _scalar(pred, fn, "pred")
    if pred.expr.dtype != "bool":
        pred = binop("ne", pred, 0)
    return pred


def _load(scope: str, bits: int, letter: str):
    name = f"T.ld{letter}{bits}"

    @intrinsic(name)
    def fn(src, pred=None):
        addr, buffer = _address(src, name, "src", scope, bits)
        p = _pred(pred, name)
        args = [addr] if p is None else [addr, p]
        return call(f"load_{scope}_{bits}", args, _RAW[bits])

    fn.__name__ = fn.__qualname__ = f"ld{letter}{bits}"
    fn.__doc__ = (f"{name}(src, pred=None): one {bits // 8}-byte load from {scope} memory of the elements `src` "
                  f"names (X[i] or X[i : i + n], {bits // 8} bytes), as its raw bits, a {_RAW[bits]}; with `pred`, "
                  "nothing is read where it is false and the value is 0.")
    return fn


def _store(scope: str, bits: int, letter: str):
    name = f"T.st{letter}{bits}"

    @intrinsic(name)
    def fn(dst, value, pred=None):
        addr, buffer = _address(dst, name, "dst", scope, bits)
        v = _scalar(value, name, "value")
        if value_bits(str(v.expr.dtype)) != bits:
            raise ArgError("value", f"{name} stores {bits} bits, but the value is a {v.expr.dtype} "
                                    f"({value_bits(str(v.expr.dtype))} bits): T.reinterpret it to {_RAW[bits]}")
        p = _pred(pred, name)
        args = [addr, v] if p is None else [addr, v, p]
        frame = builder.current(name)
        frame.require_kernel(name)
        frame.emit(ir().evaluate(ir().call(f"store_{scope}_{bits}", [a.expr for a in args], "int32")))

    fn.__name__ = fn.__qualname__ = f"st{letter}{bits}"
    fn.__doc__ = (f"{name}(dst, value, pred=None): one {bits // 8}-byte store into {scope} memory of the elements "
                  f"`dst` names, from a value of {bits} bits (a {_RAW[bits]}, or any type of that width); with "
                  "`pred`, nothing is written where it is false.")
    return fn


ldg32, ldg64, ldg128, ldg256 = (_load("global", b, "g") for b in (32, 64, 128, 256))
stg32, stg64, stg128, stg256 = (_store("global", b, "g") for b in (32, 64, 128, 256))
lds32, lds64, lds128 = (_load("shared", b, "s") for b in (32, 64, 128))
sts32, sts64, sts128 = (_store("shared", b, "s") for b in (32, 64, 128))

# Vector dtypes of at most 256 bits (the widest access): T.float32x2, T.uint32x8, T.int8x16, ...
VECTOR_DTYPES = {f"{base}x{lanes}": DType(f"{base}x{lanes}")
                 for base in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                              "float16", "bfloat16", "float32", "float64")
                 for lanes in (2, 4, 8, 16, 32) if value_bits(f"{base}x{lanes}") <= 256}
assert all(vector_lanes(n) for n in VECTOR_DTYPES)
