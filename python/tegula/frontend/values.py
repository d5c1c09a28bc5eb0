"""The values a kernel's expressions evaluate to, besides plain Python values.

* `PrimExpr`   a scalar IR expression (`tegula._C.ir.Expr`); Python operators build IR.
* `LoadValue`  `A[i, j]`: a PrimExpr that also remembers the element it reads, so it can
               name a corner region in a tile op or the target of `T.atomic_add`.
* `BufferValue` a buffer; `buf[...]` with a slice gives a `RegionValue`.
* `VarBuffer`  `T.alloc_var`: a one-element local buffer that reads and writes like a name.

A Python number meeting a PrimExpr takes the PrimExpr's type when both are of one kind
(TVM's rule, so `x_f16 * 2` stays float16): otherwise int -> int32, float -> float32.

Integer PrimExprs built from vars with + - and * by constants also carry a linear form,
so `A[bx * 64:(bx + 1) * 64]` has the Python extent 64, not an expression to simplify; an
integer term that is not linear (tx // 16) counts as a variable of its own.
"""
from __future__ import annotations

import math
import numbers

from ..env import native
from . import dtypes as _dtypes
from .dtypes import WIDENED_TYPES, DType, int_range, is_float, is_int
from .errors import ArgError

_IR = None


def ir():
    """`tegula._C.ir`, imported on first use."""
    global _IR
    if _IR is None:
        _IR = native().ir
    return _IR


_INT32_RANGE = range(-(2**31), 2**31)
_INT64_RANGE = range(-(2**63), 2**63)


def int_const(value: int, dtype: str):
    """The constant `value` of an integer dtype or bool; a value past the dtype's range is
    the user's error, naming both (uint64 takes all of 0 .. 2**64 - 1)."""
    lo, hi = int_range(dtype)
    if not lo <= value <= hi:
        raise ValueError(f"the constant {value} is out of the range of {dtype} ({lo} .. {hi})")
    return ir().int_imm(value, dtype)


def const(value, dtype: str | None = None):
    """A Python number as an IR constant; `dtype` is the type of the operand it meets."""
    if isinstance(value, bool):
        return ir().int_imm(int(value), "bool")
    if isinstance(value, numbers.Integral):
        value = int(value)
        if dtype is not None and is_float(dtype):
            return ir().float_imm(float(value), dtype)
        if dtype in ("int32", "int64") and value in _INT64_RANGE:
            # The index types: a size past 2**31 meeting an int32 index stays as written, and
            # the printer indexes such tensors in 64 bits (cuda_printer.h: kIndex32Limit).
            return ir().int_imm(value, dtype)
        if dtype is not None and is_int(dtype):
            return int_const(value, dtype)
        if value not in _INT64_RANGE:
            raise ValueError(f"the constant {value} is out of the range of int64 ({_INT64_RANGE.start} .. "
                             f"{_INT64_RANGE.stop - 1}); an unsigned 64-bit constant is written T.uint64({value})")
        return ir().int_imm(value, "int32" if value in _INT32_RANGE else "int64")
    if isinstance(value, numbers.Real):
        return ir().float_imm(float(value), dtype if dtype is not None and is_float(dtype) else "float32")
    raise TypeError(f"expected a number or a kernel expression, got {type(value).__name__} {value!r}")


def is_number(value) -> bool:
    return isinstance(value, numbers.Real)


def _refuse_address(value: "PrimExpr") -> None:
    """A T.ptr parameter (tag "address", language/pointers.py) is no value of the kernel."""
    if value.tag == "address":
        raise TypeError(f"'{value.expr}' is a T.ptr parameter, an address: its one use is "
                        f"T.make_tensor({value.expr}, shape, dtype), the tensor there")


def constant_int(value):
    """value as a Python int when it is a kernel expression of an integer constant (a
    T.int32(4), a folded product); value itself otherwise, for the caller's own check."""
    if isinstance(value, PrimExpr) and value.expr.const is not None and is_int(value.expr.dtype):
        return int(value.expr.const)
    return value


def to_expr(value, dtype: str | None = None):
    """PrimExpr or number -> `_C.ir.Expr`."""
    if isinstance(value, PrimExpr):
        _refuse_address(value)
        return value.expr
    if isinstance(value, VarBuffer):
        return value.load().expr
    return const(value, dtype)


def _reads(*values) -> bool:
    return any(isinstance(v, PrimExpr) and v.reads for v in values)


