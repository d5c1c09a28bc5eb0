"""Evaluating the expressions of a kernel's Python AST.

An expression evaluates to a plain Python value (folded here, in Python) or a DSL value
(values.py) whose operators build IR. Names resolve, innermost first, from the DSL's own
locals (loop vars, buffers, lets), the function's closure, its globals, then builtins.

Every node evaluated first stamps its location on the IR builder (`_C.ir.set_loc`) and
restores its parent's afterwards, so the node a parent builds carries the parent's
position; any failure is reported at the innermost node that failed.
"""
from __future__ import annotations

import ast
import builtins
import operator

from ..env import native
from .builder import argument_index, check_call
from .errors import ArgError, SourceInfo, TegulaCompileError, from_native
from .requests import serial
from .values import DeclaredVar, PrimExpr, VarBuffer, binop, ir, select

_MISSING = object()

BINARY_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}

COMPARE_OPS = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}

UNSUPPORTED_EXPRS = {
    ast.SetComp: "set comprehensions", ast.DictComp: "dict comprehensions",
    ast.NamedExpr: "assignment expressions (:=)", ast.Await: "await",
    ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Set: "set literals",
    ast.MatMult: "the @ operator (use T.gemm)",
}


def _logical(op: str, left, right):
    """`left and/or right` where at least `left` is a kernel value; Python values fold."""
    if not isinstance(right, PrimExpr):
        if op == "and":
            return left if right else right
        return True if right else left
    if not isinstance(left, PrimExpr):
        return _logical(op, right, left)
    return binop(op, left, right)


def closure_of(fn) -> dict:
    """The names a function closes over, with their current values."""
    closure = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            closure[name] = cell.cell_contents
        except ValueError:  # a cell not yet filled (name assigned after the def)
            pass
    return closure


def _binding_misuse(err: Exception) -> str | None:
    """pybind11's TypeError for a call into tegula._C with arguments of the wrong types, as
    ours: the frontend checks the user's values before it calls the IR builder, so such a
    call is a bug here, and its list of C++ signatures means nothing to the user."""
    text = str(err)
    if not isinstance(err, TypeError) or "incompatible function arguments" not in text:
        return None
    function = text.split("(", 1)[0].strip()
    given = text.split("Invoked with:", 1)[1].strip() if "Invoked with:" in text else "?"
    return (f"internal error: Tegula's frontend called {function}() of its IR builder with arguments of types it "
            f"does not take ({given}); please report this with the kernel")


