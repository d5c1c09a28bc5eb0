"""A thread's own intrinsics, with TileLang's names and meaning: warp reductions and votes
(`T.warp_reduce_sum`, `T.any_sync`, `T.ballot`, ...), `T.any_of` / `T.all_of` over a
buffer region, read-only loads (`T.__ldg`), `T.assume`, programmatic dependent launch
(`T.pdl_trigger` / `T.pdl_sync`), random numbers (`T.rng_init`, `T.rng_rand`, curand's).

A warp call is one IR call (`warp_reduce_sum(v)`, `any_sync(mask, predicate)`) that the
printer spells as CUDA's own intrinsic where one exists (`__any_sync`, `__match_any_sync`,
...) and as the device library's otherwise (kernels/include/tegula/warp.h); every lane the
call names must reach it, as in CUDA.
"""
from __future__ import annotations

import inspect
import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.dtypes import is_float, is_int
from ..frontend.errors import ArgError
from ..frontend.values import LoadValue, PrimExpr, VarBuffer, binop, call, cast_value, ir, is_number, region_of

_FULL_MASK = 0xFFFFFFFF


def _value(value, fn: str, arg: str) -> PrimExpr:
    if isinstance(value, VarBuffer):
        value = value.load()
    if isinstance(value, bool):
        return cast_value(value, "bool")
    if isinstance(value, numbers.Integral):
        return cast_value(value, "int32")
    if isinstance(value, float):
        return cast_value(value, "float32")
    if not isinstance(value, PrimExpr):
        raise ArgError(arg, f"{fn}: '{arg}' must be a number or a kernel expression, got {value!r}")
    return value


# ---- warp reductions ----

def _warp_reduce(op: str, ints_only: bool):
    name = f"warp_reduce_{op}"

    @intrinsic(f"T.{name}")
    def fn(value):
        v = _value(value, f"T.{name}", "value")
        dtype = v.expr.dtype
        if ints_only and not is_int(dtype):
            raise ArgError("value", f"T.{name}: the value must be an integer, got {dtype}")
        if not (is_int(dtype) or is_float(dtype)) or dtype == "bool":
            raise ArgError("value", f"T.{name}: the value must be a number, got {dtype}")
        return call(name, [v], dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"T.{name}(value): the {op} of `value` over the 32 lanes of the warp, in every lane "
                  "(a butterfly of shuffles); all 32 lanes must reach it.")
    return fn


warp_reduce_sum = _warp_reduce("sum", False)
warp_reduce_max = _warp_reduce("max", False)
warp_reduce_min = _warp_reduce("min", False)
warp_reduce_bitand = _warp_reduce("bitand", True)
warp_reduce_bitor = _warp_reduce("bitor", True)


# ---- warp votes ----

def _predicate(value, fn: str) -> PrimExpr:
    p = _value(value, fn, "predicate")
    if not (is_int(p.expr.dtype) or p.expr.dtype == "bool"):
        raise TypeError(f"{fn} requires an integer or boolean predicate, but got {p.expr.dtype}")
    return cast_value(p, "int32")


def _mask(value, fn: str) -> PrimExpr:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if not 0 <= value <= _FULL_MASK:
            raise ArgError("mask", f"{fn}: mask must be a 32-bit lane mask, got {value:#x}")
        return cast_value(value, "uint32")
    m = _value(value, fn, "mask")
    if not is_int(m.expr.dtype):
        raise ArgError("mask", f"{fn}: mask must be an integer lane mask, got {m.expr.dtype}")
    return cast_value(m, "uint32")


@intrinsic("T.any_sync")
def any_sync(predicate, mask=_FULL_MASK):
    """Non-zero (int32) when the predicate is non-zero in any lane of `mask`."""
    return call("any_sync", [_mask(mask, "T.any_sync"), _predicate(predicate, "T.any_sync")], "int32")