def _dyn(*values) -> tuple:
    out: list = []
    for v in values:
        if isinstance(v, PrimExpr):
            out.extend(d for d in v.dyn if all(d is not o for o in out))
    return tuple(out)


# ---- linear forms: (constant, {id(var expr): (var expr, coefficient)}) ----

def _linear(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return (int(value), {})
    return value.lin if isinstance(value, PrimExpr) else None


def _lin_add(a, b, sign):
    terms = dict(a[1])
    for key, (var, coef) in b[1].items():
        total = terms.get(key, (var, 0))[1] + sign * coef
        if total:
            terms[key] = (var, total)
        else:
            terms.pop(key, None)
    return (a[0] + sign * b[0], terms)


def _lin_mul(a, b):
    if a[1] and b[1]:
        return None  # not linear
    scale, form = (a[0], b) if not a[1] else (b[0], a)
    if scale == 0:
        return (0, {})
    return (form[0] * scale, {k: (v, c * scale) for k, (v, c) in form[1].items()})


_LINEAR_OPS = {
    "add": lambda a, b: _lin_add(a, b, 1),
    "sub": lambda a, b: _lin_add(a, b, -1),
    "mul": _lin_mul,
}


_IDENTITIES = {"add": ("add", 0), "sub": ("sub", 0), "mul": ("mul", 1)}

_BITWISE = {"bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}


def _require_integers(op: str, *dtypes) -> None:
    """Bitwise operators mean nothing on floating-point values (CUDA rejects them): a
    user error at the operator, not code NVRTC refuses."""
    for dtype in dtypes:
        if dtype is not None and is_float(dtype):
            raise TypeError(f"operator {op} needs integer (or bool) operands, got {dtype}; cast with "
                            f"T.cast(x, \"int32\") first if the bits are meant")


def binop(op: str, a, b):
    """a op b for PrimExprs and numbers. A linear integer result that turns out constant
    is returned as a Python int."""
    a, b = _widen_float8(a), _widen_float8(b)
    _require_scalars(op, a, b)
    da = a.expr.dtype if isinstance(a, PrimExpr) else None
    db = b.expr.dtype if isinstance(b, PrimExpr) else None
    if op in _BITWISE:
        _require_integers(_BITWISE[op], da, db, *("float32" for v in (a, b) if isinstance(v, float)))
    lin = None
    combine = _LINEAR_OPS.get(op)
    if combine is not None and (da is None or is_int(da)) and (db is None or is_int(db)):
        la, lb = _linear(a), _linear(b)
        if la is not None and lb is not None:
            lin = combine(la, lb)
            if lin is not None and not lin[1]:
                return lin[0]
    identity = _IDENTITIES.get(op)
    if identity is not None and lin is not None:  # x + 0, 0 + x, x - 0, x * 1, 1 * x
        if type(b) is int and b == identity[1]:
            return a
        if op != "sub" and type(a) is int and a == identity[1]:
            return b
    expr = ir().binary(op, to_expr(a, db), to_expr(b, da))
    reads = _reads(a, b)
    if lin is None and not reads and is_int(expr.dtype):
        # Not linear (tx // 16, i % 4): a term of its own, so the same value on both sides of
        # a slice cancels (`x[c // 2:c // 2 + 8]` has extent 8). A linear form by a constant
        # is the same term however often it is written; anything else is itself.
        la = _linear(a)
        same = (op, la[0], frozenset((k, coef) for k, (_, coef) in la[1].items()), b) \
            if la is not None and type(b) is int else id(expr)
        lin = (0, {same: (expr, 1)})
    return PrimExpr(expr, reads, _dyn(a, b), lin=lin)


def _require_scalars(what: str, *values) -> None:
    """A vector value (T.ldg128's uint32x4) is only stored, reinterpreted or let-bound."""
    for v in values:
        if isinstance(v, PrimExpr) and "x" in str(v.expr.dtype) and _dtypes.vector_lanes(str(v.expr.dtype)):
            raise TypeError(f"'{what}' on the vector value {v.expr} ({v.expr.dtype}): a vector can be stored "
                            "(T.stg*, a slice Y[i : i + n]) or T.reinterpret-ed; reinterpret it to a scalar "
                            "type of its width for arithmetic")


def _widen_float8(value):
    """An 8-bit or 4-bit float operand as float32, a 4-bit integer as int32: they are
    storage types, computed on in the wider type (CUDA has no arithmetic on them)."""
    if isinstance(value, PrimExpr) and str(value.expr.dtype) in WIDENED_TYPES:
        return cast_value(value, WIDENED_TYPES[str(value.expr.dtype)])
    return value


def call(name: str, args: list, dtype: str, tag: str | None = None) -> "PrimExpr":
    if str(dtype) in WIDENED_TYPES and any(isinstance(a, PrimExpr) and str(a.expr.dtype) in WIDENED_TYPES
                                           for a in args):
        args, dtype = [_widen_float8(a) for a in args], WIDENED_TYPES[str(dtype)]
    exprs = [to_expr(a) for a in args]
    return PrimExpr(ir().call(name, exprs, str(dtype)), _reads(*args), _dyn(*args), tag=tag)


def cast_value(value, dtype: str):
    """`value` as `dtype`: a constant of that type for numbers, a cast node otherwise."""
    from .dtypes import normalize_dtype

    dtype = normalize_dtype(dtype)
    if isinstance(value, VarBuffer):
        value = value.load()
    if not isinstance(value, PrimExpr):
        if not is_number(value):
            raise TypeError(f"expected a number or a kernel expression for a {dtype} value, got "
                            f"{type(value).__name__} {value!r}")
        if dtype == "bool":
            return PrimExpr(ir().int_imm(int(bool(value)), "bool"))
        if is_int(dtype):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"the constant {value} cannot be converted to {dtype}")
            return PrimExpr(int_const(int(value), dtype))
        return PrimExpr(ir().float_imm(float(value), dtype))
    _refuse_address(value)
    if value.expr.dtype == dtype:
        return value
    _require_scalars(f"cast to {dtype}", value)
    return PrimExpr(ir().cast(dtype, value.expr), value.reads, value.dyn)


_UNBOUND_COUNT = [0]


class DeclaredVar:
    """`x = T.int32()` in a kernel: a variable with no value until `T.let(x, value)` binds
    it for the rest of the block. Once bound, the name reads as the variable (the
    evaluator's lookup); before, any use of it is an error naming it."""

    __slots__ = ("dtype", "var", "bound")

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.var: PrimExpr | None = None  # named by the parser after the name it is assigned to
        self.bound = False

    def name_as(self, name: str) -> None:
        if self.var is None:
            self.var = PrimExpr.var(name, self.dtype)

    def _unbound(self, *args):
        name = "it" if self.var is None else f"'{self.var}'"
        raise TypeError(f"{name} is declared with T.{self.dtype}() and has no value yet: bind it with "
                        f"T.let({'x' if self.var is None else self.var}, value) before using it")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unbound
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __lt__ = __le__ = __gt__ = __ge__ = _unbound
    __neg__ = __bool__ = __index__ = __int__ = __float__ = refuse_as_value = _unbound
    __hash__ = object.__hash__


def unbound_var(dtype: str):
    """`T.int32()`: in TileLang (TVMScript) a fresh variable of that type. Outside a kernel
    Tegula gives the same, a symbolic size like `T.dynamic` (named v0, v1, ...). Inside one
    a DeclaredVar, which `T.let(x, value)` binds for the rest of its block."""
    from .stack import STACK

    if STACK:
        return DeclaredVar(dtype)
    _UNBOUND_COUNT[0] += 1
    return PrimExpr.var(f"v{_UNBOUND_COUNT[0] - 1}", dtype, dynamic=True)


def _operator(op, reflected=False):
    def method(self, other):
        if not (isinstance(other, (PrimExpr, VarBuffer)) or is_number(other)):
            return NotImplemented
        if isinstance(other, VarBuffer):
            other = other.load()
        return binop(op, other, self) if reflected else binop(op, self, other)

    method.__name__ = f"__{'r' if reflected else ''}{op}__"
    return method


def _logic_or_bits(logic_op, bit_op):
    # `&` on two booleans is TVM's logical and; on integers it is bitwise.
    def method(self, other, reflected=False):
        if not (isinstance(other, PrimExpr) or is_number(other)):
            return NotImplemented
        both_bool = self.expr.dtype == "bool" and (isinstance(other, bool) or
                                                   (isinstance(other, PrimExpr) and other.expr.dtype == "bool"))
        op = logic_op if both_bool else bit_op
        return binop(op, other, self) if reflected else binop(op, self, other)

    return method, lambda self, other: method(self, other, True)


class PrimExpr:
    """A scalar expression of the kernel. `reads` is True when it loads from a buffer
    (then binding it to a name needs a let, see parser); `dyn` lists the T.dynamic vars it
    uses; `tag` marks special calls (infinity) that negate to another call."""

    __slots__ = ("expr", "reads", "dyn", "tag", "lin")

    def __init__(self, expr, reads: bool = False, dyn: tuple = (), tag: str | None = None, lin=None):
        self.expr = expr
        self.reads = reads
        self.dyn = dyn
        self.tag = tag
        self.lin = lin

    @classmethod
    def var(cls, name: str, dtype: str = "int32", dynamic: bool = False) -> "PrimExpr":
        expr = ir().var(name, dtype)
        value = cls(expr)
        if dynamic:
            value.dyn = (value,)
        if is_int(dtype):
            value.lin = (0, {id(expr): (expr, 1)})
        return value

    @property
    def dtype(self) -> DType:
        return DType(self.expr.dtype)

    @property
    def name(self) -> str:
        return str(self.expr)

    def __str__(self):
        return str(self.expr)

    def __repr__(self):
        return f"PrimExpr({self.expr}: {self.expr.dtype})"

    def __bool__(self):
        raise TypeError(
            f"the kernel value `{self.expr}` has no truth value while the kernel is parsed: "
            "use it in an `if`, `and`/`or`, T.if_then_else, T.max or T.min instead of a Python "
            "function that branches on it"
        )

    __hash__ = object.__hash__

    __add__, __radd__ = _operator("add"), _operator("add", True)
    __sub__, __rsub__ = _operator("sub"), _operator("sub", True)
    __mul__, __rmul__ = _operator("mul"), _operator("mul", True)
    # `/` is "div": truncating for two integers (C, TVMScript), true division otherwise.
    __truediv__, __rtruediv__ = _operator("div"), _operator("div", True)
    __floordiv__, __rfloordiv__ = _operator("floordiv"), _operator("floordiv", True)
    __mod__, __rmod__ = _operator("floormod"), _operator("floormod", True)
    __lt__, __le__ = _operator("lt"), _operator("le")
    __gt__, __ge__ = _operator("gt"), _operator("ge")
    __eq__, __ne__ = _operator("eq"), _operator("ne")
    __lshift__, __rlshift__ = _operator("shl"), _operator("shl", True)
    __rshift__, __rrshift__ = _operator("shr"), _operator("shr", True)
    __xor__, __rxor__ = _operator("bitxor"), _operator("bitxor", True)
    __and__, __rand__ = _logic_or_bits("and", "bitand")
    __or__, __ror__ = _logic_or_bits("or", "bitor")

    def __neg__(self):
        flipped = {"infinity": "ninfinity", "ninfinity": "infinity"}.get(self.tag)
        if flipped is not None:
            return call(flipped, [], self.expr.dtype, tag=flipped)
        return binop("sub", 0, self)

    def __pos__(self):
        return self

    def astype(self, dtype) -> "PrimExpr":
        """TileLang's `x.astype(T.uint16)`: the same as `T.cast(x, T.uint16)`."""
        return cast_value(self, dtype)

    def __abs__(self):
        return call("abs", [self], self.expr.dtype)

    def __invert__(self):
        if self.expr.dtype == "bool":
            return PrimExpr(ir().not_(self.expr), self.reads, self.dyn)
        _require_integers("~", self.expr.dtype)
        dtype = str(self.expr.dtype)
        # All ones of the type: -1, or 2**bits - 1 for an unsigned one (-1 is past its range).
        ones = -1 if not dtype.startswith("u") else (1 << (8 * _dtypes.itemsize(dtype))) - 1
        return binop("bitxor", self, ones)

    def __pow__(self, exponent):
        # No pow intrinsic in the IR: small integer powers multiply, halves take roots.
        roots = {0.5: "sqrt", -0.5: "rsqrt"}
        if exponent in roots:
            return call(roots[exponent], [self], self.expr.dtype)
        if isinstance(exponent, int) and 1 <= exponent <= 8:
            result = self
            for _ in range(exponent - 1):
                result = binop("mul", result, self)
            return result
        raise TypeError(f"x ** {exponent!r}: only integer powers 1..8 and 0.5/-0.5 are supported; "
                        "use T.exp2/T.log2 for others")


def _constant(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, PrimExpr) and is_int(value.expr.dtype):
        return value.expr.const
    return None


def check_constant_bounds(buffer: "BufferValue", indices: list, extents: list | None = None) -> None:
    """A constant index outside a shared, fragment or local buffer is the user's mistake,
    found here at their line. (Global tensors are left alone: T.Parallel and T.copy mask
    accesses past a tensor's edge.)"""
    if buffer.scope == "global":
        return
    for dim, (index, size) in enumerate(zip(indices, buffer.shape)):
        value = _constant(index)
        if value is None or not isinstance(size, numbers.Integral):
            continue
        extent = 1 if extents is None else _constant(extents[dim])
        if extent is None:
            continue
        if value < 0 or value + max(extent, 1) > size:
            what = f"index {value}" if extent == 1 else f"region {value}:{value + extent}"
            raise IndexError(f"{what} is out of bounds for dimension {dim} of {buffer.scope} buffer "
                             f"'{buffer.name}' of shape ({', '.join(str(d) for d in buffer.shape)})")


class LoadValue(PrimExpr):
    """`buf[i, j]` with scalar indices."""

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer: "BufferValue", indices: list):
        check_constant_bounds(buffer, indices)
        expr = ir().load(buffer.buf, [to_expr(i, "int32") for i in indices])
        super().__init__(expr, True, _dyn(*indices))
        self.buffer = buffer
        self.indices = indices