class Evaluator:
    def __init__(self, fn, source: SourceInfo):
        self.src = source
        self.file = source.file
        self.globals = fn.__globals__
        self.closure = closure_of(fn)
        self.scopes: list[dict] = [{}]
        self._ir = ir()
        self._native_error = native().CompileError
        self._loc = (self.file, source.first_line, 1)

    # ---- locations and errors ----
    def set_loc(self, node) -> tuple:
        previous = self._loc
        line, col = self.src.position(node)
        self._loc = (self.file, line, col)
        self._ir.set_loc(*self._loc)
        return previous

    def restore_loc(self, loc: tuple) -> None:
        self._loc = loc
        self._ir.set_loc(*loc)

    def error(self, node, message: str, kind: type | None = None) -> TegulaCompileError:
        return self.src.error_at(node, message, kind)

    def convert(self, node, err: Exception) -> TegulaCompileError:
        """Any exception raised at `node` as the user's compile error."""
        if isinstance(err, TegulaCompileError):
            return err
        if isinstance(err, self._native_error):
            return from_native(err, self.src)
        if isinstance(err, ArgError):
            return self.error(node, err.message, err.kind)
        binding = _binding_misuse(err)
        if binding is not None:
            return self.error(node, binding)
        return self.error(node, f"{type(err).__name__}: {err}")

    # ---- names ----
    def lookup_local(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return _MISSING

    def lookup(self, name: str, node):
        value = self.lookup_local(name)
        if isinstance(value, DeclaredVar) and value.bound:
            return value.var  # `x = T.int32()` that T.let bound: the variable
        if value is not _MISSING:
            return value
        for table in (self.closure, self.globals, builtins.__dict__):
            if name in table:
                return table[name]
        raise self.error(node, f"name '{name}' is not defined in the kernel")

    def bind(self, name: str, value) -> None:
        self.scopes[-1][name] = value

    # ---- expressions ----
    def eval(self, node):
        handler = self._EXPRS.get(type(node))
        if handler is None:
            what = UNSUPPORTED_EXPRS.get(type(node), type(node).__name__)
            raise self.error(node, f"{what} are not supported inside a kernel"
                             if type(node) in UNSUPPORTED_EXPRS else f"unsupported Python syntax in a kernel: {what}")
        previous = self.set_loc(node)
        try:
            result = handler(self, node)
        except Exception as err:  # noqa: BLE001 - every failure becomes a located user error
            raise self.convert(node, err) from None
        self.restore_loc(previous)
        return result

    def eval_base(self, node):
        """Like eval, but a T.alloc_var name stays a buffer (for `x[0]`)."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id, node)
        return self.eval(node)

    def _name(self, node):
        value = self.lookup(node.id, node)
        return value.load() if isinstance(value, VarBuffer) else value

    def _constant(self, node):
        return node.value

    def _attribute(self, node):
        return getattr(self.eval(node.value), node.attr)

    def eval_index(self, node):
        if isinstance(node, ast.Slice):
            parts = (node.lower, node.upper, node.step)
            return slice(*(None if p is None else self.eval(p) for p in parts))
        if isinstance(node, ast.Tuple):
            return tuple(self.eval_index(e) for e in node.elts)
        return self.eval(node)

    def _subscript(self, node):
        base = self.eval_base(node.value)
        return base[self.eval_index(node.slice)]

    def _elements(self, nodes) -> list:
        out = []
        for element in nodes:
            if isinstance(element, ast.Starred):
                out.extend(self.eval(element.value))
            else:
                out.append(self.eval(element))
        return out

    def _tuple(self, node):
        return tuple(self._elements(node.elts))

    def _list(self, node):
        return self._elements(node.elts)

    def _dict(self, node):
        out = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                out.update(self.eval(value))
            else:
                out[self.eval(key)] = self.eval(value)
        return out

    def _binop(self, node):
        op = BINARY_OPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"{UNSUPPORTED_EXPRS.get(type(node.op), type(node.op).__name__)} "
                             "is not supported inside a kernel")
        return op(self.eval(node.left), self.eval(node.right))

    def _unaryop(self, node):
        value = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            if isinstance(value, PrimExpr):
                return PrimExpr(self._ir.not_(value.expr), value.reads, value.dyn)
            return not value
        table = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}
        return table[type(node.op)](value)

    def _boolop(self, node):
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.eval(node.values[0])
        for item in node.values[1:]:
            if not isinstance(result, PrimExpr):
                if (op == "and") != bool(result):  # Python short-circuit
                    return result
                result = self.eval(item)
            else:
                result = _logical(op, result, self.eval(item))
        return result

    def _compare(self, node):
        # `a < b < c` is `a < b and b < c`; a Python False ends it, as in Python.
        left = self.eval(node.left)
        result = None
        for op_node, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            step = COMPARE_OPS[type(op_node)](left, right)
            if isinstance(step, PrimExpr):
                result = step if result is None else binop("and", result, step)
            elif not step:
                return step
            left = right
        return True if result is None else result

    def _ifexp(self, node):
        cond = self.eval(node.test)
        if not isinstance(cond, PrimExpr):
            return self.eval(node.body if cond else node.orelse)
        return select(cond, self.eval(node.body), self.eval(node.orelse))

    def _joinedstr(self, node):
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                item = self.eval(value.value)
                item = {-1: lambda x: x, 115: str, 114: repr, 97: ascii}[value.conversion](item)
                spec = self.eval(value.format_spec) if value.format_spec is not None else ""
                parts.append(format(item, spec))
            else:
                parts.append(value.value)
        return "".join(parts)

    # ---- calls ----
    def _call(self, node):
        fn = self.eval(node.func)
        args = self._elements(node.args)
        kwargs = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                kwargs.update(self.eval(keyword.value))
            else:
                kwargs[keyword.arg] = self.eval(keyword.value)
        if fn is range and any(isinstance(a, PrimExpr) for a in args):
            fn = serial  # range over a kernel value is T.serial
        if getattr(fn, "__tegula_macro__", False) and hasattr(self, "expand_macro"):
            return self.expand_macro(fn, args, kwargs, node)
        intrinsic = getattr(fn, "__tegula_intrinsic__", None)
        if intrinsic is None:
            return fn(*args, **kwargs)
        problem = check_call(fn, args, kwargs)
        if problem is not None:
            raise self.error(self._argument_node(node, problem[0]), problem[1])
        self.set_loc(node)  # the statement a tile op emits carries the call's position
        owner = getattr(self, "builder", None)  # the parser's; the statements' origin is noted there
        outer = owner.call if owner is not None else None
        if owner is not None:
            owner.call = (fn, args, kwargs)
        try:
            return fn(*args, **kwargs)
        except ArgError as err:
            raise self.arg_error(node, fn, err, len(args)) from None
        finally:
            if owner is not None:
                owner.call = outer

    def arg_error(self, node: ast.Call, fn, err: ArgError, n_positional: int) -> TegulaCompileError:
        """An intrinsic's ArgError shown at the argument (or its element) it is about."""
        where = err.arg if isinstance(err.arg, int) or err.arg is None else argument_index(fn, err.arg, n_positional)
        culprit = self._argument_node(node, where)
        if isinstance(culprit, ast.keyword):
            culprit = culprit.value
        if err.item is not None and isinstance(culprit, (ast.Tuple, ast.List)) and err.item < len(culprit.elts):
            culprit = culprit.elts[err.item]
        return self.error(culprit, err.message, err.kind)

    @staticmethod
    def _argument_node(node: ast.Call, where):
        if isinstance(where, int) and 0 <= where < len(node.args):
            return node.args[where]
        if isinstance(where, str):
            for keyword in node.keywords:
                if keyword.arg == where:
                    return keyword
        return node

    def _lambda(self, node):
        """A Python function of Python values (T.Fragment's forward_thread_fn): each call
        evaluates the body with the parameters bound, in the kernel's names."""
        args = node.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            raise self.error(node, "a lambda in a kernel takes plain positional parameters only")
        names = [a.arg for a in args.args]

        def fn(*values):
            if len(values) != len(names):
                raise TypeError(f"the lambda takes {len(names)} argument(s), got {len(values)}")
            self.scopes.append(dict(zip(names, values)))
            try:
                return self.eval(node.body)
            finally:
                self.scopes.pop()

        return fn

    def _comprehension(self, node):
        """A list comprehension or generator expression runs at compile time over Python
        iterables (tuples, lists, range of Python ints): `sum((s + 3) // 4 for s in sizes)`
        is folded to a constant, and over kernel values builds the expression. Its `for`
        cannot range over a kernel value, nor its `if` test one (each would be a loop or a
        branch in the kernel)."""
        out = []
        self.scopes.append({})
        try:
            self._comprehend(node, node.generators, out)
        finally:
            self.scopes.pop()
        return out if isinstance(node, ast.ListComp) else iter(out)

    def _comprehend(self, node, generators, out) -> None:
        if not generators:
            out.append(self.eval(node.elt))
            return
        first = generators[0]
        if first.is_async:
            raise self.error(first, "async comprehensions are not supported inside a kernel")
        iterable = self.eval(first.iter)
        if isinstance(iterable, PrimExpr) or not hasattr(iterable, "__iter__") \
                or type(iterable).__module__.startswith("tegula."):
            raise self.error(first.iter, "a comprehension in a kernel runs at compile time, so it "
                             "iterates over Python values only (a list, tuple or range of "
                             "constants); use a T.serial loop over kernel values")
        for item in iterable:
            self._bind_target(first.target, item)
            keep = True
            for test in first.ifs:
                cond = self.eval(test)
                if isinstance(cond, PrimExpr):
                    raise self.error(test, "a comprehension's `if` must be a Python value at "
                                     "compile time, not a kernel value")
                if not cond:
                    keep = False
                    break
            if keep:
                self._comprehend(node, generators[1:], out)

    def _bind_target(self, target, value) -> None:
        if isinstance(target, ast.Name):
            self.bind(target.id, value)
        elif isinstance(target, (ast.Tuple, ast.List)) and not any(
                isinstance(e, ast.Starred) for e in target.elts):
            items = tuple(value)
            if len(items) != len(target.elts):
                raise self.error(target, f"cannot unpack {len(items)} values into "
                                 f"{len(target.elts)} names")
            for element, item in zip(target.elts, items):
                self._bind_target(element, item)
        else:
            raise self.error(target, "a comprehension's target must be a name or a tuple of names")

    _EXPRS = {
        ast.Lambda: _lambda, ast.ListComp: _comprehension, ast.GeneratorExp: _comprehension,
        ast.Constant: _constant, ast.Name: _name, ast.Attribute: _attribute,
        ast.Subscript: _subscript, ast.Tuple: _tuple, ast.List: _list, ast.Dict: _dict,
        ast.BinOp: _binop, ast.UnaryOp: _unaryop, ast.BoolOp: _boolop, ast.Compare: _compare,
        ast.IfExp: _ifexp, ast.JoinedStr: _joinedstr, ast.Call: _call,
    }
