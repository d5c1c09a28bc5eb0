"""Layouts a kernel can ask for with `T.annotate_layout({buf: layout})`.

A swizzled shared-memory layout travels to the IR as its kind alone (the `layout` attr of
the annotate_layout tile op); the C++ layout algebra (src/layout) builds the index map for
the buffer's shape and type during layout inference.

A register layout, `T.Fragment(shape, forward_thread_fn=...)`, is a Python function of the
element's indices. Its domain is constant, so it is evaluated here over every element,
and the resulting table (which thread holds each element, in which register) is what the
IR carries; layout inference takes it as fixed (src/layout/fragment.h, make_table).
"""
from __future__ import annotations

import itertools
import numbers

from .frontend.values import BufferValue


class Layout:
    """TileLang's `T.Layout(shape, forward_fn)`: where each element of a global tensor is
    stored. `forward_fn(*indices)` returns the element's position (a list of index
    expressions); the tensor is stored in row-major order of the positions, whose range
    Tegula derives. `T.annotate_layout({A: layout})` on a kernel parameter makes every
    access of the kernel go through it, so kernels that pass a tensor between them in
    another order agree on it (FlashAttention's backward writes dQ in the order its gemm
    fragments hold it, and its post-processing kernel reads it back the same way):

        T.Layout(dQ.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])

    The map must be a one-to-one rearrangement of the elements (checked when the kernel is
    compiled). `T.layout.make_swizzled_layout(buf)` also gives a Layout: the swizzle of a
    shared tile, which Tegula builds itself."""

    __slots__ = ("kind", "buffer", "shape", "forward_fn")

    KINDS = ("swizzled", "map", "row_major")  # row_major: a shared tile left as it is

    def __init__(self, shape, forward_fn=None, *, kind: str = "map", buffer: BufferValue | None = None):
        if kind not in self.KINDS:
            raise ValueError(f"unknown layout kind {kind!r} (known: {', '.join(self.KINDS)})")
        self.kind = kind
        self.buffer = buffer
        self.forward_fn = forward_fn
        if kind == "map":
            dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
            if not dims:
                raise ValueError("T.Layout: shape must have at least one dimension")
            if not callable(forward_fn):
                raise TypeError(f"T.Layout: forward_fn must be a function of the {len(dims)} indices, "
                                f"got {type(forward_fn).__name__} {forward_fn!r}")
            self.shape = dims
        else:
            self.shape = tuple(buffer.shape) if buffer is not None else ()

    def get_input_shape(self) -> list:
        return list(self.shape)

    def positions(self):
        """(index variables, position expressions): forward_fn applied to fresh variables."""
        from .frontend.values import PrimExpr, to_expr

        names = ("i", "j", "k", "l", "m", "n", "p", "q")
        variables = [PrimExpr.var(f"layout_{names[d] if d < len(names) else d}") for d in range(len(self.shape))]
        out = self.forward_fn(*variables)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        if not out:
            raise ValueError("T.Layout: forward_fn returned no position")
        exprs = []
        for j, value in enumerate(out):
            if not (isinstance(value, PrimExpr) or (isinstance(value, numbers.Integral) and not isinstance(value, bool))):
                raise TypeError(f"T.Layout: forward_fn's output {j} must be an integer index expression, "
                                f"got {type(value).__name__} {value!r}")
            exprs.append(to_expr(value, "int32"))
        return [v.expr for v in variables], exprs

    def __repr__(self):
        if self.kind == "map":
            return f"Layout({list(self.shape)}, {getattr(self.forward_fn, '__name__', self.forward_fn)})"
        return f"Layout({self.kind}, {getattr(self.buffer, 'name', self.buffer)})"


def make_swizzled_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    """The bank-conflict-free XOR swizzle for a shared-memory tile (TileLang's name).

    `k_major` and `allow_pad` are TileLang's knobs; Tegula derives the swizzle from the
    buffer's shape and type and the instruction that reads it, so they are accepted only
    so that TileLang kernels port unchanged."""
    if not isinstance(buffer, BufferValue):
        raise TypeError(f"make_swizzled_layout expects a buffer, got {type(buffer).__name__} {buffer!r}")
    if buffer.scope != "shared":
        raise TypeError(f"make_swizzled_layout: buffer {buffer.name} is in {buffer.scope} memory; "
                        "only shared-memory buffers are swizzled")
    return Layout(None, kind="swizzled", buffer=buffer)


def _as_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"T.Fragment: {what} must give an int for integer indices, "
                        f"got {type(value).__name__} {value!r}")
    return int(value)