class RegionValue:
    """A rectangle of a buffer: per-dimension mins and extents (ints or PrimExprs)."""

    __slots__ = ("buffer", "mins", "extents")

    def __init__(self, buffer: "BufferValue", mins: list, extents: list):
        self.buffer = buffer
        self.mins = mins
        self.extents = extents

    def native(self):
        return (self.buffer.buf, [to_expr(m, "int32") for m in self.mins],
                [to_expr(e, "int32") for e in self.extents])

    def __repr__(self):
        dims = ", ".join(f"{m}:+{e}" for m, e in zip(self.mins, self.extents))
        return f"{self.buffer.name}[{dims}]"


def _extent(stop, start):
    return binop("sub", stop, start) if isinstance(stop, PrimExpr) or isinstance(start, PrimExpr) else stop - start


def _check_index(value, dim: int, name: str):
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or
                                       (isinstance(value, PrimExpr) and is_int(value.expr.dtype))):
        raise TypeError(f"index {dim} of buffer {name} must be an integer, got {value!r}")


class BufferValue:
    """A buffer of the kernel: a parameter or an allocation."""

    __slots__ = ("buf", "name", "shape", "dtype", "scope", "strides")

    def __init__(self, buf, name: str, shape: tuple, dtype: str, scope: str, strides: tuple = ()):
        self.strides = tuple(strides)  # T.StridedTensor: ints and T.dynamic PrimExprs
        self.buf = buf
        self.name = name
        self.shape = tuple(shape)  # Python ints where constant, PrimExprs otherwise
        self.dtype = DType(dtype)
        self.scope = scope

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"Buffer({self.name}: {self.scope} {self.dtype}{list(self.shape)})"

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > self.ndim:
            raise IndexError(f"buffer {self.name} has {self.ndim} dimension(s), got {len(key)} indices")
        mins, extents, sliced = [], [], len(key) < self.ndim
        for dim, item in enumerate(key):
            if isinstance(item, slice):
                if item.step not in (None, 1):
                    raise IndexError(f"buffer {self.name}: slices with a step are not supported")
                start = 0 if item.start is None else item.start
                stop = self.shape[dim] if item.stop is None else item.stop
                _check_index(start, dim, self.name)
                _check_index(stop, dim, self.name)
                mins.append(start)
                extents.append(_extent(stop, start))
                sliced = True
            else:
                if isinstance(item, VarBuffer):
                    item = item.load()
                _check_index(item, dim, self.name)
                mins.append(item)
                extents.append(1)
        if not sliced:
            return LoadValue(self, mins)
        for dim in range(len(key), self.ndim):
            mins.append(0)
            extents.append(self.shape[dim])
        check_constant_bounds(self, mins, extents)
        return RegionValue(self, mins, extents)

    def full_region(self) -> RegionValue:
        return RegionValue(self, [0] * self.ndim, list(self.shape))

    def store_refusal(self) -> str | None:
        """Why `buf[i] = v` may not store into this buffer, or None: a reducer holding its
        threads' partials says so (language/reducers.py)."""
        return None

    def augmented_store(self, key, operator: str, value) -> bool:
        """`buf[key] <operator> value` (operator as written, "+="), when the buffer carries it
        out itself (a reducer's update); False leaves it to the parser, which stores
        `buf[key] op value`."""
        return False

    @property
    def data(self):
        """The buffer's storage, for `T.Tensor(shape, dtype, buf.data)` (a view of it)."""
        return BufferData(self)


