"""Views: one buffer's elements under another shape, with no copy.

    A_r = T.reshape(A_shared, [N // M, M])          # A_r[i, j] is A_shared[i * M + j]
    w = T.Tensor((KH * KW * C, F), dtype, weight.data)   # the parameter `weight`, flattened

A view shares its buffer's dtype and scope and reads its elements in row-major order; it
may be indexed, copied, filled and used in T.Parallel loops like the buffer itself. The
pass resolve_views rewrites every access into one of the buffer's.
"""
from __future__ import annotations

import math
import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.dtypes import DType, normalize_dtype
from ..frontend.errors import ArgError
from ..frontend.values import BufferData, BufferValue, PrimExpr


def _dims(shape, fn: str) -> tuple:
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for index, dim in enumerate(dims):
        ok = (isinstance(dim, numbers.Integral) and not isinstance(dim, bool) and dim > 0) or (
            isinstance(dim, PrimExpr) and dim.expr.dtype.startswith("int"))
        if not ok:
            raise ArgError("shape", f"{fn}: each entry of the shape must be a positive int or an integer "
                           f"expression, got {dim!r} in {shape!r}", index)
    return tuple(int(d) if isinstance(d, numbers.Integral) else d for d in dims)


def _same_count(a: tuple, b: tuple) -> bool:
    """Whether two shapes hold the same number of elements, where that can be known now:
    both constant, or the same symbolic dimensions times equal constants."""
    def split(shape):
        const = math.prod(d for d in shape if isinstance(d, int))
        return const, sorted(str(d) for d in shape if not isinstance(d, int))
    return split(a) == split(b)


def make_view(base, shape, fn: str, dtype=None) -> BufferValue:
    if isinstance(base, BufferData):
        base = base.buffer
    if not isinstance(base, BufferValue):
        raise ArgError(0, f"{fn}: expects a buffer (a parameter or a T.alloc_* buffer), got {base!r}")
    dims = _dims(shape, fn)
    if dtype is not None and normalize_dtype(dtype) != str(base.dtype):
        return _reinterpreting_view(base, dims, normalize_dtype(dtype), fn)
    if not _same_count(dims, tuple(base.shape)):
        counts = ""
        if all(isinstance(d, int) for d in (*dims, *base.shape)):
            counts = f": {math.prod(dims)} elements against {math.prod(base.shape)}"
        # TileLang asserts this: the error is also an AssertionError.
        raise ArgError("shape", f"{fn}: a view must hold as many elements as '{base.name}' "
                       f"(shape {list(base.shape)}), got shape {list(dims)}{counts}", kind=AssertionError)
    return builder.current(fn).view(base, dims)


def _reinterpreting_view(base: BufferValue, dims: tuple, dtype: str, fn: str) -> BufferValue:
    """A view of another dtype: each of its elements is the bytes of `ratio` consecutive
    elements of `base` (4 or 8 bytes, read and written as one access), so the two hold
    the same bytes. A view element narrower than base's would write part of an element
    another thread may be writing: refused."""
    have, want = DType(str(base.dtype)), DType(dtype)
    if base.scope not in ("shared", "global"):
        raise ArgError("dtype", f"{fn}: a view of '{base.name}' as {dtype} reinterprets its bytes, which only a "
                       f"shared or global buffer can be seen through ('{base.name}' is {base.scope})")
    if have.bits < 8 or want.bits not in (32, 64) or want.bits % have.bits != 0:
        raise ArgError("dtype", f"{fn}: a view of '{base.name}' ({base.dtype}) as {dtype}: each element of the view "
                       f"must be 4 or 8 bytes and a whole number of {base.dtype} elements; view a buffer of "
                       f"narrower elements as the wider type instead")
    ratio = want.bits // have.bits
    last = base.shape[-1]
    if isinstance(last, int) and last % ratio != 0:
        raise ArgError("dtype", f"{fn}: a view of '{base.name}' as {dtype} takes {ratio} of its elements each, but "
                       f"its rows have {last} elements, not a multiple of {ratio}")
    if not _same_count(tuple(dims) + (ratio,), tuple(base.shape)):
        raise ArgError("shape", f"{fn}: a view of '{base.name}' (shape {list(base.shape)}, {base.dtype}) as {dtype} "
                       f"must hold as many bytes: {ratio} of its elements per element, got shape {list(dims)}")
    return builder.current(fn).view(base, dims, dtype)


@intrinsic("T.reshape")
def reshape(src, shape):
    """`T.reshape(buf, shape)`: `buf`'s elements, in row-major order, under `shape` (the
    same number of elements); no copy: writes through the view change `buf`."""
    return make_view(src, shape, "T.reshape")


@intrinsic("T.view")
def view(src, shape=None, dtype=None):
    """`T.view(buf, shape=None, dtype=None)`: like T.reshape; `dtype`, when given, must be
    the buffer's own."""
    base = src.buffer if isinstance(src, BufferData) else src
    return make_view(src, base.shape if shape is None and isinstance(base, BufferValue) else shape, "T.view", dtype)
