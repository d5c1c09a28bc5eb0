"""Scalar math, casts, loops, `T.Kernel` and allocations.

Math on two Python values folds in Python (`T.max(2, 3)` is 3, `T.ceildiv(1000, 128)` is
8), so sizes computed with T.* stay plain ints. Loops, T.Kernel and allocations return
descriptions that the parser turns into IR: `for i, j in T.Parallel(M, N)` reads the
`LoopSpec`, and `A_s = T.alloc_shared(...)` names the buffer after the variable.
"""
from __future__ import annotations

import math
import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.dtypes import FLOAT_MAX, is_float, is_int, itemsize, normalize_dtype
from ..frontend.errors import ArgError
from ..frontend.pipeline_schedule import PipelineSchedule
from ..frontend.requests import AllocRequest, LetRequest, LoopSpec, loop_extent as _extent, loop_range as _range, serial
from ..frontend.values import (DeclaredVar, PrimExpr, VarBuffer, binop, call, cast_value, constant_int, ir,
                               scalar_operand as _scalar, select)

# ---- scalar math ----

# name -> Python fold for a Python argument
_UNARY_MATH = {
    "exp": math.exp,
    "exp2": lambda x: 2.0 ** x,
    "log": math.log,
    "log2": math.log2,
    "sqrt": math.sqrt,
    "rsqrt": lambda x: 1.0 / math.sqrt(x),
    "sin": math.sin,
    "cos": math.cos,
    "tanh": math.tanh,
    "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
}


def _unary_math(name: str, fold):
    @intrinsic(f"T.{name}")
    def op(x):
        x = _scalar(x, f"T.{name}", "x")
        if not isinstance(x, PrimExpr):
            return fold(x)
        if not is_float(x.expr.dtype):  # the intrinsics are floating point
            x = cast_value(x, "float32")
        return call(name, [x], x.expr.dtype)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"T.{name}(x): elementwise {name}; folds for a Python number."
    return op


exp, exp2, log, log2, sqrt, rsqrt, sin, cos, tanh, sigmoid = (_unary_math(n, f) for n, f in _UNARY_MATH.items())

# name -> (Python fold, the answer for an integer or bool, which is always finite)
_FLOAT_TESTS = {"isfinite": (math.isfinite, True), "isinf": (math.isinf, False), "isnan": (math.isnan, False)}


def _float_test(name: str, fold, integer_answer: bool):
    @intrinsic(f"T.{name}")
    def op(x):
        x = _scalar(x, f"T.{name}", "x")
        if not isinstance(x, PrimExpr):
            return fold(float(x))
        if not is_float(x.expr.dtype):
            return PrimExpr(ir().int_imm(int(integer_answer), "bool"))
        if str(x.expr.dtype) not in ("float32", "float64"):  # CUDA's tests take float and double
            x = cast_value(x, "float32")
        return call(name, [x], "bool")

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"T.{name}(x): CUDA's {name} of a float (a bool); an integer is finite."
    return op


isfinite, isinf, isnan = (_float_test(n, f, a) for n, (f, a) in _FLOAT_TESTS.items())


@intrinsic("T.abs")
def abs(x):  # noqa: A001 - TileLang's name
    """T.abs(x): the absolute value, of any numeric type; folds for a Python number."""
    x = _scalar(x, "T.abs", "x")
    return x.__abs__() if isinstance(x, PrimExpr) else (-x if x < 0 else x)


def _binary_fold(name: str, op: str, fold):
    @intrinsic(f"T.{name}")
    def fn(a, b):
        """T.max / T.min / T.floordiv / T.floormod (a, b): the kernel expression, or its
        value when both are Python numbers. max and min propagate NaN; floordiv and floormod
        round towards minus infinity, as Python's // and %."""
        a, b = _scalar(a, f"T.{name}", "a"), _scalar(b, f"T.{name}", "b")
        if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
            return fold(a, b)
        return binop(op, a, b)

    fn.__name__ = fn.__qualname__ = name
    return fn