@intrinsic("T.all_sync")
def all_sync(predicate, mask=_FULL_MASK):
    """Non-zero (int32) when the predicate is non-zero in every lane of `mask`."""
    return call("all_sync", [_mask(mask, "T.all_sync"), _predicate(predicate, "T.all_sync")], "int32")


@intrinsic("T.ballot_sync")
def ballot_sync(predicate, mask=_FULL_MASK):
    """A uint64 with bit l set when lane l of `mask` has a non-zero predicate."""
    return call("ballot_sync", [_mask(mask, "T.ballot_sync"), _predicate(predicate, "T.ballot_sync")], "uint64")


@intrinsic("T.ballot")
def ballot(predicate):
    """T.ballot_sync over the whole warp."""
    return call("ballot", [_predicate(predicate, "T.ballot")], "uint64")


@intrinsic("T.activemask")
def activemask():
    """A uint64 with bit l set for each lane of the warp running this call."""
    return call("activemask", [], "uint64")


# ---- shuffles ----

def _shuffle(name: str, op: str, lane_arg: str, what: str):
    fn_name = f"T.{name}"

    signature = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d)
                                   for n, d in (("value", inspect.Parameter.empty), (lane_arg, inspect.Parameter.empty),
                                                ("width", 32), ("mask", _FULL_MASK))])

    def fn(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        value, lane, width, mask = bound.arguments.values()
        v = _value(value, fn_name, "value")
        d = _value(lane, fn_name, lane_arg)
        if not is_int(d.expr.dtype):
            raise ArgError(lane_arg, f"{fn_name}: '{lane_arg}' must be an integer, got {d.expr.dtype}")
        if isinstance(width, bool) or not isinstance(width, int) or width not in (1, 2, 4, 8, 16, 32):
            raise ArgError("width", f"{fn_name}: width must be a power of two up to 32, got {width!r}")
        args = [_mask(mask, fn_name), v, cast_value(d, "int32"), cast_value(width, "int32")]
        return call(op, args, v.expr.dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{fn_name}(value, {lane_arg}, width=32, mask=0xFFFFFFFF): {what}"
    fn.__signature__ = signature  # TileLang's parameter names (srcLane, delta)
    return intrinsic(fn_name)(fn)


shfl_sync = _shuffle("shfl_sync", "shfl_idx", "srcLane",
                     "`value` of lane `srcLane` (modulo width) of this lane's group of `width` lanes.")
shfl_xor = _shuffle("shfl_xor", "shfl_bfly", "delta",
                    "`value` of lane (this lane ^ delta); a lane of a later group gives this lane's own value.")
shfl_down = _shuffle("shfl_down", "shfl_down", "delta",
                     "`value` of lane (this lane + delta) within the group; past its end, this lane's own.")
shfl_up = _shuffle("shfl_up", "shfl_up", "delta",
                   "`value` of lane (this lane - delta) within the group; before its start, this lane's own.")


def _tvm_shuffle(name: str, op: str, lane_arg: str, what: str):
    """TVM's spelling, which TileLang keeps: (mask, value, lane or offset, width, warp_size),
    the same IR call as the T.shfl_* of the same meaning. On CUDA, TVM prints these as
    __shfl_sync / __shfl_up_sync / __shfl_down_sync(mask, value, lane, width): warp_size
    is for other targets, checked and then unused."""
    fn_name = f"T.{name}"

    def fn(mask, value, lane, width, warp_size):
        if isinstance(warp_size, bool) or not isinstance(warp_size, (numbers.Integral, PrimExpr)) or (
                isinstance(warp_size, numbers.Integral) and warp_size <= 0):
            raise ArgError("warp_size", f"{fn_name}: warp_size must be a positive int, got {warp_size!r}")
        if isinstance(width, bool) or not isinstance(width, numbers.Integral) or width not in (1, 2, 4, 8, 16, 32):
            raise ArgError("width", f"{fn_name}: width must be a power of two up to 32 (an int), got {width!r}")
        v = _value(value, fn_name, "value")
        d = _value(lane, fn_name, lane_arg)
        if not is_int(d.expr.dtype):
            raise ArgError(lane_arg, f"{fn_name}: '{lane_arg}' must be an integer, got {d.expr.dtype}")
        return call(op, [_mask(mask, fn_name), v, cast_value(d, "int32"), cast_value(int(width), "int32")],
                    v.expr.dtype)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{fn_name}(mask, value, {lane_arg}, width, warp_size): {what}"
    fn.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                          for n in ("mask", "value", lane_arg, "width", "warp_size")])
    return intrinsic(fn_name)(fn)


