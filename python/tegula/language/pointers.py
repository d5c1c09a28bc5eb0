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
A as a tensor parameter of that shape instead (frontend/eager.py): the call passes a tensor.
"""
from __future__ import annotations

import numbers

from ..frontend.dtypes import is_packed, normalize_dtype
from ..frontend.errors import ArgError
from ..frontend.values import BufferValue, PrimExpr, VarBuffer, ir


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


class AddressRequest:
    """What `T.make_tensor(address, ...)` returns in a prim_func: the parser makes the tensor
    when it is assigned (`A = T.make_tensor(...)`, named A), binding an address read in the
    kernel in a let first."""

    __slots__ = ("address", "shape", "dtype", "strides")

    def __init__(self, address: PrimExpr, shape: tuple, dtype: str, strides: tuple):
        self.address, self.shape, self.dtype, self.strides = address, shape, dtype, strides

    def needs_let(self) -> bool:
        """An address computed or read here is held in a let; a variable is the address itself."""
        return self.address.reads or not self.address.expr.is_var

    def _unassigned(self, *args):
        raise TypeError("T.make_tensor: assign the tensor to a name first (`A = T.make_tensor(ptr, shape, dtype)`), "
                        "then use the name")

    __getitem__ = __setitem__ = _unassigned

    def __repr__(self):
        return f"T.make_tensor({self.address}, {self.shape}, {self.dtype})"


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
