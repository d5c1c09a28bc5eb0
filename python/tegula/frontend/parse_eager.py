"""The body of an eager @tegula.jit function parsed into a PrimFunc (tegula/jit_eager.py
caches and calls them).

    def matmul(A, B, block_M=128, dtype="float16"):
        M, N, K = T.const("M, N, K")   # sizes without a value yet (_Pending)
        A: T.Tensor((M, K), dtype)     # declares parameter A; binds M, K from the call's A
        B: T.Tensor[[K, N], dtype]     # K is now the int bound above: checked against B
        C = T.empty((M, N), dtype)     # an output parameter
        with T.Kernel(...): ...
        return C                       # the outputs, in this order

The constants (every argument of a parameter the function does not declare) are bound
by name before the body runs. A T.const takes its value from the first declaration that
uses it as a whole dimension, or from a keyword (`.compile(M=1024)`); the names bound to
it are rebound to that int, so the rest of the body sees plain ints, exactly as the lazy
form's closure would. The PrimFunc's parameters are the declared ones in signature order,
then the returned outputs, so it is the one the lazy form with `out_idx` would give.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import numbers

from .builder import Builder, active
from .dtypes import PACKED_STORAGE, DType, is_dtype, is_packed, normalize_dtype, to_torch
from .errors import ArgError, TegulaCompileError
from .evaluator import closure_of
from .params import PointerSpec, TensorForm, TensorSpec, is_pointer_annotation, strided_spec
from .parser import Parser
from .prim_func import PrimFunc, _source_and_tree, finish, register_declared_parser
from .requests import EmptyRequest
from .values import BufferValue, PrimExpr, to_expr

class EagerArgumentError(TegulaCompileError, ValueError):
    """An argument that does not fit the body's declaration of it (shape, rank, dtype,
    a T.const bound twice to different sizes), shown at the declaration."""


def _error(source, node, message: str, cls=TegulaCompileError) -> TegulaCompileError:
    line, col = source.position(node)
    return cls(message, source.file, line, col, source.source_line(line))


def _is_tensor(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "data_ptr")


# ---- lazy or eager: decided from the function's syntax ----

def _resolve(fn, node):
    """The object a `T.const`-like callee names, looked up without running anything."""
    if isinstance(node, ast.Name):
        for table in (closure_of(fn), fn.__globals__, builtins.__dict__):
            if node.id in table:
                return table[node.id]
        return None
    if isinstance(node, ast.Attribute):
        base = _resolve(fn, node.value)
        return None if base is None else getattr(base, node.attr, None)
    return None


def _signature_specs(fn) -> dict:
    """Signature annotations that declare kernel parameters: a T.Tensor or a dtype object
    (`n: T.int32`). Plain `int`/`str` annotations mark constants, as in TileLang."""
    specs = {}
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        if isinstance(annotation, str) and not isinstance(annotation, DType):  # postponed (a DType is a str too)
            try:
                annotation = eval(annotation, fn.__globals__, closure_of(fn))  # noqa: S307 - the user's own annotation
            except Exception:  # noqa: BLE001 - not a kernel declaration we can read
                continue
        if name != "return" and isinstance(annotation, (TensorSpec, DType)):
            specs[name] = annotation
        elif name != "return" and is_pointer_annotation(annotation):
            specs[name] = annotation if isinstance(annotation, PointerSpec) else PointerSpec()
    return specs


def _body_declarations(fn_node: ast.FunctionDef, params: set) -> set:
    """Parameters the body declares with a bare annotation: `A: T.Tensor((M, K), dtype)`."""
    return {node.target.id for node in ast.walk(fn_node) if isinstance(node, ast.AnnAssign) and node.value is None
            and isinstance(node.target, ast.Name) and node.target.id in params}


# The T.* calls only an eager body makes (language/eager_ops.py), by their intrinsic names.
_DECLARATIONS = frozenset({"T.const", "T.empty"})


def is_eager(fn) -> bool:
    """Whether `@tegula.jit` got a kernel body (eager) rather than a function that returns
    a T.prim_func (lazy). A function defining an inner function is lazy; otherwise one that
    opens a `with` block, declares a parameter with a bare annotation, calls T.const or
    T.empty, or annotates a parameter with a T.Tensor or a dtype in its signature is eager."""
    if not inspect.isfunction(fn):
        return False
    try:
        _, fn_node = _source_and_tree(fn)
    except Exception:  # noqa: BLE001 - no source: only the lazy form can work
        return False
    if not isinstance(fn_node, ast.FunctionDef):
        return False
    params = {a.arg for a in fn_node.args.posonlyargs + fn_node.args.args + fn_node.args.kwonlyargs}
    eager = False
    for node in ast.walk(ast.Module(body=fn_node.body, type_ignores=[])):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return False
        if isinstance(node, ast.Call):
            callee = _resolve(fn, node.func)
            eager = eager or getattr(callee, "__tegula_intrinsic__", None) in _DECLARATIONS
        eager = eager or isinstance(node, ast.With)
    return eager or bool(_body_declarations(fn_node, params)) or bool(_signature_specs(fn))


# ---- one parse ----

def _single_assignments(body) -> dict:
    """name -> the expression node the top of `body` assigns it, for names assigned exactly
    once there by `x = value` or `a, b = u, v` (element by element)."""
    found, counts = {}, {}
    for stmt in body:
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            pairs = [(target, getattr(stmt, "value", None))]
            if isinstance(target, (ast.Tuple, ast.List)):
                value = stmt.value
                same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                pairs = list(zip(target.elts, value.elts)) if same else [(t, None) for t in target.elts]
            for item, value in pairs:
                if isinstance(item, ast.Name):
                    counts[item.id] = counts.get(item.id, 0) + 1
                    if value is not None and not isinstance(stmt, ast.AugAssign):
                        found[item.id] = value
    return {k: v for k, v in found.items() if counts[k] == 1}


class _Pending:
    """A T.const whose value the first annotation using it as a dimension will give. The
    names bound to it are rebound to the int then; any use before that is an error."""

    __tegula_pending__ = True

    def __init__(self, name: str):
        self.name = name
        self.value = None

    def _early(self, *args):
        raise ArgError(None, f"T.const '{self.name}' has no value yet: it takes one from the first parameter "
                       f"annotation that uses it as a dimension (`A: T.Tensor(({self.name}, ...), dtype)`), so use "
                       f"it after that annotation, or give {self.name}=... to .compile()")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _early
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __lt__ = __le__ = __gt__ = __ge__ = _early
    __bool__ = __int__ = __index__ = __neg__ = __pow__ = _early

    def __repr__(self):
        return f"T.const '{self.name}' (no value yet)"


class _Placeholder:
    """A parameter name bound before the statement that makes it usable has run: indexing
    it or reading an attribute raises the subclass's `_early` error."""

    name: str

    def _early(self, *args):
        raise NotImplementedError

    def __getitem__(self, index):
        self._early()

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._early()


