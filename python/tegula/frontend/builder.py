"""The statement builder a prim_func is parsed into, and the intrinsic calling convention.

`T.*` functions are ordinary Python functions marked with `@intrinsic("T.copy")`. The
parser checks each call's arguments against the signature before calling, so a wrong
keyword is reported at the keyword itself; tile ops then emit their statement into the
builder of the prim_func being parsed (`current()`), which is also how they work when
called from a plain Python helper function inside a kernel.
"""
from __future__ import annotations

import inspect

from .errors import ArgError
from .stack import STACK
from .values import BufferValue, PrimExpr, VarBuffer, ir, to_expr


class KernelFrame:
    """What `with T.Kernel(...) as (bx, by)` declared."""

    def __init__(self, grid: list, block_vars: list[PrimExpr], thread_var: PrimExpr, threads: int,
                 cluster_dims: tuple | None = None, thread_dims: tuple | None = None):
        self.grid = grid
        self.block_vars = block_vars
        self.thread_var = thread_var
        self.threads = threads  # the flat block's: x * y * z of thread_dims
        self.thread_dims = thread_dims or (threads, 1, 1)
        self.cluster_dims = cluster_dims  # (x, y, z) of a thread block cluster, or None
        self.node = None  # the T.Kernel(...) call, once parsed
        self.user_source = None  # T.CUDASourceCodeKernel: (CUDA source, entry name)


class StatementScope:
    """A `with` item of a kernel that is not T.Kernel: `with T.Kernel(...) as bx, scope:`,
    or `with scope:` inside the kernel. The parser calls `enter()` before the body and
    `exit()` after it, each emitting its statements into the current builder; a tool's
    range of instrumentation events is one (tegula/tools/cuda/iket)."""

    def enter(self) -> None:
        raise NotImplementedError

    def exit(self) -> None:
        raise NotImplementedError


