"""TileLang's reducers: an accumulator that every iteration of T.Parallel loops adds one
contribution to, combined across the block once, at the end.

    acc = T.alloc_reducer((M,), "float32", op="sum")   # or max, min, bitand, bitor, bitxor
    T.reducer_init(acc, seed)                          # the identity; seed (default: none) once
    for i, k in T.Parallel(M, K):
        T.reducer_update(acc[i], a[i, k])              # each logical iteration exactly once
    T.finalize_reducer(acc, result)                    # result[i] = seed op (op over contributions)

Each thread keeps its own partial of every element (a local array); an update is made by
one copy of its iteration, however many threads the loop's layout gives it
(partition_loops.cc); T.finalize_reducer combines the partials of the whole block
(ops/reducer.cc). The buffer holds partials until then: reading, storing into or clearing
it is an error at the line, as are an update outside a T.Parallel loop, an update before
the init, a second init and a missing finalize.

TileLang's first form is taken too, with its literal meaning:

    acc = T.alloc_reducer((M,), "float32", replication="all")
    T.clear(acc)                                       # starts at 0 (T.fill(acc, v): at v, once)
    for i, k in T.Parallel(M, K):
        acc[i] += a[i, k]                              # the op's operator: += |= &= ^=
    T.finalize_reducer(acc)                            # in place: every thread holds the result
    T.copy(acc, out)                                   # acc is then an ordinary local buffer

T.finalize_reducer(acc) without a result combines in place in either form. The two forms do
not mix: T.reducer_update on a cleared reducer, or `+=` on an initialised one, is an error.
"""
from __future__ import annotations

import math
import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.dtypes import itemsize, is_int
from ..frontend.errors import ArgError
from ..frontend.values import BufferValue, PrimExpr, call, cast_value, ir, is_number, to_expr
from ..frontend.requests import AllocRequest
from .builtins import LOCAL_BYTES_LIMIT, _dtype, _shape

OPS = {"sum": 0, "max": 1, "min": 2, "bitand": 3, "bitor": 4, "bitxor": 5}


class ReducerElement:
    """`acc[i]` of a reducer: only T.reducer_update takes it."""

    __slots__ = ("buffer", "indices")

    def __init__(self, buffer, indices):
        self.buffer = buffer
        self.indices = indices

    def _misuse(self, *args):
        raise ArgError(None, f"illegal read of reducer '{self.buffer.name}': its elements hold each thread's "
                             f"partial until T.finalize_reducer; read the finalized result instead")

    refuse_as_value = _misuse  # `B[0] = acc[0]` (values.store)
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _misuse
    __neg__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __float__ = __int__ = _misuse


class ReducerBuffer(BufferValue):
    """A T.alloc_reducer buffer: local storage and its lifecycle state: "new", "open" (by
    T.reducer_init), "cleared" (by T.clear / T.fill: the first form), "final" (finalized
    into a result) or "combined" (finalized in place: an ordinary local buffer again)."""

    __slots__ = ("op", "state", "seed", "init_blocks")

    @property
    def readable(self) -> bool:
        return self.state == "combined"

    def __getitem__(self, key):
        if self.readable:
            return BufferValue.__getitem__(self, key)
        key = key if isinstance(key, tuple) else (key,)
        if len(key) != self.ndim or any(isinstance(k, slice) for k in key):
            raise ArgError(None, f"reducer '{self.name}' is indexed by one element, {self.ndim} indices")
        return ReducerElement(self, list(key))

    def store_refusal(self) -> str | None:
        if self.readable:
            return None
        return (f"illegal store to reducer '{self.name}': its elements hold each thread's partial; add to it with "
                "T.reducer_update inside a T.Parallel loop")

    def augmented_store(self, key, operator: str, value) -> bool:
        if self.readable:
            return False
        augmented_update(self, key, operator, value)
        return True


class ReducerRequest(AllocRequest):
    def __init__(self, shape, dtype, op):
        super().__init__("local", shape, dtype)
        self.op = op

    def allocate(self, builder, name: str) -> ReducerBuffer:
        """The reducer's partials and the seed's register."""
        return allocate(builder, name, self)


@intrinsic("T.alloc_reducer")
def alloc_reducer(shape, dtype, op="sum", replication=None):
    """A reducer of `shape` combining with `op` (sum, max, min, bitand, bitor, bitxor)."""
    shape, dtype = _shape(shape, "T.alloc_reducer", True), _dtype(dtype, "T.alloc_reducer")
    if op not in OPS:
        raise ArgError("op", f"T.alloc_reducer: op must be one of {', '.join(OPS)}, got {op!r}")
    if op.startswith("bit") and not is_int(dtype):
        raise ArgError("op", f"T.alloc_reducer: op={op!r} needs an integer dtype, got {dtype}", kind=AssertionError)
    size = math.prod(shape) * itemsize(dtype)
    if size > LOCAL_BYTES_LIMIT:
        raise ArgError("shape", f"T.alloc_reducer: every thread keeps a partial of each element: shape {shape} of "
                       f"{dtype} takes {size} bytes, past the {LOCAL_BYTES_LIMIT} bytes of its registers")
    return ReducerRequest(shape, dtype, op)