tvm_warp_shuffle = _tvm_shuffle("tvm_warp_shuffle", "shfl_idx", "warp_id",
                                "T.shfl_sync(value, warp_id, width, mask): `value` of lane `warp_id` (modulo width) "
                                "of this lane's group of `width` lanes.")
tvm_warp_shuffle_up = _tvm_shuffle("tvm_warp_shuffle_up", "shfl_up", "offset",
                                   "T.shfl_up(value, offset, width, mask): `value` of lane (this lane - offset) "
                                   "within the group; before its start, this lane's own.")
tvm_warp_shuffle_down = _tvm_shuffle("tvm_warp_shuffle_down", "shfl_down", "offset",
                                     "T.shfl_down(value, offset, width, mask): `value` of lane (this lane + offset) "
                                     "within the group; past its end, this lane's own.")


@intrinsic("T.sync_warp")
def sync_warp(mask=None):
    """`__syncwarp(mask)`: the lanes of `mask` (all 32 when left out) meet here."""
    m = _mask(_FULL_MASK if mask is None else mask, "T.sync_warp")
    builder.current("T.sync_warp").emit(ir().evaluate(call("sync_warp", [m], "int32").expr))


def _ffs(value):
    """T.__ffs(value): the one-based position of the lowest set bit of an integer, 0 for 0."""
    v = _value(value, "T.__ffs", "value")
    if not is_int(v.expr.dtype):
        raise ArgError("value", f"T.__ffs: the value must be an integer, got {v.expr.dtype}")
    return call("ffs", [v], "int32")


__ffs = intrinsic("T.__ffs")(_ffs)


def _fns(mask, base, offset):
    """T.__fns(mask, base, offset): CUDA's __fns, the position of the offset-th set bit of the
    32-bit `mask` counted from bit `base` (towards the high bits for a positive offset, the
    low bits for a negative one; offset 0: `base` itself if its bit is set); 0xFFFFFFFF
    when there is none. Example: __fns(0b1010_0000, 0, 2) == 7."""
    m = _value(mask, "T.__fns", "mask")
    b = _value(base, "T.__fns", "base")
    o = _value(offset, "T.__fns", "offset")
    for arg, v in (("mask", m), ("base", b), ("offset", o)):
        if not is_int(v.expr.dtype):
            raise ArgError(arg, f"T.__fns: '{arg}' must be an integer, got {v.expr.dtype}")
    return call("fns", [cast_value(m, "uint32"), cast_value(b, "uint32"), cast_value(o, "int32")], "uint32")


__fns = intrinsic("T.__fns")(_fns)


# ---- warp match ----

_MATCH_TYPES = ("int32", "uint32", "int64", "uint64", "float32", "float64")


def _match(name: str, what: str):
    fn_name = f"T.{name}"

    @intrinsic(fn_name)
    def fn(value, mask=_FULL_MASK):
        v = _value(value, fn_name, "value")
        if str(v.expr.dtype) not in _MATCH_TYPES:
            raise ArgError("value", f"{fn_name}: the value must be a 32- or 64-bit integer or float "
                                    f"({', '.join(_MATCH_TYPES)}), got {v.expr.dtype}")
        return call(name, [_mask(mask, fn_name), v], "uint32")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{fn_name}(value, mask=0xFFFFFFFF): {what} (`__{name}`, sm_70+); every lane of `mask` must call it."
    return fn