class BufferData:
    """`buf.data`: the storage of a buffer, which `T.Tensor(shape, dtype, buf.data)` views
    (language/views.py)."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: BufferValue):
        self.buffer = buffer

    def __repr__(self):
        return f"{self.buffer.name}.data"


class VarBuffer(BufferValue):
    """`x = T.alloc_var(dtype)`: reading `x` loads x[0], assigning `x = v` stores x[0]."""

    __slots__ = ()

    def load(self) -> LoadValue:
        return LoadValue(self, [0])


def region_of(value) -> RegionValue | None:
    """A tile op's view of an argument: whole buffer, slice, or corner element."""
    if isinstance(value, RegionValue):
        return value
    if isinstance(value, BufferValue):
        return value.full_region()
    if isinstance(value, LoadValue):
        return RegionValue(value.buffer, list(value.indices), [1] * len(value.indices))
    return None


def store(buffer: BufferValue, indices: list, value):
    """The IR store `buffer[indices] = value`, casting the value to the buffer's type."""
    for dim, index in enumerate(indices):
        _check_index(index, dim, buffer.name)
    if len(indices) != buffer.ndim:
        raise IndexError(f"buffer {buffer.name} has {buffer.ndim} dimension(s), got {len(indices)} indices")
    check_constant_bounds(buffer, indices)
    if not (isinstance(value, (PrimExpr, VarBuffer)) or is_number(value)):
        refuse = getattr(value, "refuse_as_value", None)  # a value that says why it is none (a reducer's element)
        if refuse is not None:
            refuse()
        raise TypeError(f"cannot store {type(value).__name__} {value!r} into buffer {buffer.name}")
    expr = cast_value(value, buffer.dtype).expr
    return ir().store(buffer.buf, [to_expr(i, "int32") for i in indices], expr)