class Builder:
    def __init__(self, name: str):
        self.name = name
        self.blocks: list[list] = []  # innermost last; each a list of _C.ir.Stmt
        self.allocs: list[BufferValue] = []  # of the kernel being parsed
        self.kernel: KernelFrame | None = None  # the kernel being parsed (or the last one)
        self.kernel_body = None
        # Every `with T.Kernel` block of the prim_func, in launch order: (frame, body, allocs).
        self.kernels: list[tuple] = []
        # T.alloc_global buffers: workspaces the runtime allocates per call, seen by every kernel.
        self.workspaces: list[BufferValue] = []
        # Tensors at T.ptr parameters made before the kernels (T.make_tensor): every kernel's.
        self.addressed: list[BufferValue] = []
        self._names: dict[str, int] = {}
        # The T.* call being evaluated, as (intrinsic, args, kwargs): what emitted a statement.
        self.call: tuple | None = None
        # While a list: (block depth, statement, call) of every statement emitted, in order
        # (a scheduled T.Pipelined body reads what its statements are: pipeline_schedule).
        self.trace: list | None = None
        self.parallel = 0  # T.Parallel loops around the statement being parsed
        self.pipelined = 0  # T.Pipelined loops around it
        self.parallel_body: int | None = None  # id() of the innermost T.Parallel loop's body block
        # `with T.ws(...)` scopes: how many were parsed so far, and for each one open, innermost
        # last, the T.Pipelined loops around it (a barrier in the scope orders its own loop).
        self.ws_scopes = 0
        self.ws_levels: list[int] = []
        self.barriers: dict[int, object] = {}  # id() -> barrier statement emitted in a T.Parallel body
        self.loop_bodies: set = set()  # ids of the blocks that are loop bodies (of any kind)
        self.reducers: list = []  # the kernel's T.alloc_reducer buffers (language/reducers.py)
        # T.annotate_pass_configs / T.annotate_compile_flags: the function's attributes.
        self.func_attrs: dict = {}
        # T.alloc_barrier buffers of the kernel being parsed: name -> (buffer, arrive counts);
        # T.tma_copy calls still waiting for an arrival on their barrier (language/barriers.py).
        self.mbarriers: dict = {}
        self.pending_tma: list = []
        # What tools attached while the function parsed: the JIT lets each wrap the compiled
        # kernel's launches (hook.wrap_launch(kernel, program, launch, stream) -> launch).
        self.launch_hooks: list = []

    # ---- statements ----
    def emit(self, stmt) -> None:
        if not self.blocks:
            raise ArgError(None, "this statement must be inside `with T.Kernel(...)`")
        if stmt is not None:
            self.blocks[-1].append(stmt)
            if self.trace is not None:
                self.trace.append((len(self.blocks), stmt, self.call))

    def emit_barrier(self, stmt, what: str) -> None:
        """A barrier (T.sync_threads, T.sync_grid, a cluster barrier). T.Parallel's
        iterations run at once, one per thread, so a barrier in its body is where all of
        them meet: the loop is split there (split_at_barriers), which needs the barrier to
        be a statement of the loop body itself."""
        if self.parallel:
            if not self.blocks or id(self.blocks[-1]) != self.parallel_body:
                raise ArgError(None, f"{what} inside a T.Parallel loop must be a statement of the loop body itself, "
                               "not inside an `if`, an inner serial loop or after a value the body assigned (the loop "
                               "is split at the barrier: keep such a value in a fragment)")
            self.barriers[id(stmt)] = stmt
        self.emit(stmt)

    def split_at_barriers(self) -> list | None:
        """The innermost block (a T.Parallel body) cut at its barriers, popped: a list of
        ("body", stmt) and ("barrier", stmt) in order; None, and nothing popped, when it
        holds no barrier."""
        stmts = self.blocks[-1]
        if not any(id(s) in self.barriers for s in stmts):
            return None
        self.blocks.pop()
        parts, run = [], []
        for s in stmts:
            if id(s) not in self.barriers:
                run.append(s)
                continue
            if run:
                parts.append(("body", run[0] if len(run) == 1 else ir().seq(run)))
            parts.append(("barrier", s))
            run = []
        if run:
            parts.append(("body", run[0] if len(run) == 1 else ir().seq(run)))
        return parts

    def push(self) -> None:
        self.blocks.append([])

    def pop(self):
        """The statements of the innermost block as one statement."""
        stmts = self.blocks.pop()
        return stmts[0] if len(stmts) == 1 else ir().seq(stmts)

    def pop_optional(self):
        """Like pop(), but None for a block with no statements (an empty `else`)."""
        return self.pop() if self.blocks[-1] else (self.blocks.pop(), None)[1]

    # ---- allocations ----
    def unique_name(self, name: str) -> str:
        """Buffers of one kernel get distinct names even when a Python name is reused."""
        count = self._names.get(name, 0)
        self._names[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def allocate(self, name: str, scope: str, dtype: str, shape: tuple, cls=BufferValue) -> BufferValue:
        name = self.unique_name(name)
        # A T.alloc_var is printed as a plain variable (ir BufferNode::scalar).
        buf = ir().buffer(name, scope, dtype, [to_expr(s, "int32") for s in shape], cls is VarBuffer)
        value = cls(buf, name, shape, dtype, scope)
        self.allocs.append(value)
        return value

    def view(self, base: BufferValue, shape: tuple, dtype: str | None = None) -> BufferValue:
        """A view of `base` under `shape` (same scope, row-major order; `dtype`, when not
        base's, reinterprets its bytes): a buffer of the kernel with no storage of its own
        (see ir BufferNode::view_of)."""
        name = self.unique_name(f"{base.name}_view")
        buf = ir().view(name, base.buf, [to_expr(s, "int32") for s in shape], dtype or "")
        value = BufferValue(buf, name, shape, dtype or base.dtype, base.scope)
        self.allocs.append(value)  # the kernel keeps it among its views
        return value

    def address_tensor(self, name: str, dtype: str, shape: tuple, strides: tuple, address) -> BufferValue:
        """The global tensor at the address the Var `address` holds (T.make_tensor): the
        kernel's own, or every kernel's when made before them."""
        name = self.unique_name(name)
        buf = ir().address_buffer(name, dtype, [to_expr(s, "int32") for s in shape],
                                  [to_expr(s, "int32") for s in strides], address)
        value = BufferValue(buf, name, shape, dtype, "global", strides)
        (self.allocs if self.blocks else self.addressed).append(value)
        return value

    def allocate_workspace(self, name: str, dtype: str, shape: tuple) -> BufferValue:
        if self.blocks:
            raise ArgError(None, "T.alloc_global declares a workspace of the whole prim_func: write it before "
                           "the `with T.Kernel(...)` blocks, not inside one")
        name = self.unique_name(name)
        buf = ir().buffer(name, "global", dtype, [to_expr(s, "int32") for s in shape])
        value = BufferValue(buf, name, shape, dtype, "global")
        self.workspaces.append(value)
        return value

    def finish_kernel(self, frame: KernelFrame, body) -> None:
        self.kernel = frame
        self.kernel_body = body
        self.kernels.append((frame, body, self.allocs))
        self.allocs = []

    def require_kernel(self, what: str) -> KernelFrame:
        if self.kernel is None or not self.blocks:
            raise ArgError(None, f"{what} can only be used inside `with T.Kernel(...)`")
        return self.kernel


_STACK: list[Builder] = STACK  # shared with values.py through stack.py


def current(what: str = "this function") -> Builder:
    if not _STACK:
        raise RuntimeError(f"{what} can only be used inside a @T.prim_func kernel")
    return _STACK[-1]


class active:
    """`with active(builder):` makes it the target of intrinsics while a function parses."""

    def __init__(self, builder: Builder):
        self.builder = builder

    def __enter__(self):
        _STACK.append(self.builder)
        return self.builder

    def __exit__(self, *exc):
        _STACK.pop()
        return False


def intrinsic(name: str):
    """Marks a `T.*` function: `name` is how errors call it ("T.copy")."""

    def mark(fn):
        fn.__tegula_intrinsic__ = name
        fn.__tegula_signature__ = inspect.signature(fn)
        return fn

    return mark


def check_call(fn, args: list, kwargs: dict) -> tuple[int | str, str] | None:
    """Argument problems of a call to an intrinsic, found before calling it:
    (positional index or keyword name of the culprit, message), or None when fine."""
    name = fn.__tegula_intrinsic__
    sig: inspect.Signature = fn.__tegula_signature__
    params = list(sig.parameters.values())
    takes_var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not takes_var_kw:
        for key in kwargs:
            if key not in named:
                return key, f"{name}() got an unexpected keyword argument '{key}' (it takes: {', '.join(named)})"
    try:
        sig.bind(*args, **kwargs)
    except TypeError as err:
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        has_var_pos = any(p.kind is p.VAR_POSITIONAL for p in params)
        if not has_var_pos and len(args) > len(positional):
            return len(positional), (f"{name}() takes at most {len(positional)} positional argument(s) "
                                     f"({', '.join(p.name for p in positional)}), got {len(args)}")
        return -1, f"{name}(): {err}"
    return None


def argument_index(fn, arg_name: str, n_positional: int) -> int | str:
    """Where argument `arg_name` was passed: its positional index if it was passed by
    position, else the name (a keyword)."""
    for index, param in enumerate(fn.__tegula_signature__.parameters.values()):
        if param.kind is param.VAR_POSITIONAL:
            return arg_name
        if param.name == arg_name:
            return index if index < n_positional else arg_name
    return arg_name