match_any_sync = _match("match_any_sync", "a uint32 mask of the lanes of `mask` whose `value` equals this lane's")
match_all_sync = _match("match_all_sync", "`mask` (a uint32) when every lane of `mask` holds the same `value`, else 0")


# ---- block votes ----

def _block_vote(name: str, what: str):
    fn_name = f"T.{name}"

    @intrinsic(fn_name)
    def fn(predicate):
        return call(name, [_predicate(predicate, fn_name)], "int32")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{fn_name}(predicate): a barrier of the whole block (`__{name}`) returning {what}."
    return fn


syncthreads_count = _block_vote("syncthreads_count", "the number of threads whose predicate is non-zero")
syncthreads_and = _block_vote("syncthreads_and", "non-zero when every thread's predicate is")
syncthreads_or = _block_vote("syncthreads_or", "non-zero when some thread's predicate is")


# ---- thread index helpers ----

def _thread(fn: str):
    return builder.current(fn).require_kernel(fn).thread_var


def _size(value, fn: str, arg: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ArgError(arg, f"{fn}: '{arg}' must be a positive int, got {value!r}")
    return value


@intrinsic("T.get_lane_idx")
def get_lane_idx(warp_size=None):
    """The thread's lane in its warp: tx % warp_size (32 when left out)."""
    return _thread("T.get_lane_idx") % _size(warp_size, "T.get_lane_idx", "warp_size", 32)


@intrinsic("T.get_warp_idx")
def get_warp_idx(warp_size=None):
    """The thread's warp in the block: tx // warp_size (32 when left out)."""
    return _thread("T.get_warp_idx") // _size(warp_size, "T.get_warp_idx", "warp_size", 32)


@intrinsic("T.get_warp_idx_sync")
def get_warp_idx_sync(warp_size=None):
    """T.get_warp_idx (every lane of a warp computes the same value, no shuffle needed)."""
    return _thread("T.get_warp_idx_sync") // _size(warp_size, "T.get_warp_idx_sync", "warp_size", 32)


@intrinsic("T.get_warp_group_idx")
def get_warp_group_idx(warp_size=None, warps_per_group=None):
    """The thread's warp group: tx // (warp_size * warps_per_group) (32 and 4 when left out)."""
    fn = "T.get_warp_group_idx"
    if warps_per_group is not None and warp_size is None:
        raise ArgError("warp_size", f"{fn} expects `warp_size` when specifying `warps_per_group`")
    return _thread(fn) // (_size(warp_size, fn, "warp_size", 32) * _size(warps_per_group, fn, "warps_per_group", 4))


@intrinsic("T.shuffle_elect")
def shuffle_elect(thread_extent=32):
    """True in one thread of each group of `thread_extent` consecutive threads (the first);
    with 0, in the block's first thread only."""
    fn = "T.shuffle_elect"
    if isinstance(thread_extent, bool) or not isinstance(thread_extent, int) or thread_extent < 0:
        raise ArgError("thread_extent", f"{fn}: 'thread_extent' must be an int >= 0, got {thread_extent!r}")
    tx = _thread(fn)
    if thread_extent == 0:
        return binop("eq", tx, 0)
    return binop("eq", tx % thread_extent, 0)


# ---- any_of / all_of ----

def _fold_region(value, fn: str, op: str):
    region = region_of(value)
    if region is None:
        raise ArgError("buffer", f"{fn}: 'buffer' must be a buffer or a buffer region, got {value!r}")
    extents = region.extents
    if not all(isinstance(e, numbers.Integral) for e in extents):
        raise ArgError("buffer", f"{fn}: the region's extents must be constant, got {region!r}")
    count = 1
    for e in extents:
        count *= int(e)
    if count > 1024:
        raise ArgError("buffer", f"{fn}: the region holds {count} elements; at most 1024 are folded")
    buf = region.buffer
    result = None
    for flat in range(count):
        index, rest = [], flat
        for e in reversed(extents):
            index.append(rest % int(e))
            rest //= int(e)
        index = [binop("add", m, i) if isinstance(m, PrimExpr) else m + i
                 for m, i in zip(region.mins, reversed(index))]
        element = LoadValue(buf, index)
        truth = element if buf.dtype == "bool" else binop("ne", element, 0)
        result = truth if result is None else binop(op, result, truth)
    return result


@intrinsic("T.any_of")
def any_of(buffer):
    """True when any element of the buffer (or region: `A[i, :]`) is non-zero."""
    return _fold_region(buffer, "T.any_of", "or")


@intrinsic("T.all_of")
def all_of(buffer):
    """True when every element of the buffer (or region) is non-zero."""
    return _fold_region(buffer, "T.all_of", "and")


# ---- loads, hints, launch order ----

def _ldg(load_or_buf, index=None):
    """T.__ldg(x[i]) (or T.__ldg(x, i)): x[i], a load through the read-only data cache."""
    if isinstance(load_or_buf, LoadValue):
        if index is not None:
            raise ArgError("index", "T.__ldg: give either an element (x[i]) or a buffer and an index")
        return _read_only(load_or_buf)
    region = region_of(load_or_buf)
    if region is None or isinstance(load_or_buf, PrimExpr):
        raise ArgError("load_or_buf", f"T.__ldg expects an element (x[i]) or a buffer, got {load_or_buf!r}")
    if index is None:
        raise ArgError("index", "T.__ldg(buffer, index) requires an index when passing a buffer")
    if isinstance(index, (list, tuple)):
        if len(index) != 1:
            raise ArgError("index", "T.__ldg supports one (flattened) index")
        index = index[0]
    if region.buffer.ndim != 1:
        raise ArgError("load_or_buf", f"T.__ldg(buffer, index): '{region.buffer.name}' must be 1-D")
    return _read_only(region.buffer[index])


# The element types CUDA's __ldg reads; others (bool, the 8- and 4-bit floats) load plainly.
_LDG_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
              "float32", "float64")