def store_vector(region: RegionValue, value: "PrimExpr"):
    """`Y[i : i + 4] = v` for a vector value v of 4 lanes (T.reinterpret(..., T.float32x4)):
    one store of its lanes into the slice, which must run along the last dimension and
    have v's element type."""
    from .dtypes import vector_lanes

    base, lanes = vector_lanes(str(value.expr.dtype))
    buffer = region.buffer
    extents = [e.expr.const if isinstance(e, PrimExpr) else e for e in region.extents]
    if any(e != 1 for e in extents[:-1]) or extents[-1] != lanes:
        shown = ", ".join(str(e) for e in region.extents)
        raise ValueError(f"a {value.expr.dtype} value has {lanes} lanes: it stores into a slice of {lanes} elements "
                         f"along the last dimension of '{buffer.name}' (X[i : i + {lanes}]), got extents ({shown})")
    if base != str(buffer.dtype):
        raise TypeError(f"a {value.expr.dtype} value stores into a {base} buffer, and '{buffer.name}' is {buffer.dtype}: "
                        f"T.reinterpret it to {buffer.dtype}x{lanes}")
    check_constant_bounds(buffer, region.mins, region.extents)
    return ir().store(buffer.buf, [to_expr(m, "int32") for m in region.mins], value.expr)


