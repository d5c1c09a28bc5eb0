"""`@T.prim_func`: parse a Python function into one `_C.ir` Kernel, at decoration time."""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap

from .builder import Builder, active
from .errors import SourceInfo, TegulaCompileError
from .parser import Parser
from .values import BufferValue, PrimExpr, to_expr


class ParamInfo:
    """One parameter of a prim_func, as the JIT layer needs it."""

    __slots__ = ("name", "shape", "dtype", "is_scalar", "value")

    def __init__(self, name: str, shape: tuple, dtype: str, is_scalar: bool, value):
        self.name = name
        self.shape = shape  # ints and T.dynamic PrimExprs; () for scalars
        self.dtype = dtype  # canonical name
        self.is_scalar = is_scalar
        self.value = value  # BufferValue or scalar PrimExpr

    def __repr__(self):
        kind = "scalar" if self.is_scalar else f"tensor[{', '.join(str(d) for d in self.shape)}]"
        return f"ParamInfo({self.name}: {kind} {self.dtype})"


class PrimFunc:
    """A parsed kernel: the IR Kernel, its parameters, and its source for error display."""

    def __init__(self, name: str, kernels: list, params: list[ParamInfo], dynamic_vars: list[PrimExpr],
                 source: SourceInfo, fn, workspaces: list[ParamInfo] = (), attrs: dict | None = None):
        self.name = name
        # TileLang's function attributes: "tilelang_out_idx" (the T.empty outputs it
        # returns), "tilelang_pass_configs", "tilelang_compile_flags" (T.annotate_*).
        self.attrs = dict(attrs or {})
        self.attrs.setdefault("global_symbol", name)  # the kernel's entry name, as TVM records it
        self.kernels = list(kernels)  # one per `with T.Kernel` block, launched in this order
        self.kernel = self.kernels[0]
        self.workspaces = list(workspaces)  # T.alloc_global buffers: allocated per call
        self.params = params
        self.dynamic_vars = dynamic_vars
        self.source = source
        self.__wrapped__ = fn
        # What tools attached while it parsed (frontend/builder.py): they wrap its launches.
        self.launch_hooks: list = []

    def ir(self, stage: str = "all") -> str:
        return "\n".join(k.ir(stage) for k in self.kernels)

    def script(self) -> str:
        return "\n".join(k.ir() for k in self.kernels)

    def __str__(self):
        return self.script()

    def __repr__(self):
        return f"<PrimFunc {self.name}({', '.join(p.name for p in self.params)})>"

    def __call__(self, *args, **kwargs):
        raise TypeError(f"prim_func {self.name} cannot be called directly: compile it with "
                        "tegula.compile(func, out_idx=...) or return it from a @tegula.jit function")


def _source_of(fn) -> SourceInfo:
    file = fn.__code__.co_filename
    try:
        raw_lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError) as err:
        raise TegulaCompileError(f"T.prim_func needs the source of {fn.__name__} (define it in a file, "
                                 f"not an interactive prompt): {err}", file, fn.__code__.co_firstlineno, 1) from None
    dedented = textwrap.dedent("".join(raw_lines)).splitlines(keepends=True)
    first_raw = raw_lines[0]
    indent = (len(first_raw) - len(first_raw.lstrip())) - (len(dedented[0]) - len(dedented[0].lstrip()))
    raw = [line.rstrip("\n") for line in raw_lines]
    return SourceInfo(file, fn.__code__.co_firstlineno, indent, [line.rstrip("\n") for line in dedented], raw)


def _collect_dynamic(params: list) -> list[PrimExpr]:
    found: list[PrimExpr] = []
    for _, value, _ in params:
        for dim in (*value.shape, *value.strides) if isinstance(value, BufferValue) else ():
            for var in dim.dyn if isinstance(dim, PrimExpr) else ():
                if all(var is not seen for seen in found):
                    found.append(var)
    return found


def parse(fn) -> PrimFunc:
    try:
        return _parse(fn)
    except TegulaCompileError as err:
        # The frames of the parser's recursion say nothing to the user: the message
        # already shows their line.
        raise err.with_traceback(None) from None


# Source and syntax tree per code object. A function of sizes defines its prim_func anew
# on every call, but the inner function's code object is the same constant each time, so
# reading (tokenizing) its source and parsing it is done once. The tree is only read.
_SOURCE_CACHE: dict = {}
# Callables told the file of every function whose source is parsed (prim_funcs and the
# T.macros they inline): the JIT's persistent index records them (tegula/jit_index.py).
SOURCE_OBSERVERS: list = []
# Callables giving the state, outside a function's source, that changes what it parses to
# (an instrumentation session: tegula/tools/cuda/iket), or None when it changes nothing.
# The JIT keeps the kernels of calls made in different states apart (tegula/jit.py).
PARSE_CONTEXT: list = []


def parse_context() -> tuple:
    """The current state the PARSE_CONTEXT callables give, the Nones left out."""
    return tuple(value for value in (state() for state in PARSE_CONTEXT) if value is not None)


def _source_and_tree(fn):
    for observe in SOURCE_OBSERVERS:
        observe(fn.__code__.co_filename)
    # Code objects compare equal across files (equality ignores co_filename): two kernels
    # written alike at the same line of two modules would share one source, so errors
    # would show the other file and postponed (string) annotations would be read there.
    key = (fn.__code__, fn.__code__.co_filename)
    hit = _SOURCE_CACHE.get(key)
    if hit is None:
        source = _source_of(fn)
        hit = (source, ast.parse("\n".join(source.lines)).body[0])
        if len(_SOURCE_CACHE) > 4096:
            _SOURCE_CACHE.clear()
        _SOURCE_CACHE[key] = hit
    return hit