def _read_only(load: LoadValue):
    """An element of a global tensor read through the read-only data cache: an `ldg` call
    around the load (printed `__ldg(&x[i])`); any other element is the plain load."""
    if load.buffer.scope != "global" or str(load.expr.dtype) not in _LDG_TYPES:
        return load
    return PrimExpr(ir().call("ldg", [load.expr], str(load.expr.dtype)), True, load.dyn)


__ldg = intrinsic("T.__ldg")(_ldg)


@intrinsic("T.assume")
def assume(cond=None):
    """`T.assume(i < N)`: a fact the programmer vouches for from here to the end of the
    block; the compiler may drop the bounds checks it implies (TileLang's axiom)."""
    if cond is None or isinstance(cond, bool) or is_number(cond):
        return
    if isinstance(cond, VarBuffer):
        cond = cond.load()
    if not isinstance(cond, PrimExpr):
        raise ArgError("cond", f"T.assume: 'cond' must be a condition, got {cond!r}")
    builder.current("T.assume").emit(ir().evaluate(call("assume", [cast_value(cond, "bool")], "int32").expr))


@intrinsic("T.device_assert")
def device_assert(condition, msg="", no_stack_info=False):
    """A check in device code: a thread where `condition` is false prints `msg` (with the
    kernel line, its block and thread) and stops the kernel, whose launch then fails, as
    CUDA's assert does; the reference and the simulator report it at the line.
    `no_stack_info` is accepted for TileLang's signature: the line is always named."""
    fn = "T.device_assert"
    if not isinstance(msg, str):
        raise ArgError("msg", f"{fn}: 'msg' must be a string, got {msg!r}")
    if isinstance(condition, VarBuffer):
        condition = condition.load()
    if isinstance(condition, bool) or is_number(condition):
        if not condition:
            raise ArgError("condition", f"{fn}: the condition is always false" + (f" ({msg})" if msg else ""))
        return
    if not isinstance(condition, PrimExpr):
        raise ArgError("condition", f"{fn}: 'condition' must be a condition, got {condition!r}")
    # The IR has no strings: the message rides in the op name, as T.print's does.
    builder.current(fn).emit(ir().evaluate(call(f"device_assert:{msg}", [cast_value(condition, "bool")], "int32").expr))


