"""`T.const` and `T.empty`: the declarations of an eager @tegula.jit function's body
(frontend/parse_eager.py parses the body; these only hand their request to it).

    M, N, K = T.const("M, N, K")     # sizes, bound from the call's tensor shapes
    A: T.Tensor((M, K), dtype)       # or from .compile(M=..., ...)
    C = T.empty((M, N), dtype)       # an output, allocated per call and returned
"""
from __future__ import annotations

import numbers
import re

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.dtypes import normalize_dtype
from ..frontend.errors import ArgError
from ..frontend.requests import EmptyRequest
from ..frontend.values import PrimExpr
from . import pointers

_OUTSIDE = ("can only be used in the body of an eager @tegula.jit function (one that declares its "
            "tensors in its body, `A: T.Tensor((M, K), dtype)`, instead of returning a T.prim_func)")


def _session(what: str):
    """The eager parse in progress; a clear error anywhere else."""
    if not builder._STACK:
        raise RuntimeError(f"{what} {_OUTSIDE}; such a function must be defined in a file, where its source "
                           "can be read")
    session = getattr(builder._STACK[-1], "eager", None)
    if session is None:
        raise ArgError(None, f"{what} {_OUTSIDE}")
    return session


@intrinsic("T.const")
def const(names, dtype="int32"):
    """Sizes fixed per compiled kernel: `M, N = T.const("M, N")` (commas or spaces). Each
    takes its value from the first parameter annotation that uses it as a whole dimension
    (`A: T.Tensor((M, K), ...)` binds M to the call's A.shape[0]), or from `.compile(M=...)`."""
    session = _session("T.const")
    if not isinstance(names, str):
        raise ArgError(0, f"T.const takes the names as one string, e.g. T.const(\"M, N\"), got {names!r}")
    split = [n for n in re.split(r"[,\s]+", names.strip()) if n]
    if not split or not all(n.isidentifier() for n in split):
        raise ArgError(0, f"T.const: {names!r} is not a list of names such as \"M, N\"")
    if not normalize_dtype(dtype).startswith(("int", "uint")):
        raise ArgError("dtype", f"T.const declares integer sizes; dtype {dtype!r} is not an integer type")
    values = tuple(session.const(n) for n in split)
    return values[0] if len(split) == 1 and not re.search(r"[,\s]", names.strip()) else values


@intrinsic("T.empty")
def empty(*shape, dtype="float32"):
    """An output tensor of an eager @tegula.jit function: `C = T.empty((M, N), dtype)` or
    `T.empty(M, N, dtype=dtype)`. It is allocated on every call and must be returned."""
    _session("T.empty")
    if shape and isinstance(shape[0], (tuple, list)):
        dims, rest = tuple(shape[0]), shape[1:]
        if len(rest) > 1:
            raise ArgError(2, "T.empty takes (shape, dtype): too many arguments")
        if rest:
            dtype = rest[0]
    else:
        dims = shape
    if not dims:
        raise ArgError(None, "T.empty needs a shape, e.g. T.empty((M, N), dtype)")
    for index, dim in enumerate(dims):
        sized = isinstance(dim, (numbers.Integral, PrimExpr)) or hasattr(dim, "__tegula_pending__")
        if isinstance(dim, bool) or not sized:
            raise ArgError(0 if shape and isinstance(shape[0], (tuple, list)) else index,
                           f"T.empty: each dimension must be an int, a T.const or a T.dynamic size, got {dim!r}")
    try:
        return EmptyRequest(dims, normalize_dtype(dtype))
    except ValueError as err:
        raise ArgError("dtype", f"T.empty: {err}") from None


@intrinsic("T.make_tensor")
def make_tensor(ptr, shape, dtype="float32", strides=None):  # noqa: A002 - TileLang's parameter name
    """`A = T.make_tensor(ptr, (M, K), dtype, strides=None)`: the global tensor at an
    address, row-major unless `strides` (in elements) are given. In a prim_func the address
    is a T.ptr parameter or a 64-bit integer read in the kernel (language/pointers.py); on
    a `A: T.ptr` parameter of an eager @tegula.jit body it declares A, as `A: T.Tensor((M,
    K), dtype)` would: the call's tensor must have this shape and dtype."""
    session = getattr(builder._STACK[-1], "eager", None) if builder._STACK else None
    if session is not None and session.is_pointer_parameter(ptr):
        return session.make_tensor(ptr, shape, dtype, strides)
    builder.current("T.make_tensor")
    return pointers.make_tensor(ptr, shape, dtype, strides)
