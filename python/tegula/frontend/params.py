"""What a kernel's parameters are declared with, beside a dtype: the spec of a global
tensor and the raw pointer, which the parser reads off a signature (`parse_params`) or an
eager body's declarations (parse_eager.py).

    def gemm(A: T.Tensor((M, K), "float16"),          # TensorSpec((M, K), float16)
             S: T.StridedTensor((M, K), (s, 1)),      # TensorSpec with strides (strided_spec)
             a_ptr: T.ptr,                            # a pointer: PointerValue in the body
             n: T.int32): ...

The language (language/types.py, language/pointers.py) gives them their T.* names; they
live here, below it, so the parser needs nothing above the frontend to read a signature.
"""
from __future__ import annotations

import numbers

from .dtypes import DType, normalize_dtype
from .values import PrimExpr, ir


class PointerSpec:
    """What `T.ptr` stands for: `T.ptr` itself, or `T.ptr(dtype)` (which also fixes the
    dtype `T.make_tensor` must give at the address)."""

    __slots__ = ("dtype", "storage_scope")

    def __init__(self, dtype=None, storage_scope: str = "global"):
        self.dtype = dtype
        self.storage_scope = storage_scope

    def __repr__(self):
        return "T.ptr()" if self.dtype is None else f"T.ptr({self.dtype})"


def ptr(dtype=None, storage_scope: str = "global", *, is_size_var: bool = False) -> PointerSpec:  # noqa: ARG001
    """`a: T.ptr` (or `T.ptr(dtype)`): a parameter that is an address in global memory, made
    a tensor with `T.make_tensor(a, shape, dtype)`; `T.Tensor(shape, T.ptr)`: a table of
    such addresses (an int64 tensor). `is_size_var` is TVM's flag, accepted and ignored."""
    if storage_scope != "global":
        raise ValueError(f"T.ptr: storage_scope must be 'global' (only global pointers are kernel parameters), "
                         f"got {storage_scope!r}")
    if dtype is not None:
        try:
            dtype = normalize_dtype(dtype)
        except ValueError as err:
            raise ValueError(f"T.ptr: dtype: {err}") from None
    return PointerSpec(dtype, storage_scope)


def is_pointer_annotation(value) -> bool:
    """`T.ptr` itself or `T.ptr(...)`: a parameter passed as a pointer."""
    return value is ptr or isinstance(value, PointerSpec)


def table_dtype(dtype):
    """`T.Tensor(shape, T.ptr)`: a table of addresses is an int64 tensor (TileLang's)."""
    return "int64" if is_pointer_annotation(dtype) else dtype


def _refuse_arithmetic(self, *args):
    raise TypeError(f"'{self}' is a T.ptr parameter, an address: it takes no arithmetic; make it a tensor with "
                    f"T.make_tensor({self}, shape, dtype) and index that")


class PointerValue(PrimExpr):
    """A T.ptr parameter in the kernel: its variable (of dtype handle) and the dtype
    `T.ptr(dtype)` gave, if any."""

    __slots__ = ("pointee",)

    @classmethod
    def parameter(cls, name: str, spec) -> "PointerValue":
        value = cls(ir().var(name, "handle"), tag="address")  # no value: frontend/values.py refuses it
        value.pointee = spec.dtype if isinstance(spec, PointerSpec) else None
        return value

    def __repr__(self):
        return f"PointerValue({self.expr})"


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "floordiv", "rfloordiv", "mod",
            "rmod", "lt", "le", "gt", "ge", "eq", "ne", "lshift", "rlshift", "rshift", "rrshift", "xor", "rxor", "and",
            "rand", "or", "ror", "neg", "invert", "abs", "pow"):
    setattr(PointerValue, f"__{_op}__", _refuse_arithmetic)
PointerValue.__hash__ = object.__hash__


class TensorSpec:
    """`A: T.Tensor((M, N), "float16")`: a global tensor parameter; `strides` set for a
    T.StridedTensor."""

    strides = ()

    def __init__(self, shape, dtype="float32"):
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        for dim in dims:
            ok = (isinstance(dim, numbers.Integral) and not isinstance(dim, type(True)) and dim > 0) or (
                isinstance(dim, PrimExpr) and dim.expr.dtype.startswith("int"))
            if not ok:
                raise ValueError(f"T.Tensor: each shape entry must be a positive int or a T.dynamic "
                                 f"var, got {dim!r} in {shape!r}")
        self.shape = tuple(int(d) if isinstance(d, numbers.Integral) else d for d in dims)
        self.dtype = DType(normalize_dtype(table_dtype(dtype)))

    def __repr__(self):
        if self.strides:
            return f"T.StridedTensor({list(self.shape)}, {list(self.strides)}, {self.dtype})"
        return f"T.Tensor({list(self.shape)}, {self.dtype})"


def strided_spec(shape, strides, dtype="float32") -> TensorSpec:
    spec = TensorSpec(shape, dtype)
    given = tuple(strides) if isinstance(strides, (tuple, list)) else (strides,)
    if len(given) != len(spec.shape):
        raise ValueError(f"T.StridedTensor: {len(given)} strides for {len(spec.shape)} dimensions "
                         f"(shape {list(spec.shape)}, strides {list(given)})")
    for stride in given:
        ok = (isinstance(stride, numbers.Integral) and not isinstance(stride, type(True)) and stride >= 0) or (
            isinstance(stride, PrimExpr) and stride.expr.dtype.startswith("int"))
        if not ok:
            raise ValueError(f"T.StridedTensor: each stride must be a non-negative int or a T.dynamic var, got "
                             f"{stride!r} in {list(given)}")
    spec.strides = tuple(int(d) if isinstance(d, numbers.Integral) else d for d in given)
    return spec


class TensorForm:
    """The class of `T.Tensor` and `T.StridedTensor` (language/types.py), whose calls and
    subscripts give a TensorSpec. An eager body's declarations are read without calling
    them (a dimension may still be a T.const without a value; parse_eager.py): `strided`
    says whether the form takes strides after the shape."""

    strided = False