def _shift(name: str, op: str, sign: str):
    @intrinsic(f"T.{name}")
    def fn(x, y):
        fn_name = f"T.{name}"
        a, b = _value(x, fn_name, "x"), _value(y, fn_name, "y")
        for arg, v in (("x", a), ("y", b)):
            if not is_int(v.expr.dtype):
                raise ArgError(arg, f"{fn_name}: '{arg}' must be an integer, got {v.expr.dtype}")
        return binop(op, a, b)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"T.{name}(x, y): x {sign} y on integers (TVM's tir.{name})."
    return fn


shift_left = _shift("shift_left", "shl", "<<")
shift_right = _shift("shift_right", "shr", ">>")


def _statement(fn: str, name: str):
    builder.current(fn).emit(ir().evaluate(call(name, [], "int32").expr))


@intrinsic("T.pdl_trigger")
def pdl_trigger():
    """Programmatic dependent launch: lets the next kernel on the stream start
    (`griddepcontrol.launch_dependents` on sm_90+, nothing before)."""
    _statement("T.pdl_trigger", "pdl_trigger")


@intrinsic("T.pdl_sync")
def pdl_sync():
    """Programmatic dependent launch: waits until the previous kernel on the stream has
    finished and its memory is visible (`griddepcontrol.wait` on sm_90+, nothing before)."""
    _statement("T.pdl_sync", "pdl_sync")


# ---- random numbers ----

_GENERATORS = ("curandStatePhilox4_32_10_t", "curandStateMRG32k3a_t", "curandStateXORWOW_t")


@intrinsic("T.rng_init")
def rng_init(seed, seq=None, off=0, generator="curandStatePhilox4_32_10_t"):
    """Starts this thread's random numbers: curand_init(seed, seq, off) of `generator`.
    seq left out is the thread's index in the grid, tx + bx * threads."""
    fn = "T.rng_init"
    if generator not in _GENERATORS:
        raise ArgError("generator", f"{fn}: generator must be one of {', '.join(_GENERATORS)}, got {generator!r}")
    frame = builder.current(fn)
    if seq is None:
        kernel = frame.require_kernel(fn)
        seq = kernel.thread_var + kernel.block_vars[0] * kernel.threads
    args = []
    for arg, value in (("seed", seed), ("seq", seq), ("off", off)):
        v = _value(value, fn, arg)
        if not is_int(v.expr.dtype):
            raise ArgError(arg, f"{fn}: '{arg}' must be an integer, got {v.expr.dtype}")
        args.append(cast_value(v, "uint64"))
    args.append(cast_value(_GENERATORS.index(generator), "int32"))
    frame.emit(ir().evaluate(call("rng_init", args, "int32").expr))


@intrinsic("T.rng_rand")
def rng_rand():
    """The thread's next random uint32 (curand)."""
    return call("rng_rand", [], "uint32")


@intrinsic("T.rng_rand_float")
def rng_rand_float(bit=32, dist="uniform"):
    """The thread's next random float32 (bit=64: float64): uniform in (0, 1]
    (curand_uniform) or standard normal (dist="normal", curand_normal)."""
    if bit not in (32, 64):
        raise ArgError("bit", f"T.rng_rand_float: bit must be 32 or 64, got {bit!r}")
    if dist not in ("uniform", "normal"):
        raise ArgError("dist", f"T.rng_rand_float: dist must be 'uniform' or 'normal', got {dist!r}")
    return call(f"rng_{dist}", [], f"float{bit}")