class Fragment:
    """TileLang's register layout: which thread holds each element of a fragment, and in
    which of its registers.

        T.Fragment((32, 4), forward_thread_fn=lambda i, j: i * 4 + j)   # one element a thread
        T.Fragment((4, 128), forward_fn=lambda i, j: (j, i))            # thread j, register i
        T.Fragment((32, 4), forward_thread_fn=lambda i, j, rep: i * 4 + rep, replicate=4)

    `forward_fn(*indices[, rep])` returns (thread, register index); otherwise
    `forward_thread_fn(*indices[, rep])` gives the thread and `forward_index_fn(*indices)`
    the register index (an int or a list of ints, numbered row-major). Without one, each
    thread numbers the elements it holds in row-major order, as TileLang derives it. With
    `replicate=r`, each element has r copies, the functions taking the copy's number last.

    The functions run now, on Python ints, over the whole (constant) shape; `table` is the
    result: per element in row-major order, its (thread, register) copies.
    """

    def __init__(self, shape, forward_fn=None, forward_thread_fn=None, replicate=1, forward_index_fn=None):
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        if not dims or not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d > 0 for d in dims):
            raise ValueError(f"T.Fragment: shape must be positive constant ints, got {shape!r}")
        if isinstance(replicate, bool) or not isinstance(replicate, numbers.Integral) or replicate < 1:
            raise ValueError(f"T.Fragment: replicate must be an int >= 1, got {replicate!r}")
        if (forward_fn is None) == (forward_thread_fn is None):
            raise ValueError("T.Fragment: give exactly one of forward_fn (returning (thread, index)) and "
                             "forward_thread_fn")
        if forward_fn is not None and forward_index_fn is not None:
            raise ValueError("T.Fragment: forward_index_fn goes with forward_thread_fn; forward_fn returns the "
                             "index itself")
        self.shape = tuple(int(d) for d in dims)
        self.replicate = int(replicate)
        copies, indices = self._evaluate(forward_fn, forward_thread_fn, forward_index_fn)
        self.table = self._number_registers(copies, indices)
        self.threads = 1 + max(t for holders in self.table for t, _ in holders)
        self.slots = 1 + max(s for holders in self.table for _, s in holders)

    def _evaluate(self, forward_fn, forward_thread_fn, forward_index_fn):
        """Per element: the thread of each copy, and its register index (a tuple) or None."""
        copies, indices = [], []
        reps = range(self.replicate)
        for idx in itertools.product(*(range(d) for d in self.shape)):
            threads, index = [], None
            for rep in reps:
                args = idx + ((rep,) if self.replicate > 1 else ())
                if forward_fn is not None:
                    result = forward_fn(*args)
                    if not isinstance(result, (tuple, list)) or len(result) != 2:
                        raise TypeError(f"T.Fragment: forward_fn must return (thread, index), got {result!r} "
                                        f"for element {idx}")
                    thread, got = result
                    got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                    got = tuple(_as_int(v, "forward_fn's index") for v in got)
                    if index is not None and got != index:
                        raise ValueError(f"T.Fragment: the copies of element {idx} have different register "
                                         f"indices {index} and {got}; the index may not depend on the copy")
                    index = got
                else:
                    thread = forward_thread_fn(*args)
                thread = _as_int(thread, "the thread function")
                if thread < 0:
                    raise ValueError(f"T.Fragment: element {idx} is given thread {thread}; threads count from 0")
                if thread not in threads:
                    threads.append(thread)
            if forward_index_fn is not None:
                got = forward_index_fn(*idx)
                got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                index = tuple(_as_int(v, "forward_index_fn") for v in got)
            copies.append(threads)
            indices.append(index)
        return copies, indices

    def _number_registers(self, copies, indices) -> list:
        if indices[0] is not None:
            if any(len(i) != len(indices[0]) for i in indices):
                raise ValueError("T.Fragment: the register index must have the same length for every element")
            if any(v < 0 for i in indices for v in i):
                raise ValueError("T.Fragment: register indices must be >= 0")
            extents = [1 + max(i[d] for i in indices) for d in range(len(indices[0]))]
            slots = []
            for index in indices:
                flat = 0
                for v, e in zip(index, extents):
                    flat = flat * e + v
                slots.append(flat)
            table = [[(t, s) for t in threads] for threads, s in zip(copies, slots)]
        else:
            count = {}
            table = []
            for threads in copies:  # elements in row-major order
                holders = []
                for t in threads:
                    holders.append((t, count.get(t, 0)))
                    count[t] = count.get(t, 0) + 1
                table.append(holders)
        owner = {}
        for flat, holders in enumerate(table):
            for place in holders:
                other = owner.setdefault(place, flat)
                if other != flat:
                    raise ValueError(f"T.Fragment: elements {self.element(other)} and {self.element(flat)} both land "
                                     f"in thread {place[0]}, register {place[1]}")
        return table

    def element(self, flat: int) -> tuple:
        """The indices of the row-major element `flat`."""
        out = []
        for d in reversed(self.shape):
            out.append(flat % d)
            flat //= d
        return tuple(reversed(out))

    def encode(self) -> str:
        """The table as the IR carries it: per element, "thread:register" copies joined by
        ",", elements by " " (src/layout/fragment.cc parses it)."""
        return " ".join(",".join(f"{t}:{s}" for t, s in holders) for holders in self.table)

    def __repr__(self):
        return f"T.Fragment({list(self.shape)}, threads={self.threads}, registers={self.slots})"
