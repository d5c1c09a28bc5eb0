"""The kernel side of iket: `mark`, `range`, `range_push` / `range_pop` and `payload`,
called inside a prim_func. Each event is named; the process numbers names as it first meets
them (`event_table()`, cleared by `reset()` and by entering a session), and a kernel keeps
the numbers it was parsed with.

With instrumentation enabled (state.py), an event is an IR call the CUDA printer spells
as a record appended to the launch's log (kernels/include/tegula/iket.h):

    iket.mark("store", payload=iket.payload(idx, dtype="int32"))
      -> IR  iket_mark:store(2, idx)
      -> CUDA  tegula::iket_mark(tegula_iket_log, 2, (unsigned)(idx));

Every thread that reaches the statement records it. Disabled, the calls emit nothing.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ....frontend import builder
from ....frontend.builder import StatementScope, intrinsic
from ....frontend.dtypes import normalize_dtype
from ....frontend.errors import ArgError
from ....frontend.values import PrimExpr, VarBuffer, call, cast_value, ir, is_number
from . import state
from .records import KernelEvents

PAYLOAD_TYPES = ("int32", "uint32", "float32")
_ALIASES = {"int": "int32", "uint": "uint32", "float": "float32"}
MAX_EVENT_ID = 0xFFFF  # the record keeps an id in 16 bits


@dataclass(frozen=True)
class Event:
    """One named event: its id in the records, "mark" or "range", and its payload's dtype
    (None: no payload)."""

    name: str
    event_id: int
    kind: str
    payload_type: str | None = None


@dataclass(frozen=True)
class PayloadSpec:
    """A value an event records (`iket.payload(expr, dtype)`), already of `dtype`."""

    expr: Any
    dtype: str


_lock = threading.RLock()
_events: dict[tuple[str, str], Event] = {}
_next_id = 1
# The names iket.range_push opened and iket.range_pop has not closed yet, per kernel parsed.
_open_ranges: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def reset() -> None:
    """Forgets the event names met so far: the next kernels number theirs from 1 again
    (kernels parsed already keep their numbers)."""
    global _next_id
    with _lock:
        _events.clear()
        _next_id = 1


def event_table() -> list[dict]:
    """The events met since the last reset, by id: name, event_id, kind ("mark" or
    "range"), payload_type ("int32", "uint32", "float32" or None) and runtime_payload
    (whether events parsed now record the payload's value)."""
    with _lock:
        events = sorted(_events.values(), key=lambda e: e.event_id)
    recorded = state.runtime_payloads_enabled()
    return [{"name": e.name, "event_id": e.event_id, "kind": e.kind, "payload_type": e.payload_type,
             "runtime_payload": recorded and e.payload_type is not None} for e in events]


@intrinsic("iket.payload")
def payload(expr, dtype=None) -> PayloadSpec:
    """A scalar an event records: an int32, uint32 or float32 kernel value (or number);
    `dtype` converts it (as a cast does), else the value's own dtype is taken (a Python
    int is int32, a float float32, a bool uint32)."""
    if isinstance(expr, VarBuffer):
        expr = expr.load()
    if not (isinstance(expr, PrimExpr) or is_number(expr)):
        raise ArgError("expr", f"iket.payload: 'expr' must be a scalar kernel value or a number, got "
                       f"{type(expr).__name__} {expr!r}", kind=TypeError)
    if dtype is None:
        dtype = (str(expr.dtype) if isinstance(expr, PrimExpr) else "uint32" if isinstance(expr, bool)
                 else "int32" if isinstance(expr, int) else "float32")
    try:
        name = normalize_dtype(_ALIASES.get(str(dtype).lower(), dtype))
    except ValueError:
        name = None
    if name not in PAYLOAD_TYPES:
        raise ArgError("dtype", f"iket.payload: a payload is int32, uint32 or float32, got {dtype!r}; convert the "
                       "value with dtype=", kind=ValueError)
    return PayloadSpec(cast_value(expr, name), name)


@intrinsic("iket.mark")
def mark(name, payload=None) -> None:
    """An instant event at this point of the kernel, in every thread that reaches it."""
    spec = _payload_of(payload)
    event = _event(name, "mark", spec)
    _emit("mark", event, spec)


@intrinsic("iket.range_push")
def range_push(name, payload=None) -> None:
    """Opens range `name` here (closed by iket.range_pop); prefer `with iket.range(name):`."""
    spec = _payload_of(payload)
    event = _event(name, "range", spec)
    target = builder.current("iket.range_push")
    _open_ranges.setdefault(target, []).append(event)
    _emit("range_start", event, spec)


@intrinsic("iket.range_pop")
def range_pop(name=None) -> None:
    """Closes the range opened last (which must be `name`, when given)."""
    target = builder.current("iket.range_pop")
    opened = _open_ranges.get(target)
    if not opened:
        raise ArgError(None, "iket.range_pop: no range is open (iket.range_push opens one)", kind=RuntimeError)
    if name is not None and name != opened[-1].name:
        raise ArgError("name", f"iket.range_pop({name!r}): the range open last is {opened[-1].name!r}",
                       kind=RuntimeError)
    _emit("range_end", opened.pop(), None)


range_start = range_push
range_end = range_pop


class RangeScope(StatementScope):
    """`with iket.range(name):` (also beside T.Kernel): a range around the body."""

    def __init__(self, name: str, payload: PayloadSpec | None):
        self.name = name
        self.payload = payload

    def enter(self) -> None:
        range_push(self.name, self.payload)

    def exit(self) -> None:
        range_pop(self.name)


@intrinsic("iket.range")
def range(name, payload=None) -> RangeScope:  # noqa: A001 - TileLang's name
    """A scope for `with`: range `name` opens where the body starts and closes where it ends."""
    _check_name(name)
    return RangeScope(name, _payload_of(payload))


# ---- helpers ----

def _check_name(name) -> None:
    if not isinstance(name, str) or not name or not name.isprintable():
        raise ArgError("name", f"an iket event name is a non-empty string of printable characters, got {name!r}",
                       kind=ValueError)


def _payload_of(value) -> PayloadSpec | None:
    """An event's `payload=` argument: iket.payload's, or a plain value made one."""
    if value is None or isinstance(value, PayloadSpec):
        return value
    try:
        return payload(value)
    except ArgError as err:
        raise ArgError("payload", err.message, kind=err.kind) from None


def _event(name, kind: str, spec: PayloadSpec | None) -> Event:
    """The event named `name` of this kind, numbered on first use."""
    global _next_id
    _check_name(name)
    payload_type = spec.dtype if spec is not None else None
    with _lock:
        known = _events.get((kind, name))
        if known is not None:
            if known.payload_type != payload_type:
                raise ArgError("payload", f"iket event {name!r} was first used with payload type "
                               f"{known.payload_type}, here with {payload_type}", kind=ValueError)
            return known
        if _next_id > MAX_EVENT_ID:
            raise ArgError("name", f"more than {MAX_EVENT_ID} iket events: call iket.reset()", kind=ValueError)
        event = Event(name, _next_id, kind, payload_type)
        _next_id += 1
        _events[(kind, name)] = event
        return event


def _emit(phase: str, event: Event, spec: PayloadSpec | None) -> None:
    """The event's call, into the kernel being parsed; nothing when instrumentation is off."""
    target = builder.current(f"iket.{phase}")
    target.require_kernel(f"iket.{'mark' if phase == 'mark' else 'range'}")
    if not state.is_enabled():
        return
    hook = next((h for h in target.launch_hooks if isinstance(h, KernelEvents)), None)
    if hook is None:
        hook = KernelEvents(target.name, state.capacity(), state.output_dir())
        target.launch_hooks.append(hook)
    hook.add(event, recorded_payload=spec is not None and state.runtime_payloads_enabled())
    args = [event.event_id]
    if spec is not None and state.runtime_payloads_enabled():
        args.append(spec.expr)
    target.emit(ir().evaluate(call(f"iket_{phase}:{event.name}", args, "int32").expr))