class _Undeclared(_Placeholder):
    """A kernel parameter before its annotation in the body has run."""

    def __init__(self, name: str):
        self.name = name

    def _early(self, *args):
        raise ArgError(None, f"parameter '{self.name}' is used before its declaration "
                       f"(`{self.name}: T.Tensor(shape, dtype)`): declare it first")

    def __repr__(self):
        return f"parameter '{self.name}' (not declared yet)"


class _Pointer(_Placeholder):
    """A `T.ptr` parameter before `T.make_tensor` gives it a shape and dtype."""

    def __init__(self, name: str, spec, node):
        self.name, self.spec, self.node = name, spec, node

    def _early(self, *args):
        raise ArgError(None, f"parameter '{self.name}' is a T.ptr: make it a tensor first "
                       f"(`{self.name} = T.make_tensor({self.name}, shape, dtype)`)")

    def __setitem__(self, index, value):
        self._early()

    def __repr__(self):
        return f"pointer parameter '{self.name}'"


class _Session:
    """The state of one eager parse: what T.const, the annotations, T.empty and `return`
    declared. `arguments`: kernel parameter name -> the call's tensor (or T.Tensor spec,
    or scalar), None when `.compile` was not given one; `sizes`: T.const values given by
    keyword."""

    def __init__(self, source, fn_node, kernel_names: tuple, arguments: dict, sizes: dict):
        self.source, self.fn_node = source, fn_node
        self.kernel_names = kernel_names
        # T.ptr() stands for a pointer argument ahead of a call: no tensor to read sizes off.
        self.arguments = {k: None if isinstance(v, PointerSpec) else v for k, v in arguments.items()}
        self.parser = None  # set by _parse_eager
        self.sizes = sizes
        self.consts: dict = {}  # T.const name -> _Pending or int
        self.bound_by: dict = {}  # T.const name -> where its value came from, for errors
        self.labels: dict = {}  # local name rebound to a T.const's value -> the T.const name
        self.declared: dict = {}  # parameter name -> (name, value, spec)
        self.outputs: list = []  # (BufferValue, spec, node) of each T.empty
        self.returned = None

    # ---- T.const ----
    def const(self, name: str):
        if name not in self.consts:
            if name in self.sizes:
                value = self.sizes[name]
                if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
                    raise ArgError(None, f"T.const '{name}': the value given to .compile must be a positive int, "
                                   f"got {value!r}")
                self.consts[name], self.bound_by[name] = int(value), f"the keyword {name}={value}"
            else:
                early = self._from_declarations(name)
                if early is not None:
                    self.consts[name], self.bound_by[name] = early
                else:
                    self.consts[name] = _Pending(name)
        return self.consts[name]

    def _from_declarations(self, name: str):
        """(value, where) for T.const `name` read off the call's tensors through the body's
        parameter annotations, so that the body may use it before they come (TileLang's
        `splitK = K // split_k` ahead of `A: T.Tensor((M, K), dtype)`); None when no
        annotation names it as a whole dimension of a tensor argument. A shape or a
        dimension may go through names the body assigns once at its top
        (`q_shape = [batch, 1, heads, dim]`, `KH, KW = K, K`)."""
        aliases = _single_assignments(self.fn_node.body)

        def through(node, depth=0):
            while isinstance(node, ast.Name) and node.id in aliases and node.id != name and depth < 16:
                node, depth = aliases[node.id], depth + 1
            return node

        for stmt in self.fn_node.body:
            if not (isinstance(stmt, ast.AnnAssign) and stmt.value is None and isinstance(stmt.target, ast.Name)):
                continue
            argument = self.arguments.get(stmt.target.id)
            if not _is_tensor(argument):
                continue
            ann = stmt.annotation
            shape = None
            if isinstance(ann, ast.Call) and ann.args:
                shape = ann.args[0]
            elif isinstance(ann, ast.Subscript):
                inner = ann.slice
                shape = inner.elts[0] if isinstance(inner, ast.Tuple) and len(inner.elts) == 2 else inner
            shape = through(shape) if shape is not None else None
            elements = shape.elts if isinstance(shape, (ast.Tuple, ast.List)) else [shape] if shape else []
            if len(elements) != argument.dim():
                continue
            for index, element in enumerate(elements):
                element = through(element)
                if isinstance(element, ast.Name) and element.id == name:
                    return int(argument.shape[index]), f"argument '{stmt.target.id}' dimension {index}"
        return None

    def _bind_const(self, parser, pending: _Pending, value: int, where: str) -> None:
        pending.value = value
        self.consts[pending.name], self.bound_by[pending.name] = value, where
        for scope in parser.scopes:
            for key, item in list(scope.items()):
                if item is pending:
                    scope[key] = value
                    self.labels[key] = pending.name
                elif isinstance(item, tuple) and any(x is pending for x in item):
                    scope[key] = tuple(value if x is pending else x for x in item)

    # ---- parameter declarations ----
    def declare(self, parser, name: str, annotation, node) -> None:
        """`name: annotation` for a kernel parameter (in the body or the signature)."""
        if name in self.declared:
            raise parser.error(node, f"parameter '{name}' is declared twice")
        if parser.builder.blocks:
            raise parser.error(node, f"declare parameter '{name}' before the `with T.Kernel(...)` blocks")
        self._declare_read(parser, name, self._read_annotation(parser, annotation), node)

    def is_pointer_parameter(self, value) -> bool:
        """A `T.ptr` parameter of the eager function, which T.make_tensor declares."""
        return isinstance(value, _Pointer)

    def make_tensor(self, pointer, shape, dtype, strides):
        """`T.make_tensor(A, shape, dtype, strides)` on T.ptr parameter A: declares A."""
        if not isinstance(pointer, _Pointer):
            raise ArgError("ptr", f"T.make_tensor takes a T.ptr parameter of the function (`A: T.ptr`), got {pointer!r}")
        if pointer.name in self.declared:
            raise ArgError("ptr", f"T.make_tensor: parameter '{pointer.name}' is already a tensor")
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        try:
            dtype = normalize_dtype(dtype)
        except ValueError as err:
            raise ArgError("dtype", f"T.make_tensor: {err}") from None
        if pointer.spec.dtype is not None and pointer.spec.dtype != dtype:
            raise ArgError("dtype", f"T.make_tensor: parameter '{pointer.name}' is T.ptr({pointer.spec.dtype}), "
                           f"the tensor {dtype}")
        if strides is not None:
            strides = tuple(strides) if isinstance(strides, (tuple, list)) else (strides,)
            if len(strides) != len(dims):
                raise ArgError("strides", f"T.make_tensor: {len(strides)} strides for {len(dims)} dimensions")
        self._declare_read(self.parser, pointer.name, ("tensor", dims, None, dtype, strides or ()), pointer.node)
        return self.declared[pointer.name][1]

    def _declare_read(self, parser, name: str, read: tuple, node) -> None:
        kind, dims, elements, dtype, strides = read
        if parser.builder.blocks:
            raise parser.error(node, f"declare parameter '{name}' before the `with T.Kernel(...)` blocks")
        previous = parser.set_loc(node)
        if kind == "scalar":
            value, spec = PrimExpr.var(name, DType(dtype)), DType(dtype)
        else:
            spec = self._tensor_spec(parser, name, dims, elements, dtype, node)
            spec.strides = self._strides(parser, name, spec, strides, node)
            value = parser.param_buffer(name, spec)
            parser.builder.unique_name(name)
        parser.restore_loc(previous)
        parser.bind(name, value)
        self.declared[name] = (name, value, spec)

    def _read_annotation(self, parser, node):
        """("tensor", dims, their ast nodes or None, dtype) or ("scalar", None, None, dtype).
        T.Tensor(...) and T.Tensor[...] are read here rather than called, so a dimension may
        still be a T.const without a value."""
        if not isinstance(node, ast.AST):  # an annotation Python already evaluated (signature)
            value = node
        else:
            callee = {ast.Subscript: "value", ast.Call: "func"}.get(type(node))
            callee = getattr(node, callee) if callee else None
            callee = parser.eval(callee) if callee is not None else None
            if isinstance(callee, TensorForm) or callee is TensorSpec:
                strided = getattr(callee, "strided", False)
                shape_node, strides_node, dtype_node = self._tensor_parts(parser, node, strided)
                shape = parser.eval(shape_node)
                dtype = parser.eval(dtype_node) if dtype_node is not None else "float32"
                dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
                elements = shape_node.elts if isinstance(shape_node, (ast.Tuple, ast.List)) else [shape_node]
                if len(elements) != len(dims) or any(isinstance(e, ast.Starred) for e in elements):
                    elements = None
                strides = () if strides_node is None else parser.eval(strides_node)
                strides = tuple(strides) if isinstance(strides, (tuple, list)) else (strides,)
                try:
                    return "tensor", dims, elements, normalize_dtype(dtype), strides
                except ValueError as err:
                    raise parser.error(dtype_node or node, f"T.Tensor: {err}") from None
            value = parser.eval(node)
        if isinstance(value, TensorSpec):
            return "tensor", value.shape, None, value.dtype, value.strides
        if is_dtype(value):
            return "scalar", None, None, normalize_dtype(value), ()
        raise parser.error(node if isinstance(node, ast.AST) else self.fn_node,
                           f"a parameter declaration must be T.Tensor(shape, dtype) or a dtype such as T.int32, "
                           f"got {value!r}")

    @staticmethod
    def _tensor_parts(parser, node, strided: bool = False):
        """The (shape, strides, dtype) nodes of a T.Tensor or (strided) T.StridedTensor
        annotation; strides None for T.Tensor, dtype None where left out (float32)."""
        names = ("shape", "strides", "dtype") if strided else ("shape", "dtype")
        what = "T.StridedTensor" if strided else "T.Tensor"
        if isinstance(node, ast.Subscript):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if not len(names) - 1 <= len(items) <= len(names):
                raise parser.error(node, f"{what}[{', '.join(names)}] takes a {', '.join(names)}")
            parts = dict(zip(names, items))
        else:
            keywords = {k.arg: k.value for k in node.keywords}
            unknown = set(keywords) - set(names)
            if unknown or len(node.args) > len(names) or any(isinstance(a, ast.Starred) for a in node.args):
                raise parser.error(node, f"{what}({', '.join(names)}) takes a {', '.join(names)}")
            parts = {**dict(zip(names, node.args)), **keywords}
        if parts.get("shape") is None or (strided and parts.get("strides") is None):
            raise parser.error(node, f"{what} needs a {'shape and strides' if strided else 'shape'}")
        return parts["shape"], parts.get("strides"), parts.get("dtype")

    def _strides(self, parser, name: str, spec: TensorSpec, strides: tuple, node) -> tuple:
        """A T.StridedTensor's strides, its T.const ones bound from the argument's strides
        (in elements); () for a T.Tensor."""
        if not strides:
            return ()
        argument = self.arguments.get(name)
        actual = tuple(argument.stride()) if callable(getattr(argument, "stride", None)) else None
        resolved = []
        for index, stride in enumerate(strides):
            if isinstance(stride, _Pending) and stride.value is None:
                if actual is None or index >= len(actual):
                    raise _error(self.source, node, f"T.const '{stride.name}' has no value: give {stride.name}=... "
                                 f"to .compile() or a tensor for parameter '{name}'", EagerArgumentError)
                self._bind_const(parser, stride, int(actual[index]), f"argument '{name}' stride {index}")
            resolved.append(stride.value if isinstance(stride, _Pending) else stride)
        try:
            return strided_spec(spec.shape, tuple(resolved), spec.dtype).strides
        except ValueError as err:
            raise parser.error(node, f"parameter '{name}': {err}") from None

    def _label(self, element):
        """The T.const a dimension written as a plain name stands for, if any."""
        if not isinstance(element, ast.Name):
            return None
        name = self.labels.get(element.id, element.id)
        return name if name in self.bound_by else None

    def _tensor_spec(self, parser, name: str, dims: tuple, elements, dtype: str, node) -> TensorSpec:
        """The spec of parameter `name`, its T.const dimensions bound from the argument."""
        argument = self.arguments.get(name)
        actual = None
        if argument is not None:
            actual = getattr(argument, "shape", None)
            if actual is None:
                raise _error(self.source, node, f"argument '{name}' must be a tensor (it is declared "
                             f"{name}: T.Tensor(...)), got {type(argument).__name__} {argument!r}", EagerArgumentError)
            actual = tuple(actual)
            if len(actual) != len(dims):
                raise _error(self.source, node, f"argument '{name}' has shape {actual} ({len(actual)} dimension(s)), "
                             f"but it is declared with {len(dims)} dimension(s)", EagerArgumentError)
            if is_packed(dtype) and actual and isinstance(actual[-1], numbers.Integral):
                actual = (*actual[:-1], 2 * actual[-1])  # two 4-bit elements a byte
        shape = []
        for index, dim in enumerate(dims):
            label = dim.name if isinstance(dim, _Pending) else self._label(elements[index] if elements else None)
            where = f"argument '{name}' dimension {index}"
            if isinstance(dim, _Pending) and dim.value is None:
                if actual is None:
                    raise _error(self.source, node, f"T.const '{dim.name}' has no value: give {dim.name}=... to "
                                 f".compile() or a tensor for parameter '{name}'", EagerArgumentError)
                if isinstance(actual[index], bool) or not isinstance(actual[index], numbers.Integral):
                    raise _error(self.source, node, f"T.const '{dim.name}' needs a static size, but {where} is "
                                 f"{actual[index]!r}", EagerArgumentError)
                self._bind_const(parser, dim, int(actual[index]), where)
            dim = dim.value if isinstance(dim, _Pending) else dim
            static = isinstance(dim, numbers.Integral) and actual is not None
            if static and isinstance(actual[index], numbers.Integral) and actual[index] != dim:
                if label is not None:
                    why = f"T.const '{label}' is {dim}, from {self.bound_by[label]}"
                else:
                    why = f"the declaration says {dim}"
                raise _error(self.source, node, f"{where} is {actual[index]}, but {why}", EagerArgumentError)
            shape.append(dim)
        if argument is not None and getattr(argument, "dtype", None) is not None:
            expected = to_torch(dtype) if _is_tensor(argument) else dtype
            got = argument.dtype if _is_tensor(argument) else normalize_dtype(argument.dtype)
            if is_packed(dtype) and _is_tensor(argument) and str(got).rsplit(".", 1)[-1] in PACKED_STORAGE:
                got = expected
            if got != expected:
                raise _error(self.source, node, f"argument '{name}' has dtype {got}, but it is declared "
                             f"{dtype}", EagerArgumentError)
        try:
            return TensorSpec(tuple(shape), dtype)
        except ValueError as err:
            raise parser.error(node, f"parameter '{name}': {err}") from None

    # ---- outputs ----
    def add_output(self, parser, name: str, request, node) -> None:
        """`name = T.empty(...)`: an output parameter."""
        if parser.builder.blocks:
            raise parser.error(node, f"T.empty declares an output of the function: write `{name} = T.empty(...)` "
                               "before the `with T.Kernel(...)` blocks")
        dims = []
        for dim in request.shape:
            if isinstance(dim, _Pending):
                if dim.value is None:
                    raise parser.error(node, f"T.empty '{name}': T.const '{dim.name}' has no value yet; declare the "
                                       "parameter annotation that binds it first")
                dim = dim.value
            dims.append(dim)
        try:
            spec = TensorSpec(tuple(dims), request.dtype)
        except ValueError as err:
            raise parser.error(node, f"T.empty '{name}': {err}") from None
        name = parser.builder.unique_name(name)
        buf = parser._ir.buffer(name, "global", spec.dtype, [to_expr(d, "int32") for d in spec.shape])
        value = BufferValue(buf, name, spec.shape, spec.dtype, "global")
        parser.bind(node.id, value)
        self.outputs.append((value, spec, node))

    def set_returned(self, parser, stmt) -> None:
        if self.returned is not None:
            raise parser.error(stmt, "an eager @tegula.jit function returns once")
        if parser.builder.blocks or len(parser.scopes) > 1:
            raise parser.error(stmt, "`return` must be at the top of the function body, after the "
                               "`with T.Kernel(...)` blocks")
        value = None if stmt.value is None else parser.eval(stmt.value)
        items = () if value is None else tuple(value) if isinstance(value, (tuple, list)) else (value,)
        made = [v for v, _, _ in self.outputs]
        for item in items:
            if not any(item is v for v in made):
                raise parser.error(stmt.value, f"an eager @tegula.jit function returns only tensors made by "
                                   f"T.empty, got {item!r}")
        if len({id(i) for i in items}) != len(items):
            raise parser.error(stmt.value, "a T.empty tensor is returned twice")
        self.returned = list(items)

    def parameters(self, parser) -> list:
        """(name, value, spec) of the kernel's parameters: the declared ones in signature
        order, then the returned outputs in `return` order."""
        for name in self.kernel_names:
            if name not in self.declared and isinstance(parser.lookup_local(name), _Pointer):
                raise parser.error(self.fn_node, f"parameter '{name}' is a T.ptr that is never made a tensor: write "
                                   f"`{name} = T.make_tensor({name}, shape, dtype)` at the top of the body")
            if name not in self.declared:
                raise parser.error(self.fn_node, f"parameter '{name}' is never declared: write `{name}: "
                                   "T.Tensor(shape, dtype)` (or a dtype for a scalar) at the top of the body")
        returned = self.returned or []
        for value, _, node in self.outputs:
            if not any(value is r for r in returned):
                raise parser.error(node, f"T.empty tensor '{value.name}' is never returned: return it "
                                   f"(`return {value.name}`); an eager function's outputs are what it returns")
        specs = {id(v): s for v, s, _ in self.outputs}
        return [self.declared[n] for n in self.kernel_names] + [(v.name, v, specs[id(v)]) for v in returned]