# DType(x) casts and DType() declares (dtypes.py); dtypes cannot import this module back.
_dtypes._VALUE_HOOKS = (cast_value, unbound_var)


def scalar_operand(value, fn: str, arg: str):
    """A T.* function's scalar argument: a number or a kernel expression (a T.alloc_var
    reads as its value); ArgError naming the argument otherwise."""
    if isinstance(value, VarBuffer):
        return value.load()
    if isinstance(value, PrimExpr) or is_number(value):
        return value
    raise ArgError(arg, f"{fn}: '{arg}' must be a number or a kernel expression, got {value!r}")


def select(cond, then_value, else_value, fn: str = "T.if_then_else"):
    """cond ? then_value : else_value with both sides evaluated: T.if_then_else, and a
    kernel's conditional expression `a if cond else b` on a kernel value. A Python cond
    picks its side now."""
    cond = scalar_operand(cond, fn, "cond")
    a = scalar_operand(then_value, fn, "then_value")
    b = scalar_operand(else_value, fn, "else_value")
    if not isinstance(cond, PrimExpr):
        return a if cond else b
    da = a.expr.dtype if isinstance(a, PrimExpr) else None
    db = b.expr.dtype if isinstance(b, PrimExpr) else None
    expr = ir().select(to_expr(cond), to_expr(a, db), to_expr(b, da))
    return PrimExpr(expr, any(isinstance(v, PrimExpr) and v.reads for v in (cond, a, b)))