max = _binary_fold("max", "max", lambda a, b: a if a >= b else b)  # noqa: A001
min = _binary_fold("min", "min", lambda a, b: a if a <= b else b)  # noqa: A001
floordiv = _binary_fold("floordiv", "floordiv", lambda a, b: a // b)
floormod = _binary_fold("floormod", "floormod", lambda a, b: a % b)


@intrinsic("T.ceildiv")
def ceildiv(a, b):
    """(a + b - 1) // b: how many tiles of b cover a; folds for Python numbers."""
    a, b = _scalar(a, "T.ceildiv", "a"), _scalar(b, "T.ceildiv", "b")
    if not isinstance(a, PrimExpr) and not isinstance(b, PrimExpr):
        return -(-a // b)
    return (a + b - 1) // b


@intrinsic("T.align_up")
def align_up(x, y):
    """x rounded up to a multiple of y: T.ceildiv(x, y) * y; folds for Python numbers."""
    return ceildiv(x, y) * y


@intrinsic("T.clamp")
def clamp(dst, min_val=None, max_val=None):
    """T.max(T.min(dst, max_val), min_val) (TileLang's names); a bound left None is not applied."""
    if max_val is not None:
        dst = min(dst, max_val)
    if min_val is not None:
        dst = max(dst, min_val)
    return dst


@intrinsic("T.if_then_else")
def if_then_else(cond, then_value, else_value):
    """cond ? then_value : else_value, with both sides evaluated (a select)."""
    return select(cond, then_value, else_value)


@intrinsic("T.Select")
def Select(condition, true_value, false_value):  # noqa: N802 - TVM's name
    """TVM's T.Select: T.if_then_else under its other name (both sides evaluated)."""
    return if_then_else(condition, true_value, false_value)


def _special_constant(name: str):
    @intrinsic(f"T.{name}")
    def fn(dtype):
        """T.infinity / T.max_value / T.min_value (dtype): +inf, or the largest or smallest
        finite value, of `dtype`. float8_e4m3fn has no infinity."""
        dt = normalize_dtype(dtype)
        if name == "infinity" and dt == "float8_e4m3fn":
            raise ArgError("dtype", "T.infinity: float8_e4m3fn has no infinity (its largest value, 448, is "
                           "T.max_value(T.float8_e4m3fn)); float8_e5m2 has one")
        return call(name, [], dt, tag=name)

    fn.__name__ = fn.__qualname__ = name
    return fn


infinity = _special_constant("infinity")
max_value = _special_constant("max_value")
min_value = _special_constant("min_value")


@intrinsic("T.cast")
def cast(value, dtype):
    """TileLang's T.cast(value, dtype)."""
    return cast_value(_scalar(value, "T.cast", "value"), dtype)


@intrinsic("T.Cast")
def Cast(dtype, value):  # noqa: N802 - TileLang's name
    """TVM's T.Cast(dtype, value)."""
    return cast_value(_scalar(value, "T.Cast", "value"), dtype)


# ---- T.let ----

@intrinsic("T.let")
def let(var, value):
    """TVM's `x = T.int32()` then `T.let(x, value)`: x is `value` (cast to x's dtype) from
    here to the end of the block, as `x = value` would make it."""
    if not isinstance(var, DeclaredVar) or var.bound:
        raise ArgError("var", f"T.let binds a variable declared in the kernel with no value (x = T.int32()) and not "
                       f"bound yet, got {var!r}")
    value = cast_value(_scalar(value, "T.let", "value"), var.dtype)
    var.bound = True  # from here the name reads as the variable
    if not value.reads:
        # As `x = value` does: the name stands for the expression itself, whose ranges the
        # passes then know (a let-bound variable's they would not).
        var.var = value
        return None
    var.name_as(builder.current("T.let").unique_name("v"))
    return LetRequest(var.var, value)


# ---- loops ----

# T.serial and the LoopSpec every loop form returns are the frontend's (frontend/requests.py):
# the parser itself makes `range` over kernel values a T.serial loop.

@intrinsic("T.unroll")
def unroll(start, stop=None, step=None, explicit=False, unroll_factor=None, annotations=None):
    """A serial loop NVRTC unrolls fully (`#pragma unroll`)."""
    # explicit/unroll_factor are TileLang hints; NVRTC unrolls a `#pragma unroll` loop fully.
    return _range("unrolled", "T.unroll", start, stop, step)


@intrinsic("T.vectorized")
def vectorized(start, stop=None, annotations=None):
    """TileLang's vectorised loop: its iterations run as vector accesses of up to 16 bytes
    where each access is contiguous or invariant and aligned; otherwise an unrolled loop."""
    return _range("vectorized", "T.vectorized", start, stop, None)


# TileLang's capitalised aliases, which name the loops as tile-level ones.
Serial = serial
Unroll = unroll
Vectorized = vectorized


@intrinsic("T.Pipelined")
def Pipelined(start, stop=None, num_stages=0, order=None, stage=None, sync=None, group=None):  # noqa: N802
    """A loop whose global->shared copies run num_stages - 1 iterations ahead of the rest.
    order/stage/group are TileLang's hand schedule: honoured, computations in several
    stages included (FlashAttention-3's, run shifted on sm_90a); a schedule that would
    change what the loop computes is a compile error (frontend/pipeline_schedule.py);
    sync is accepted with no effect, as in TileLang."""
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 0:
        raise ArgError("num_stages", f"T.Pipelined: num_stages must be a non-negative int, got {num_stages!r}")
    schedule = PipelineSchedule.from_arguments(order, stage, sync, group)
    spec = _range("pipelined", "T.Pipelined", start, stop, None, num_stages)
    spec.schedule = schedule  # applied by the parser once the body is known
    spec.intrinsic = Pipelined
    return spec


class PersistentSpec(LoopSpec):
    """T.Persistent's tiles: the grid of `domain`, walked wave by wave by `wave_size`
    blocks, block `index` taking tile w * wave_size + index of wave w (frontend/parser.py
    builds the loop)."""

    def __init__(self, domain: list, wave_size, index, group_size):
        super().__init__("persistent", [])
        self.domain, self.wave_size, self.index, self.group_size = domain, wave_size, index, group_size

    def tiles(self, w):
        """(coordinates, in range) of tile w * wave_size + index. The last dimension is
        cut into groups of group_size, and tiles are numbered group by group, the other
        dimensions' coordinates inside a group and the group's columns fastest, so
        consecutive blocks share rows of the first operand (TileLang's order)."""
        last = self.domain[-1]
        g = max(1, min(self.group_size, last))
        radices = [ceildiv(last, g)] + list(self.domain[:-1]) + [g]
        padded = 1
        for r in radices:
            padded = padded * r
        linear = w * self.wave_size + self.index
        digits = [None] * len(radices)
        rest = linear
        for i in range(len(radices) - 1, 0, -1):
            digits[i] = rest % radices[i]
            rest = rest // radices[i]
        digits[0] = rest
        coords = digits[1:-1] + [digits[0] * g + digits[-1]]
        return coords, (linear < padded) & (coords[-1] < last)

    def waves(self):
        last = self.domain[-1]
        g = max(1, min(self.group_size, last))
        padded = ceildiv(last, g) * g
        for d in self.domain[:-1]:
            padded = padded * d
        return ceildiv(padded, self.wave_size)


@intrinsic("T.Persistent")
def Persistent(domain, wave_size, index, group_size=8):  # noqa: N802 - TileLang's name
    """`for bx, by in T.Persistent([m_tiles, n_tiles], sm_num, block_id)`: a persistent
    kernel's tile loop. Each of wave_size blocks (block `index`) walks the tiles of the
    domain wave by wave: in wave w it takes tile w * wave_size + index, in an order that
    groups group_size tiles of the last dimension; a tile past the domain is skipped."""
    if not isinstance(domain, (list, tuple)) or not domain:
        raise ArgError("domain", f"T.Persistent: domain must be a non-empty list of extents, got {domain!r}")
    domain = [_extent(d, "T.Persistent", "domain") for d in domain]
    wave_size = _extent(wave_size, "T.Persistent", "wave_size")
    index = _extent(index, "T.Persistent", "index")
    group_size = _extent(group_size, "T.Persistent", "group_size")
    for name, v in (("wave_size", wave_size), ("group_size", group_size)):
        if isinstance(v, int) and v <= 0:
            raise ArgError(name, f"T.Persistent: {name} must be positive, got {v}")
    return PersistentSpec(domain, wave_size, index, group_size)


@intrinsic("T.Parallel")
def Parallel(*extents, coalesced_width=None, loop_layout=None, prefer_async=None,  # noqa: N802 - TileLang's name
             annotations=None):
    """`for i, j in T.Parallel(M, N)`: a nest of independent iterations over constant
    extents, spread over the block's threads by layout inference. coalesced_width,
    prefer_async (TileLang's request for cp.async copies) and annotations are hints,
    accepted and ignored: the loop's copies complete before the statement after it, which
    also satisfies a program that waits for them itself (T.ptx_wait_group). loop_layout
    (a T.Fragment) is not supported: the engine infers the loop's layout."""
    if not extents:
        raise ArgError(None, "T.Parallel needs at least one extent")
    if loop_layout is not None:
        raise ArgError("loop_layout", "T.Parallel: loop_layout is not supported; layout inference lays the loop out")
    if annotations is not None and not isinstance(annotations, dict):
        raise ArgError("annotations", f"T.Parallel: annotations is a dict, got {annotations!r}")
    dims = [(0, _extent(e, "T.Parallel", i), 1) for i, e in enumerate(extents)]
    return LoopSpec("parallel", dims)


@intrinsic("T.parallel")
def parallel(start, stop=None, annotations=None):
    """TVM's spelling of a one-dimensional T.Parallel: `for i in T.parallel(n)` (or
    (start, stop)); nested ones form one T.Parallel nest."""
    return _range("parallel", "T.parallel", start, stop, None)


def _barrier_int(value, arg: str):
    value = constant_int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgError(arg, f"T.sync_threads: '{arg}' must be a constant int, got {value!r}")
    return int(value)


def _arrive_count(kernel, arrive_count) -> int:
    threads = kernel.threads if arrive_count is None else _barrier_int(arrive_count, "arrive_count")
    if threads <= 0 or threads % 32 or threads > kernel.threads:
        raise ArgError("arrive_count", f"T.sync_threads: arrive_count must be a positive multiple of 32 up to the "
                       f"block's {kernel.threads} threads, got {threads}")
    return threads


def _sync_runtime_barrier(frame, kernel, barrier_id, arrive_count) -> None:
    """A named barrier whose id is computed at run time (`T.sync_threads(tx // 128 + 1, 128)`):
    `bar.sync id, n` with the id a register. The threads of a warp must name one barrier, and
    each barrier must be reached by arrive_count threads (the simulator checks both). The
    compiler's own barriers are placed as if it were not there."""
    if not is_int(barrier_id.expr.dtype):
        raise ArgError("barrier_id", f"T.sync_threads: 'barrier_id' must be an int, got {barrier_id!r}")
    if frame.parallel:
        raise ArgError("barrier_id", "T.sync_threads: a barrier id computed at run time is for thread-level code; "
                       "inside a T.Parallel loop (split at its barriers) give a constant id")
    threads = _arrive_count(kernel, arrive_count)
    frame.emit(ir().evaluate(call("barrier_sync", [cast_value(barrier_id, "int32"), threads], "int32").expr))


@intrinsic("T.sync_threads")
def sync_threads(barrier_id=None, arrive_count=None):
    """A barrier of the whole block (`__syncthreads()`); the compiler places the barriers
    shared memory needs by itself. With TileLang's arguments, `T.sync_threads(id, n)` is
    named barrier `id` (0..15) for `n` threads (a multiple of 32; the block's threads when
    left out): `bar.sync id, n`. The id may be computed at run time (`tx // 128 + 1`): every
    warp's threads must then name one barrier."""
    frame = builder.current("T.sync_threads")
    if barrier_id is None and arrive_count is None:
        frame.emit_barrier(ir().sync(), "T.sync_threads")
        return
    kernel = frame.require_kernel("T.sync_threads")
    if isinstance(barrier_id, VarBuffer):
        barrier_id = barrier_id.load()
    if isinstance(barrier_id, PrimExpr) and barrier_id.expr.const is None:
        return _sync_runtime_barrier(frame, kernel, barrier_id, arrive_count)
    barrier = _barrier_int(0 if barrier_id is None else barrier_id, "barrier_id")
    if not 0 <= barrier <= 15:
        raise ArgError("barrier_id", f"T.sync_threads: the hardware has named barriers 0..15, got {barrier}")
    threads = _arrive_count(kernel, arrive_count)
    frame.emit_barrier(ir().sync(barrier, threads) if (barrier, threads) != (0, kernel.threads) else ir().sync(),
                       "T.sync_threads")


# ---- allocations ----

# Each returns an AllocRequest (frontend/requests.py), which the parser names on assignment.

def _shape(shape, fn: str, constant: bool) -> tuple:
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    for index, dim in enumerate(dims):
        if isinstance(dim, bool) or not (isinstance(dim, numbers.Integral) or isinstance(dim, PrimExpr)):
            raise ArgError("shape", f"{fn}: shape entries must be ints, got {dim!r} "
                           f"({type(dim).__name__}) in shape {shape!r}", index)
        if isinstance(dim, PrimExpr) and (constant or not is_int(dim.expr.dtype)):
            raise ArgError("shape", f"{fn}: shape must be constant ints (it is fixed at compile "
                           f"time), got {dim} in shape {shape!r}", index)
        if isinstance(dim, numbers.Integral) and dim <= 0:
            raise ArgError("shape", f"{fn}: shape entries must be positive, got {shape!r}", index)
    return tuple(int(d) if isinstance(d, numbers.Integral) else d for d in dims)


def _dtype(value, fn: str) -> str:
    try:
        return normalize_dtype(value)
    except (ValueError, TypeError) as err:
        raise ArgError("dtype", f"{fn}: {err}") from None


_SHARED_SCOPES = ("shared", "shared.dyn")


@intrinsic("T.alloc_shared")
def alloc_shared(shape, dtype, scope="shared.dyn"):
    """A tile in shared memory, one per block: `A_s = T.alloc_shared((64, 32), "float16")`."""
    if scope not in _SHARED_SCOPES:
        raise ArgError("scope", f"T.alloc_shared: scope must be one of {_SHARED_SCOPES}, got {scope!r}")
    return AllocRequest("shared", _shape(shape, "T.alloc_shared", False), _dtype(dtype, "T.alloc_shared"))


@intrinsic("T.alloc_fragment")
def alloc_fragment(shape, dtype, scope="local.fragment"):
    """A tile held in the registers of the block's threads together, laid out by layout
    inference; used inside T.Parallel loops and tile operations."""
    return AllocRequest("fragment", _shape(shape, "T.alloc_fragment", True), _dtype(dtype, "T.alloc_fragment"))


# The bytes of a thread's 255 32-bit registers: the most a T.alloc_local array may take. A
# larger one could only live in local memory, and the unrolled loops over it take ptxas
# minutes (a 32 x 256 float32 array filled in a T.Parallel loop: 48 s; 255 floats: 0.3 s).
LOCAL_BYTES_LIMIT = 255 * 4


@intrinsic("T.alloc_local")
def alloc_local(shape, dtype, scope="local"):
    """An array every thread holds whole, in its own registers (at most 255 of them)."""
    shape, dtype = _shape(shape, "T.alloc_local", True), _dtype(dtype, "T.alloc_local")
    size = math.prod(shape) * itemsize(dtype)
    if size > LOCAL_BYTES_LIMIT:
        raise ArgError("shape", f"T.alloc_local: shape {shape} of {dtype} takes {size} bytes in every thread, past "
                       f"the {LOCAL_BYTES_LIMIT} bytes of a thread's 255 32-bit registers; a tile the block "
                       f"shares is T.alloc_fragment or T.alloc_shared")
    return AllocRequest("local", shape, dtype)


@intrinsic("T.alloc_global")
def alloc_global(shape, dtype, scope="global"):
    """A workspace in global memory, allocated by the runtime for each call (before the
    first `with T.Kernel`; every kernel of the prim_func sees it)."""
    return AllocRequest("global", _shape(shape, "T.alloc_global", False), _dtype(dtype, "T.alloc_global"))


@intrinsic("T.alloc_var")
def alloc_var(dtype, init=None, scope="local.var"):
    """A scalar variable of each thread, optionally initialised; assigning to its name
    stores into it."""
    dtype = _dtype(dtype, "T.alloc_var")
    if isinstance(init, numbers.Real) and not isinstance(init, bool) and dtype in FLOAT_MAX:
        limit = FLOAT_MAX[dtype]
        if math.isfinite(init) and abs(init) > limit:  # TVM's check of a literal
            side = "maximum" if init > 0 else "minimum"
            raise ArgError("init", f"T.alloc_var: the initial value {init!r} exceeds {side} of {dtype} "
                           f"({'' if init > 0 else '-'}{limit!r}); write T.infinity({dtype}) for an infinite one",
                           kind=ValueError)
    return AllocRequest("local", (1,), dtype, init=init, is_var=True)