class _EagerParser(Parser):
    """The body parser, plus the statements only an eager body has."""

    def __init__(self, fn, source, builder, session: _Session):
        super().__init__(fn, source, builder)
        self.session = session

    def _eager_ann_assign(self, stmt):
        target = stmt.target
        if (stmt.value is None and isinstance(target, ast.Name) and not self._macro_depth
                and target.id in self.session.kernel_names):
            self.session.declare(self, target.id, stmt.annotation, stmt)
            return None
        return Parser._ann_assign(self, stmt)

    def _eager_return(self, stmt):
        if self._macro_depth:
            return Parser._return(self, stmt)
        self.session.set_returned(self, stmt)
        return None

    def _assign_name(self, target, value):
        if isinstance(value, EmptyRequest):
            self.session.add_output(self, target.id, value, target)
            return []
        return super()._assign_name(target, value)

    _STMTS = {**Parser._STMTS, ast.AnnAssign: _eager_ann_assign, ast.Return: _eager_return}


def parse_eager(fn, kernel_names: tuple, signature_specs: dict, constants: dict, arguments: dict,
                sizes: dict) -> PrimFunc:
    """The PrimFunc of eager function `fn` for these constants (bound by name), kernel
    arguments (tensors or T.Tensor specs binding the T.const sizes; None where absent)
    and T.const sizes given by keyword."""
    try:
        return _parse_eager(fn, kernel_names, signature_specs, constants, arguments, sizes)
    except TegulaCompileError as err:
        raise err.with_traceback(None) from None


