"""What `T.*` calls hand the parser: descriptions of a statement that the parser carries out
where it meets them (an assignment names a buffer, a `for` opens a loop, a `with` a kernel).

    A_s = T.alloc_shared((64, 64), "float16")   # AllocRequest: allocate(builder, "A_s")
    T.let(x, value)                             # LetRequest: x is value to the block's end
    for i, j in T.Parallel(M, N): ...           # LoopSpec("parallel", [(0, M, 1), (0, N, 1)])
    A = T.make_tensor(address, (M,), dtype)     # AddressRequest
    with T.Kernel(8, threads=128) as bx: ...    # KernelSpec
    with T.ws(0): ...                           # WarpSpecializeSpec
    C = T.empty((M, N), dtype)                  # EmptyRequest: an eager body's output

They live below the language (tegula/language), which makes them and subclasses them
where a request does more (a reducer's or a barrier's allocation), so the parser reads
them without importing the language. `KERNEL_CHECKS` are the language's checks at the end
of every kernel body, registered by language/__init__.py. `serial` is the one loop the
parser makes itself: a `range` over kernel values is a T.serial loop.
"""
from __future__ import annotations

import numbers

from .builder import intrinsic
from .dtypes import is_int
from .errors import ArgError
from .values import BufferValue, PrimExpr, VarBuffer, binop, store

# Functions of the builder run once a `with T.Kernel` body is parsed, in order, each raising
# ArgError for what the kernel left undone (language/__init__.py registers them).
KERNEL_CHECKS: list = []


class AllocRequest:
    """An allocation waiting for its name: the parser creates the buffer on assignment
    (`allocate`), and a subclass does what more its kind needs."""

    def __init__(self, scope: str, shape: tuple, dtype: str, init=None, is_var: bool = False):
        self.scope = scope
        self.shape = shape
        self.dtype = dtype
        self.init = init
        self.is_var = is_var

    def allocate(self, builder, name: str):
        """The buffer named `name` in the kernel being built, initialised if asked."""
        if self.scope == "global":
            return builder.allocate_workspace(name, self.dtype, self.shape)
        cls = VarBuffer if self.is_var else BufferValue
        buffer = builder.allocate(name, self.scope, self.dtype, self.shape, cls)
        self.initialize(builder, buffer)
        if self.init is not None:
            builder.emit(store(buffer, [0], self.init))
        return buffer

    def initialize(self, builder, buffer) -> None:
        """What the buffer needs once named, before anything reads it (a barrier's init)."""


class LetRequest:
    """What T.let returns to the parser: `var` is `value` for the rest of the block."""

    def __init__(self, var: PrimExpr, value: PrimExpr):
        self.var = var
        self.value = value


class LoopSpec:
    """What a `for` iterates over: one (start, extent, step) per loop variable. `schedule`:
    T.Pipelined's hand schedule, applied once the body is parsed, and `intrinsic` the T.*
    function whose arguments its errors point at. A spec of kind "persistent" is a tile loop
    instead: `tiles(w)` gives the coordinates of wave w's tile and whether it is in range,
    `waves()` how many waves there are (language/builtins.py's T.Persistent)."""

    schedule = None
    intrinsic = None

    def __init__(self, kind: str, dims: list, num_stages: int = 0):
        self.kind = kind
        self.dims = dims
        self.num_stages = num_stages


def loop_extent(value, fn: str, arg):
    """A loop bound or extent: a Python int or an integer kernel expression."""
    if isinstance(value, VarBuffer):
        value = value.load()
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral) or
                                       (isinstance(value, PrimExpr) and is_int(value.expr.dtype))):
        label = f"argument {arg + 1}" if isinstance(arg, int) else f"'{arg}'"
        raise ArgError(arg, f"{fn}: {label} must be an integer or an integer kernel expression, got {value!r}")
    return value


def loop_range(kind: str, fn: str, start, stop, step, num_stages: int = 0) -> LoopSpec:
    """The LoopSpec of `range(start, stop, step)` semantics (or `range(start)`)."""
    if stop is None:
        start, stop = 0, loop_extent(start, fn, "start")
    else:
        start, stop = loop_extent(start, fn, "start"), loop_extent(stop, fn, "stop")
    step = 1 if step is None else step
    if not isinstance(step, int) or step <= 0:
        raise ArgError("step", f"{fn}: step must be a positive Python int, got {step!r}")
    extent = stop - start
    if step != 1:
        extent = (extent + step - 1) // step
    return LoopSpec(kind, [(start, extent, step)], num_stages)


@intrinsic("T.serial")
def serial(start, stop=None, step=None, annotations=None):
    """`for k in T.serial(n)` (or (start, stop[, step])): a loop every thread runs in full,
    in order; the bounds may be kernel expressions, the step a positive Python int."""
    return loop_range("serial", "T.serial", start, stop, step)


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


class KernelSpec:
    """What T.Kernel returns to the parser: the grid extents, the threads per block, the
    thread block cluster shape ((x, y, z), or None without clusters) and the thread block's
    shape (x, y, z) (threads = x * y * z)."""

    def __init__(self, grid: list, threads: int, cluster_dims: tuple | None = None, thread_dims: tuple | None = None):
        self.grid = grid
        self.threads = threads
        self.cluster_dims = cluster_dims
        self.thread_dims = thread_dims or (threads, 1, 1)


class WarpSpecializeSpec:
    """What `T.ws(...)` hands the parser's `with`: the threads [lo, hi) that run the body,
    the block's `threads` in all."""

    def __init__(self, groups: tuple, lo: int, hi: int, threads: int):
        self.groups = groups
        self.lo, self.hi, self.threads = lo, hi, threads

    def condition(self, tx: PrimExpr) -> PrimExpr | None:
        """`lo <= tx < hi`, leaving out a bound the block already gives; None when the
        scope is every thread of the block."""
        parts = []
        if self.lo > 0:
            parts.append(tx >= self.lo)
        if self.hi < self.threads:
            parts.append(tx < self.hi)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else binop("and", parts[0], parts[1])

    def __repr__(self) -> str:
        return f"T.ws({', '.join(map(str, self.groups))})"


class EmptyRequest:
    """What `T.empty(...)` returns; the eager parser turns `C = T.empty(...)` into an
    output parameter named C."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: str):
        self.shape = shape
        self.dtype = dtype

    def __repr__(self):
        return f"T.empty({list(self.shape)}, {self.dtype})"