def _declares_in_body(fn_node) -> bool:
    """Whether the function is written in TileLang's body-declaration form: a parameter
    without a signature annotation (`def f(A):` then `A: T.Tensor(...)` in the body), or
    outputs it makes with T.empty and returns."""
    if any(a.annotation is None for a in fn_node.args.args):
        return True
    return any(isinstance(stmt, ast.Return) and stmt.value is not None for stmt in fn_node.body)


# The body-declaration form is an eager body (parse_eager.py, which builds on this module,
# parses it and registers its parser here when it is imported: frontend/__init__.py imports it).
_declared_parser = None


def register_declared_parser(parse_declared) -> None:
    global _declared_parser
    _declared_parser = parse_declared


def _parse(fn) -> PrimFunc:
    source, fn_node = _source_and_tree(fn)
    if not isinstance(fn_node, ast.FunctionDef):
        raise source.error_at(fn_node, "T.prim_func decorates a plain `def` function")
    if _declares_in_body(fn_node):
        return _declared_parser(fn)
    builder = Builder(fn.__name__)
    parser = Parser(fn, source, builder)
    with active(builder):
        parser.set_loc(fn_node)
        params = parser.parse_params(fn_node, dict(getattr(fn, "__annotations__", {})))
        parser.parse_block(fn_node.body)
        return finish(parser, builder, fn, source, fn_node, params)


def finish(parser: Parser, builder: Builder, fn, source: SourceInfo, fn_node, params: list) -> PrimFunc:
    """The PrimFunc of a parsed function: one IR kernel per `with T.Kernel` block, in
    launch order. params: (name, BufferValue or scalar PrimExpr, annotation) of the
    parameters. Every kernel takes the parameters, then the T.alloc_global workspaces."""
    if not builder.kernels:
        raise source.error_at(fn_node, f"prim_func {fn.__name__} has no `with T.Kernel(...)` block")
    parser.set_loc(fn_node)
    dynamic_vars = _collect_dynamic(params)
    for ws in builder.workspaces:
        for dim in ws.shape:
            for var in dim.dyn if isinstance(dim, PrimExpr) else ():
                if all(var is not seen for seen in dynamic_vars):
                    raise source.error_at(fn_node, f"T.alloc_global '{ws.name}': its shape uses '{var}', which is "
                                          "not a dimension of any parameter, so its size cannot be known at launch")
    arguments = [value.buf if isinstance(value, BufferValue) else value.expr for _, value, _ in params]
    arguments += [ws.buf for ws in builder.workspaces]
    kernels = []
    many = len(builder.kernels) > 1
    for index, (frame, body, allocs) in enumerate(builder.kernels):
        parser.set_loc(frame.node if frame.node is not None else fn_node)  # the kernel's own errors point here
        try:
            kernels.append(parser._ir.kernel(
                f"{fn.__name__}_kernel{index}" if many else fn.__name__,
                arguments,
                [v.expr for v in dynamic_vars],
                [to_expr(g, "int32") for g in frame.grid],
                [v.expr for v in frame.block_vars],
                frame.thread_var.expr,
                frame.threads,
                [b.buf for b in (*allocs, *builder.addressed)],
                body,
                {} if frame.user_source is None else {"cuda_source": frame.user_source[0],
                                                      "entry_name": frame.user_source[1]},
                list(frame.cluster_dims or ()),
            ))
        except Exception as err:  # noqa: BLE001 - the verifier's complaints are the user's
            raise parser.convert(fn_node, err) from None
    infos = []
    for name, value, _ in params:
        if isinstance(value, BufferValue):
            infos.append(ParamInfo(name, value.shape, str(value.dtype), False, value))
        else:
            infos.append(ParamInfo(name, (), str(value.dtype), True, value))
    workspaces = [ParamInfo(ws.name, ws.shape, str(ws.dtype), False, ws) for ws in builder.workspaces]
    func = PrimFunc(fn.__name__, kernels, infos, dynamic_vars, source, fn, workspaces, builder.func_attrs)
    func.launch_hooks = list(builder.launch_hooks)
    return func


class Macro:
    """A function whose body is parsed into the kernel that calls it, as if written there
    (TileLang's `T.macro`). Its parameters are bound to the values passed (buffers, kernel
    values or Python values); names it does not bind resolve in its own closure and
    globals, not the caller's. It may end with `return value`."""

    __tegula_macro__ = True

    def __init__(self, fn):
        if not inspect.isfunction(fn):
            raise TypeError(f"T.macro decorates a plain `def` function, got {fn!r}")
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"T.macro {self.fn.__name__} can only be called inside a T.prim_func")

    def source_and_tree(self):
        source, node = _source_and_tree(self.fn)
        if not isinstance(node, ast.FunctionDef):
            raise source.error_at(node, "T.macro decorates a plain `def` function")
        return source, node


def macro(fn=None, **options):
    """`@T.macro` (also `@T.macro(hygienic=True)` as in TileLang; options ignored)."""
    if fn is None:
        return lambda f: Macro(f)
    return Macro(fn)


def prim_func(fn=None, **options):
    """`@T.prim_func` (also `@T.prim_func(private=True)` as in TVMScript; options ignored)."""
    if fn is None:
        return lambda f: parse(f)
    return parse(fn)
