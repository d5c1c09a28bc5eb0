"""Raw pointers in a kernel, with TileLang's meaning: `T.ptr`, and `T.make_tensor` of an
address.

    @T.prim_func
    def gemm(a_ptr: T.ptr, c_ptr: T.ptr, m: T.int32):     # pointer parameters
        A = T.make_tensor(a_ptr, (m, 64), T.float16)       # the tensor at a_ptr
        ...

    @T.prim_func
    def grouped(A_ptrs: T.Tensor([G], T.ptr), ...):        # a table of addresses (int64)
        with T.Kernel(G, threads=128) as g:
            A = T.make_tensor(A_ptrs[g], (M, K), T.float16)  # the tensor at one of them
            ...

A `T.ptr` parameter is an address the launch takes from a CUDA tensor (its data_ptr) or an
int (`tensor.data_ptr()`), `None` giving a null one; `T.Tensor(shape, T.ptr)` is an int64
tensor of addresses. `T.make_tensor(address, shape, dtype, strides=None)` is the global
tensor of that shape and dtype (row-major unless strides, in elements, are given) at the
address: a T.ptr parameter, or a 64-bit integer the kernel computes or reads, held from
where the tensor is made on (a let of the kernel), so later changes to what it was read
from do not move the tensor. Nothing checks what lies at an address, as in TileLang: an
access past the memory there is the program's error (tegula.testing.reference and
simulate report it). The generated code reads such a tensor in vectors of up to 16 bytes,
so its address must be a multiple of 16, as torch's allocations are; a T.ptr parameter's
is checked at launch, an address read in the kernel cannot be.

In an eager @tegula.jit body, `A: T.ptr` then `A = T.make_tensor(A, shape, dtype)` declares
A as a tensor parameter of that shape instead (frontend/parse_eager.py): the call passes a
tensor. `T.ptr` and the PointerValue a pointer parameter is in the body are the frontend's
(frontend/params.py), which reads signatures; the address request is frontend/requests.py's.
"""
from __future__ import annotations

import numbers

from ..frontend.dtypes import is_packed, normalize_dtype
from ..frontend.errors import ArgError
from ..frontend.params import PointerSpec, PointerValue, is_pointer_annotation, ptr, table_dtype  # noqa: F401
from ..frontend.requests import AddressRequest
from ..frontend.values import BufferValue, PrimExpr, VarBuffer


def _extents(values, what: str, positive: bool) -> tuple:
    values = tuple(values) if isinstance(values, (tuple, list)) else (values,)
    for index, v in enumerate(values):
        if isinstance(v, VarBuffer):
            v = v.load()
        ok = isinstance(v, numbers.Integral) and not isinstance(v, bool) and (v > 0 if positive else v >= 0)
        ok = ok or (isinstance(v, PrimExpr) and str(v.expr.dtype).startswith(("int", "uint")) and not v.reads)
        if not ok:
            raise ArgError(what, f"T.make_tensor: each entry of {what} must be an int{' > 0' if positive else ''} or "
                           f"an integer kernel value that reads no buffer (name a value read from one first), "
                           f"got {v!r} at position {index}")
    return tuple(int(v) if isinstance(v, numbers.Integral) else v for v in values)


def make_tensor(ptr, shape, dtype="float32", strides=None) -> AddressRequest:  # noqa: A002 - TileLang's name
    """`A = T.make_tensor(address, shape, dtype, strides=None)` in a prim_func (see the
    module docstring)."""
    try:
        dtype = normalize_dtype(dtype)
    except ValueError as err:
        raise ArgError("dtype", f"T.make_tensor: {err}") from None
    if is_packed(dtype):
        raise ArgError("dtype", f"T.make_tensor: a tensor of {dtype} at an address is not supported (4-bit types are "
                       "packed two a byte); make it a uint8 tensor and unpack its bytes")
    dims = _extents(shape, "shape", True)
    if not dims:
        raise ArgError("shape", "T.make_tensor: the shape needs at least one dimension")
    steps = ()
    if strides is not None:
        steps = _extents(strides, "strides", False)
        if len(steps) != len(dims):
            raise ArgError("strides", f"T.make_tensor: {len(steps)} strides for {len(dims)} dimensions")
    if isinstance(ptr, VarBuffer):
        ptr = ptr.load()
    if isinstance(ptr, PointerValue):
        if ptr.pointee is not None and ptr.pointee != dtype:
            raise ArgError("dtype", f"T.make_tensor: '{ptr}' is T.ptr({ptr.pointee}), the tensor {dtype}")
        return AddressRequest(ptr, dims, dtype, steps)
    if isinstance(ptr, PrimExpr) and str(ptr.expr.dtype) in ("int64", "uint64"):
        return AddressRequest(ptr, dims, dtype, steps)
    if isinstance(ptr, BufferValue):
        got = f"the tensor '{ptr.name}' (to see a tensor under another shape use T.reshape or T.view)"
    elif isinstance(ptr, PrimExpr):
        got = f"a {ptr.expr.dtype} value"
    else:
        got = repr(ptr)
    raise ArgError("ptr", "T.make_tensor: the address must be a T.ptr parameter or a 64-bit integer (an element of a "
                   f"T.Tensor(shape, T.ptr) table, or a value computed from one), got {got}")