def _parse_eager(fn, kernel_names, signature_specs, constants, arguments, sizes) -> PrimFunc:
    source, fn_node = _source_and_tree(fn)
    session = _Session(source, fn_node, kernel_names, arguments, sizes)
    builder = Builder(fn.__name__)
    builder.eager = session  # what T.const / T.empty look for
    parser = _EagerParser(fn, source, builder, session)
    with active(builder):
        parser.set_loc(fn_node)
        for name, value in constants.items():
            if _is_tensor(value):
                raise _error(source, fn_node, f"argument '{name}' is a tensor, but parameter '{name}' is not declared "
                             f"as one: write `{name}: T.Tensor(shape, dtype)` at the top of the body "
                             "(undeclared parameters are compile-time constants)", EagerArgumentError)
            parser.bind(name, value)
        args = {a.arg: a for a in fn_node.args.args + fn_node.args.kwonlyargs}
        session.parser = parser
        for name in kernel_names:
            if isinstance(signature_specs.get(name), PointerSpec):
                parser.bind(name, _Pointer(name, signature_specs[name], args[name]))
            elif name in signature_specs:
                session.declare(parser, name, signature_specs[name], args[name])
            else:
                parser.bind(name, _Undeclared(name))
        parser.parse_block(fn_node.body)
        params = session.parameters(parser)
        func = finish(parser, builder, fn, source, fn_node, params)
    unused = [name for name in sizes if name not in session.consts]
    if unused:
        raise TypeError(f"{fn.__name__}(): unexpected keyword argument(s) {', '.join(map(repr, unused))}: neither a "
                        "parameter nor a T.const of the body")
    return func


def _parse_declared(fn) -> PrimFunc:
    """A prim_func in the body-declaration form, parsed as an eager body with every
    parameter a kernel argument and no call to read sizes from; its T.empty outputs
    become attrs["tilelang_out_idx"] (negative indices, as TileLang records them)."""
    _, fn_node = _source_and_tree(fn)
    names = tuple(a.arg for a in fn_node.args.args)
    func = parse_eager(fn, names, _signature_specs(fn), {}, {n: None for n in names}, {})
    outputs = len(func.params) - len(names)
    if outputs:
        func.attrs["tilelang_out_idx"] = list(range(-outputs, 0))
    return func


register_declared_parser(_parse_declared)