def _reducer(value, fn: str, arg: str) -> ReducerBuffer:
    if not isinstance(value, ReducerBuffer):
        raise ArgError(arg, f"{fn}: '{arg}' must be a T.alloc_reducer buffer, got {type(value).__name__} {value!r}")
    return value


def _elements(buffer: BufferValue):
    """Every index of a constant-shape buffer, row-major."""
    import itertools

    return itertools.product(*(range(d) for d in buffer.shape))


@intrinsic("T.reducer_init")
def reducer_init(reducer, value=None):
    """Opens the reducer: every partial set to the op's identity; `value` (evaluated here)
    is combined into the result once, at T.finalize_reducer."""
    acc = _reducer(reducer, "T.reducer_init", "reducer")
    if acc.state in ("open", "cleared"):
        raise ArgError(None, f"double T.reducer_init of reducer '{acc.name}' (it is open: finalize it first)"
                       if acc.state == "open" else f"T.reducer_init of reducer '{acc.name}', which T.clear opened "
                       "(TileLang's first form): finalize it first")
    if value is not None:
        if isinstance(value, PrimExpr) and str(value.expr.dtype) != str(acc.dtype):
            raise ArgError("value", f"T.reducer_init: the starting value's dtype {value.expr.dtype} does not match "
                           f"reducer '{acc.name}' ({acc.dtype}); cast it")
        if not (isinstance(value, PrimExpr) or is_number(value)):
            raise ArgError("value", f"T.reducer_init: the starting value must be a scalar, got {value!r}")
    identity = _identity(acc.op, str(acc.dtype))
    _open(acc, "T.reducer_init", identity, identity if value is None else cast_value(value, acc.dtype), "open")


def _open(acc: ReducerBuffer, fn: str, partial: PrimExpr, seed: PrimExpr, state: str) -> None:
    """Every thread's partials set to `partial`, the seed to `seed`."""
    b = builder.current(fn)
    for idx in _elements(acc):
        b.emit(ir().store(acc.buf, [to_expr(i, "int32") for i in idx], partial.expr))
    b.emit(ir().store(acc.seed.buf, [to_expr(0, "int32")], seed.expr))
    acc.state = state
    acc.init_blocks = [id(block) for block in b.blocks]  # where T.finalize_reducer must be


def clear_reducer(acc: ReducerBuffer, value, fn: str) -> None:
    """T.clear(acc) / T.fill(acc, value) on a reducer that is not open: TileLang's first
    form. The reducer starts at `value`: it is combined once, at T.finalize_reducer, as
    T.reducer_init(acc, value) does (not once per thread holding a copy)."""
    if acc.state in ("open", "cleared"):
        how = "T.reducer_init" if acc.state == "open" else "T.clear"
        raise ArgError(0, f"{fn}: illegal use of reducer '{acc.name}': {how} opened it and it holds each thread's "
                       "partial until T.finalize_reducer")
    if not (isinstance(value, PrimExpr) or is_number(value)):
        raise ArgError("value", f"{fn}: the value must be a scalar, got {value!r}")
    _open(acc, fn, _identity(acc.op, str(acc.dtype)), cast_value(value, acc.dtype), "cleared")


def _identity(op: str, dtype: str) -> PrimExpr:
    """The value that leaves every contribution as it is."""
    if op in ("sum", "bitor", "bitxor"):
        return cast_value(0, dtype)
    if op == "bitand":
        return cast_value(-1, dtype) if dtype.startswith("int") else call("max_value", [], dtype)
    floating = not is_int(dtype)
    if op == "max":
        return call("ninfinity" if floating else "min_value", [], dtype)
    return call("infinity" if floating else "max_value", [], dtype)


@intrinsic("T.reducer_update")
def reducer_update(element, value):
    """Adds `value` to element `acc[i]`: one contribution per iteration of the T.Parallel
    loop around it."""
    if not isinstance(element, ReducerElement):
        raise ArgError(0, f"T.reducer_update: the first argument must be an element of a T.alloc_reducer buffer "
                       f"(acc[i]), got {type(element).__name__} {element!r}")
    acc = element.buffer
    if acc.state == "cleared":
        raise ArgError(0, f"T.reducer_update: illegal mix of forms on reducer '{acc.name}': T.clear opened it "
                       f"(TileLang's first form, updated with acc[i] {_OPERATORS[acc.op]} v); T.reducer_update "
                       "adds to a reducer T.reducer_init opened")
    if acc.state != "open":
        raise ArgError(0, f"T.reducer_update of reducer '{acc.name}' before T.reducer_init")
    _update(acc, element.indices, value, "T.reducer_update")


# The operator TileLang's first form updates a reducer with: `acc[i] += v` for a sum.
_OPERATORS = {"sum": "+=", "bitor": "|=", "bitand": "&=", "bitxor": "^=", "max": "= T.max(acc[i], v) (not "
              "supported: use T.reducer_init and T.reducer_update)", "min": "= T.min(acc[i], v) (not supported: "
              "use T.reducer_init and T.reducer_update)"}


def augmented_update(acc: ReducerBuffer, key, operator: str, value) -> None:
    """`acc[i] += v` (the parser's augmented assignment to a reducer's element)."""
    indices = list(key) if isinstance(key, tuple) else [key]
    if len(indices) != acc.ndim or any(isinstance(k, slice) for k in indices):
        raise ArgError(None, f"reducer '{acc.name}' is indexed by one element, {acc.ndim} indices")
    if acc.state == "open":
        raise ArgError(None, f"illegal store to reducer '{acc.name}' ({operator}): T.reducer_init opened it; "
                       f"add to it with T.reducer_update(acc[i], v)")
    if acc.state != "cleared":
        raise ArgError(None, f"illegal store to reducer '{acc.name}' ({operator}) before T.clear(acc) (or "
                       "T.reducer_init and T.reducer_update)")
    if _OPERATORS[acc.op] != operator:
        raise ArgError(None, f"reducer '{acc.name}' combines with op={acc.op!r}: update it with acc[i] "
                       f"{_OPERATORS[acc.op]}, got {operator}")
    _update(acc, indices, value, f"the update {operator} of reducer '{acc.name}'")


def _update(acc: ReducerBuffer, indices: list, value, what: str) -> None:
    b = builder.current(what)
    if not getattr(b, "parallel", 0):
        raise ArgError(None, f"{what} of reducer '{acc.name}' outside any T.Parallel loop: every thread "
                       "would add the same contribution; update inside a T.Parallel loop")
    if not (isinstance(value, PrimExpr) or is_number(value)):
        raise ArgError("value", f"{what}: the value must be a scalar, got {value!r}")
    target = ir().load(acc.buf, [to_expr(i, "int32") for i in indices])
    v = cast_value(value, acc.dtype).expr
    b.emit(ir().evaluate(ir().call("reducer_update", [target, v, to_expr(OPS[acc.op], "int32")], str(acc.dtype))))


@intrinsic("T.finalize_reducer")
def finalize_reducer(reducer, result=None):
    """Combines the partials of the whole block and the init's value into `result` (a
    fragment, shared or local buffer of the reducer's shape); closes the reducer. Without
    a result, in place: every thread then holds the whole result in `reducer`, an ordinary
    local buffer from there on (TileLang's first form)."""
    acc = _reducer(reducer, "T.finalize_reducer", "reducer")
    if acc.state not in ("open", "cleared"):
        raise ArgError("reducer", f"T.finalize_reducer of reducer '{acc.name}' "
                       + ("twice" if acc.state in ("final", "combined") else "before T.reducer_init (or T.clear)"))
    if result is None:
        result = acc
    elif not isinstance(result, BufferValue) or isinstance(result, ReducerBuffer):
        raise ArgError("result", f"T.finalize_reducer: result must be a buffer of shape {list(acc.shape)}, got "
                       f"{type(result).__name__} {result!r}")
    if tuple(result.shape) != tuple(acc.shape):
        raise ArgError("result", f"T.finalize_reducer: result '{result.name}' has shape {list(result.shape)}, the "
                       f"reducer {list(acc.shape)}")
    b = builder.current("T.finalize_reducer")
    # The finalize runs once per init: in the init's block, or in a branch inside it; not
    # outside it (after a loop that re-inits) nor in a loop the init is not in (which would
    # combine the partials again).
    here = [id(block) for block in b.blocks]
    inner = here[len(acc.init_blocks):]
    if here[:len(acc.init_blocks)] != acc.init_blocks or any(block in b.loop_bodies for block in inner):
        raise ArgError("reducer", f"T.finalize_reducer of reducer '{acc.name}' is not in the scope of its "
                       "T.reducer_init: finalize it in the block that opened it (or a branch inside that block), "
                       "not outside a loop that opens it nor inside a loop it is not in")
    stmt = ir().tile_op("finalize_reducer", [acc.full_region().native(), acc.seed.full_region().native(),
                                             result.full_region().native()], [], {"op": acc.op})
    b.emit(stmt)
    acc.state = "combined" if result is acc else "final"


def allocate(parser_builder, name: str, request: ReducerRequest) -> ReducerBuffer:
    """The parser's allocation of a reducer: its partials and the seed's register."""
    acc = parser_builder.allocate(name, "local", request.dtype, request.shape, ReducerBuffer)
    acc.op, acc.state = request.op, "new"
    acc.seed = parser_builder.allocate(name + "_seed", "local", request.dtype, (1,))
    parser_builder.reducers.append(acc)
    return acc


def check_finalized(parser_builder) -> None:
    """At the end of a kernel: every opened reducer was finalized."""
    for acc in parser_builder.reducers:
        if acc.state in ("open", "cleared"):
            raise ArgError(None, f"reducer '{acc.name}' is initialised but never finalized (T.finalize_reducer)")
    parser_builder.reducers.clear()
