"""Statements of a prim_func, and the function as a whole, parsed into `_C.ir`.

Control flow on Python values happens now (an `if` on a Python value parses only the
branch taken; a `for` over a Python tuple unrolls), control flow on kernel values becomes
IR (`if_`, `for_`). A name bound to a kernel value that reads a buffer becomes a `let`
over the rest of its block, so it keeps the value it had when assigned; pure index
arithmetic is inlined instead. Names bound inside an IR loop or branch end with it.

A T.macro's body is parsed where it is called, as if written there. When the macro returns
a value, the lets of its body stay open after it (`_open_lets`): the value may name them,
so they close over the rest of the block that called the macro, the calling statement
included (`entry = Idx[r]; return entry // 2` used as an index inside a T.Parallel body).
"""
from __future__ import annotations

import ast
import inspect

from .dtypes import DType, is_dtype, normalize_dtype
from .evaluator import BINARY_OPS, Evaluator, closure_of
from .params import PointerValue, TensorSpec, is_pointer_annotation
from .parse_with import WithStatements
from .requests import AddressRequest, AllocRequest, LetRequest, LoopSpec
from .values import BufferValue, DeclaredVar, PrimExpr, VarBuffer, binop, cast_value, store, store_vector, to_expr
from .errors import ArgError, TegulaCompileError

# The augmented assignments, as written: `acc[i] += v` updates a reducer (language/reducers.py).
_AUG_OPERATORS = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.BitOr: "|=", ast.BitAnd: "&=",
                  ast.BitXor: "^=", ast.FloorDiv: "//=", ast.Mod: "%=", ast.LShift: "<<=", ast.RShift: ">>="}

UNSUPPORTED_STMTS = {
    ast.Try: "try statements are not supported in a kernel",
    ast.Raise: "raise is not supported in a kernel",
    ast.Delete: "del is not supported in a kernel",
    ast.Global: "global is not supported in a kernel",
    ast.Nonlocal: "nonlocal is not supported in a kernel",
    ast.Import: "import is not supported in a kernel: import at module level",
    ast.ImportFrom: "import is not supported in a kernel: import at module level",
    ast.FunctionDef: "nested functions are not supported in a kernel: define helpers outside it",
    ast.AsyncFunctionDef: "nested functions are not supported in a kernel",
    ast.ClassDef: "classes are not supported in a kernel",
    ast.AsyncFor: "async for is not supported in a kernel",
    ast.AsyncWith: "async with is not supported in a kernel",
}
if hasattr(ast, "TryStar"):
    UNSUPPORTED_STMTS[ast.TryStar] = UNSUPPORTED_STMTS[ast.Try]
if hasattr(ast, "Match"):
    UNSUPPORTED_STMTS[ast.Match] = "match statements are not supported in a kernel"


def _python_annotation(annotation) -> bool:
    """An annotation of a plain Python value (str, list, a typing form), not a dtype:
    int, float and bool stay dtypes (`n: int = 4` is an int32 of the kernel)."""
    if isinstance(annotation, type):
        return annotation not in (int, float, bool) and not is_dtype(annotation)
    return type(annotation).__module__ == "typing"


class Parser(WithStatements, Evaluator):
    def __init__(self, fn, source, builder):
        super().__init__(fn, source)
        self.builder = builder
        # Lets a value-returning T.macro left open, innermost last: (var, value, location),
        # each with the builder block that becomes its body.
        self._open_lets: list[tuple] = []
        self._if_test = None  # (the `if` statement, its test's value), evaluated once
        self._let_prologue = None  # statements the next lets' body starts with (_emit_prologue)
        # The loops around the statement parsed now, innermost last: their kinds ("serial",
        # "parallel", ...; "python" for a sequence unrolled while parsing), for break / continue.
        self._loop_kinds: list[str] = []

    # ---- blocks ----
    def parse_block(self, stmts: list, hoist: bool = False) -> None:
        """With hoist (the body of a T.macro that returns a value), the lets the block binds
        stay open for the caller to close (see the module docstring)."""
        stmts = list(stmts)
        mark = len(self._open_lets)
        index = 0
        while index < len(stmts):
            stmt = stmts[index]
            branch = self._decided_branch(stmt) if isinstance(stmt, ast.If) else None
            if branch is not None:
                # An `if` on a Python value is spliced into this block, so names it binds
                # (lets included) stay visible to the statements after it.
                stmts[index:index + 1] = branch
                continue
            lets = self.parse_stmt(stmt)
            if lets and hoist:
                self._open(stmt, lets)
            elif lets:
                self._emit_lets(stmt, lets, stmts[index + 1:])
                break
            index += 1
        if not hoist:
            self._close_lets(mark)

    def _open(self, stmt, lets: list) -> None:
        """Lets whose body is everything emitted from now until _close_lets."""
        line, col = self.src.position(stmt)
        for var, value in lets:
            self.builder.push()
            self._open_lets.append((var, value, (self.file, line, col)))
        self._emit_prologue()

    def _emit_prologue(self) -> None:
        """The statements that start the body of the lets a statement bound (the stores of a
        tuple assignment, _assign_all_at_once)."""
        prologue, self._let_prologue = self._let_prologue, None
        if prologue is not None:
            self.builder.emit(prologue)

    def _close_lets(self, mark: int) -> None:
        """Closes the lets opened since `mark`, innermost first, over what was emitted since."""
        while len(self._open_lets) > mark:
            var, value, loc = self._open_lets.pop()
            body = self.builder.pop_optional()
            if body is None:
                continue  # nothing reads the name: the let is dead
            previous = self._loc
            self.restore_loc(loc)
            self.builder.emit(self._ir.let(var.expr, value.expr, body))
            self.restore_loc(previous)

    def _decided_branch(self, stmt):
        """The statements of the branch an `if` on a Python value takes; None when the test
        is a kernel value (an IR branch), which `_if` then takes as evaluated here."""
        previous = self.set_loc(stmt)
        try:
            cond = self.eval(stmt.test)
        except Exception as err:  # noqa: BLE001
            raise self.convert(stmt, err) from None
        self.restore_loc(previous)
        if isinstance(cond, PrimExpr):
            self._if_test = (stmt, cond)
            return None
        return list(stmt.body if cond else stmt.orelse)

    def _emit_lets(self, stmt, lets: list, rest: list) -> None:
        """`x = <reads a buffer>`: the rest of the block is the let's body."""
        self.builder.push()
        self._emit_prologue()
        self.parse_block(rest)
        body = self.builder.pop_optional()
        if body is None:
            return  # nothing reads the names: the lets are dead
        previous = self.set_loc(stmt)
        for var, value in reversed(lets):
            body = self._ir.let(var.expr, value.expr, body)
        self.builder.emit(body)
        self.restore_loc(previous)

    def parse_nested(self, stmts: list):
        """A block of IR control flow, with its own names; None when it emits nothing."""
        self.scopes.append({})
        self.builder.push()
        try:
            self.parse_block(stmts)
        finally:
            self.scopes.pop()
        return self.builder.pop_optional()

    def parse_stmt(self, stmt) -> list:
        handler = self._STMTS.get(type(stmt))
        if handler is None:
            message = UNSUPPORTED_STMTS.get(type(stmt), f"unsupported statement in a kernel: {type(stmt).__name__}")
            raise self.error(stmt, message)
        previous = self.set_loc(stmt)
        try:
            lets = handler(self, stmt)
        except Exception as err:  # noqa: BLE001 - every failure becomes a located user error
            raise self.convert(stmt, err) from None
        self.restore_loc(previous)
        return lets or []

    # ---- simple statements ----
    def _expr_stmt(self, stmt):
        # Tile ops emit themselves; other results (docstrings) are dropped, but T.let's,
        # which binds its variable for the rest of the block.
        result = self.eval(stmt.value)
        if isinstance(result, LetRequest):
            return [(result.var, result.value)]
        return None

    def _pass(self, stmt):
        return None

    def _return(self, stmt):
        if self._macro_depth:
            raise self.error(stmt, "a T.macro may `return` only as its last statement")
        if stmt.value is not None:
            raise self.error(stmt, "a kernel returns nothing: write results into a tensor parameter")

    # ---- macros ----
    _macro_depth = 0

    def expand_macro(self, macro, args: list, kwargs: dict, node):
        """Parses a T.macro's body here, its parameters bound to the call's values, its
        other names resolved in its own closure and globals; returns what its last
        statement returns."""
        if self._macro_depth >= 64:
            raise self.error(node, f"T.macro {macro.fn.__name__}: macros nested more than 64 deep (recursion?)")
        try:
            bound = inspect.signature(macro.fn).bind(*args, **kwargs)
        except TypeError as err:
            raise self.error(node, f"T.macro {macro.fn.__name__}: {err}") from None
        bound.apply_defaults()
        source, fn_node = macro.source_and_tree()
        body = list(fn_node.body)
        result_node = None
        if body and isinstance(body[-1], ast.Return):
            result_node = body.pop().value
        saved = (self.src, self.file, self.globals, self.closure, self.scopes, self._loc)
        self.src, self.file = source, source.file
        self.globals, self.closure = macro.fn.__globals__, closure_of(macro.fn)
        self.scopes = [dict(bound.arguments)]
        self._macro_depth += 1
        try:
            self.parse_block(body, hoist=result_node is not None)
            return None if result_node is None else self.eval(result_node)
        finally:
            self._macro_depth -= 1
            self.src, self.file, self.globals, self.closure, self.scopes, loc = saved
            self.restore_loc(loc)

    def _assert(self, stmt):
        test = self._same_sizes(stmt.test)
        if test is None:
            test = self.eval(stmt.test)
        if isinstance(test, PrimExpr):
            raise self.error(stmt.test, "assert needs a Python value (it is checked while parsing); kernel values "
                             "compare only as `a == b` or `a != b` of the same expression (one T.dynamic size)")
        if not test:
            message = self.eval(stmt.msg) if stmt.msg is not None else "assertion failed"
            raise self.error(stmt, f"AssertionError: {message}")

    def _same_sizes(self, test):
        """`assert M == M_` where both are the same kernel expression (a T.dynamic size read
        off two shapes): True (False for `!=`), as TVM decides it; None for any other test."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
                and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Name)):
            return None  # names only: evaluating them twice has no effect
        left, right = self.eval(test.left), self.eval(test.comparators[0])
        if not (isinstance(left, PrimExpr) and isinstance(right, PrimExpr)):
            return None
        if not self._ir.structural_equal(left.expr, right.expr):
            return None
        return isinstance(test.ops[0], ast.Eq)

    def _assign(self, stmt):
        value = self.eval(stmt.value)
        lets = []
        for target in stmt.targets:
            lets += self.assign(target, value)
        return lets

    def _ann_assign(self, stmt):
        if stmt.value is None or not isinstance(stmt.target, ast.Name):
            raise self.error(stmt, "an annotated assignment in a kernel needs a name and a value: x: T.int32 = v")
        dtype = self.eval(stmt.annotation)
        if _python_annotation(dtype):  # `dtype: str = BF16`: a Python name, no kernel value
            return self.assign(stmt.target, self.eval(stmt.value))
        if not is_dtype(dtype):
            raise self.error(stmt.annotation, f"the annotation must be a dtype such as T.int32, got {dtype!r}")
        return self.assign(stmt.target, cast_value(self.eval(stmt.value), normalize_dtype(dtype)))

    def _aug_assign(self, stmt):
        op = BINARY_OPS.get(type(stmt.op))
        if op is None:
            raise self.error(stmt, f"unsupported operator {type(stmt.op).__name__} in a kernel")
        rhs = self.eval(stmt.value)
        target = stmt.target
        if isinstance(target, ast.Name):
            current = self.lookup(target.id, target)
            if isinstance(current, VarBuffer):
                self.builder.emit(store(current, [0], op(current.load(), rhs)))
                return None
            return self.assign(target, op(current, rhs))
        if isinstance(target, ast.Subscript):
            base = self.eval_base(target.value)
            key = self.eval_index(target.slice)
            if isinstance(base, BufferValue):
                if base.augmented_store(key, _AUG_OPERATORS.get(type(stmt.op), "an update"), rhs):
                    return None
                return self._store(target, base, key, op(base[key], rhs))
            base[key] = op(base[key], rhs)
            return None
        raise self.error(target, "only names and buffer elements can be updated in a kernel")

    # ---- binding ----
    def assign(self, target, value) -> list:
        if isinstance(target, ast.Name):
            return self._assign_name(target, value)
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (PrimExpr, BufferValue)) or not hasattr(value, "__iter__"):
                raise self.error(target, f"cannot unpack {type(value).__name__} in a kernel")
            items = list(value)
            if len(items) != len(target.elts):
                raise self.error(target, f"cannot unpack {len(items)} values into {len(target.elts)} names")
            if self._stores_into(target) and any(isinstance(i, VarBuffer) or (isinstance(i, PrimExpr) and i.reads)
                                                 for i in items):
                return self._assign_all_at_once(target, items)
            lets = []
            for element, item in zip(target.elts, items):
                lets += self.assign(element, item)
            return lets
        if isinstance(target, ast.Subscript):
            base = self.eval_base(target.value)
            key = self.eval_index(target.slice)
            if isinstance(base, BufferValue):
                return self._store(target, base, key, value)
            base[key] = value
            return []
        raise self.error(target, f"cannot assign to {type(target).__name__} in a kernel")

    def _stores_into(self, target) -> bool:
        """Whether assigning to `target` (a tuple of targets) stores into memory: a buffer
        element or a T.alloc_var among them."""
        if isinstance(target, (ast.Tuple, ast.List)):
            return any(self._stores_into(e) for e in target.elts)
        if isinstance(target, ast.Subscript):
            return True
        return isinstance(target, ast.Name) and isinstance(self.lookup_local(target.id), VarBuffer)

    def _assign_all_at_once(self, target, items: list) -> list:
        """`a[0], a[1] = a[1], a[0]`: Python reads every value before it assigns any (a swap),
        so the values that read memory are let-bound first and the stores run in the lets'
        body (the prologue _emit_lets starts it with), as TileLang binds them."""
        lets, bound = [], []
        for item in items:
            if isinstance(item, VarBuffer):
                item = item.load()
            if isinstance(item, PrimExpr) and item.reads:
                var = PrimExpr.var(self.builder.unique_name("unpacked"), item.expr.dtype)
                var.dyn = item.dyn
                lets.append((var, item))
                item = var
            bound.append(item)
        self.builder.push()
        for element, item in zip(target.elts, bound):
            if self.assign(element, item):
                raise self.error(element, "internal: an unpacked value was bound twice")
        self._let_prologue = self.builder.pop_optional()
        return lets

    def _assign_name(self, target: ast.Name, value) -> list:
        name = target.id
        existing = self.lookup_local(name)
        if isinstance(existing, VarBuffer):
            self.builder.emit(store(existing, [0], value))
            return []
        if isinstance(value, AllocRequest):
            self.bind(name, value.allocate(self.builder, name))
            return []
        if isinstance(value, AddressRequest):
            return self._address_tensor(target, name, value)
        if isinstance(value, DeclaredVar) and value.var is None:
            value.name_as(self.builder.unique_name(name))  # `x = T.int32()`: T.let binds it later
            self.bind(name, value)
            return []
        if isinstance(value, PrimExpr) and value.reads:
            if not self.builder.blocks:
                raise self.error(target, "buffers can only be read inside `with T.Kernel(...)`")
            var = PrimExpr.var(self.builder.unique_name(name), value.expr.dtype)
            var.dyn = value.dyn
            self.bind(name, var)
            return [(var, value)]
        self.bind(name, value)
        return []

    def _address_tensor(self, target, name: str, request) -> list:
        """`A = T.make_tensor(address, ...)`: the tensor A at the address, which a let holds
        from here on when the kernel reads or computes it."""
        address, lets = request.address, []
        if request.needs_let():
            if not self.builder.blocks:
                raise self.error(target, "T.make_tensor of an address read from a buffer must be inside "
                                 "`with T.Kernel(...)`")
            var = PrimExpr.var(self.builder.unique_name(f"{name}_addr"), address.expr.dtype)
            lets, address = [(var, address)], var
        self.bind(name, self.builder.address_tensor(name, request.dtype, request.shape, request.strides,
                                                    address.expr))
        return lets

    def _store(self, target, buffer: BufferValue, key, value) -> list:
        refusal = buffer.store_refusal()
        if refusal is not None:
            raise self.error(target, refusal)
        indices = list(key) if isinstance(key, tuple) else [key]
        if any(isinstance(i, slice) for i in indices) and isinstance(value, PrimExpr) and value.dtype.lanes > 1:
            self.builder.emit(store_vector(buffer[key], value))
            return []
        if any(isinstance(i, slice) for i in indices):
            raise self.error(target, f"assigning to a region of {buffer.name} is not supported: use T.fill, "
                             "T.copy or a T.Parallel loop")
        if isinstance(value, VarBuffer):
            value = value.load()
        self.builder.emit(store(buffer, indices, value))
        return []

    # ---- control flow ----
    def _if(self, stmt):
        test, self._if_test = self._if_test, None
        cond = test[1] if test is not None and test[0] is stmt else self.eval(stmt.test)
        if not isinstance(cond, PrimExpr):
            self.parse_block(stmt.body if cond else stmt.orelse)  # decided now; the other branch is never read
            return None
        if cond.expr.dtype != "bool":
            cond = binop("ne", cond, 0)
        then_case = self.parse_nested(stmt.body)
        else_case = self.parse_nested(stmt.orelse) if stmt.orelse else None
        if then_case is None and else_case is None:
            return None
        if then_case is None:
            cond, then_case, else_case = PrimExpr(self._ir.not_(cond.expr)), else_case, None
        self.builder.emit(self._ir.if_(cond.expr, then_case, else_case))
        return None

    def _while(self, stmt):
        """`while cond:` on a kernel value (T.alloc_var state, buffer elements): each thread
        tests cond before every iteration, as CUDA's while does."""
        if stmt.orelse:
            raise self.error(stmt, "while ... else is not supported in a kernel")
        if not self.builder.blocks:
            raise self.error(stmt, "a while loop must be inside `with T.Kernel(...)`")
        if self.builder.parallel or self.builder.pipelined:
            what = "T.Parallel" if self.builder.parallel else "T.Pipelined"
            raise self.error(stmt, f"a while loop inside a {what} loop is not supported: put the {what} loop "
                             "inside the while loop instead")
        cond = self.eval(stmt.test)
        if isinstance(cond, VarBuffer):
            cond = cond.load()
        if not isinstance(cond, PrimExpr):
            raise self.error(stmt.test, f"a while loop in a kernel tests a kernel value (a T.alloc_var, a buffer "
                             f"element), got the Python value {cond!r}, which the loop could never change")
        if cond.expr.dtype != "bool":
            cond = binop("ne", cond, 0)
        self.builder.push()
        self.builder.loop_bodies.add(id(self.builder.blocks[-1]))
        self.scopes.append({})
        try:
            self.parse_block(stmt.body)
        finally:
            self.scopes.pop()
        body = self.builder.pop_optional()
        self.builder.emit(self._ir.while_(cond.expr, body if body is not None else self._ir.seq([])))
        return None

    def _for(self, stmt):
        if stmt.orelse:
            raise self.error(stmt, "for ... else is not supported in a kernel")
        spec = self.eval(stmt.iter)
        if isinstance(spec, range):
            if spec.step <= 0:
                raise self.error(stmt.iter, "range with a non-positive step is not supported in a kernel")
            spec = LoopSpec("serial", [(spec.start, len(spec), spec.step)])
        if isinstance(spec, (tuple, list)):
            self._loop_kinds.append("python")
            try:
                for item in spec:  # a Python sequence unrolls while parsing
                    lets = self.assign(stmt.target, item)
                    if lets:
                        self._emit_lets(stmt, lets, stmt.body)
                    else:
                        self.parse_block(stmt.body)
            finally:
                self._loop_kinds.pop()
            return None
        if not isinstance(spec, LoopSpec):
            raise self.error(stmt.iter, f"cannot loop over {type(spec).__name__} in a kernel: use range, "
                             "T.serial, T.unroll, T.Parallel or T.Pipelined")
        if spec.kind == "persistent":
            return self._persistent(stmt, spec)
        names = self._loop_names(stmt.target, len(spec.dims))
        loop_vars = [PrimExpr.var(name) for name in names]
        self.scopes.append({})
        for name, var, (start, _, step) in zip(names, loop_vars, spec.dims):
            self.bind(name, var if step == 1 else start + var * step)
        schedule = spec.schedule  # T.Pipelined's order/stage/group
        traced = schedule is not None and self.builder.trace is None
        if traced:
            self.builder.trace = []
        first = len(self.builder.trace) if schedule is not None else 0
        self.builder.push()
        self.builder.loop_bodies.add(id(self.builder.blocks[-1]))
        num_stages = spec.num_stages
        loop_kind = spec.kind
        ws_before = self.builder.ws_scopes
        parallel = spec.kind == "parallel"
        self.builder.parallel += parallel
        self.builder.pipelined += spec.kind == "pipelined"
        outer_parallel_body = self.builder.parallel_body
        if parallel:
            self.builder.parallel_body = id(self.builder.blocks[-1])
        self._loop_kinds.append(spec.kind)
        try:
            self.parse_block(stmt.body)
            if schedule is not None:
                num_stages = self._schedule(stmt, spec, self.builder.trace[first:], num_stages)
            if loop_kind == "pipelined" and self.builder.ws_scopes > ws_before:
                # Manual warp specialisation: the T.ws scopes order the iterations of their
                # warp groups with their own barriers, so each group runs the loop in order.
                loop_kind, num_stages = "serial", 0
        finally:
            self._loop_kinds.pop()
            self.builder.parallel -= parallel
            self.builder.pipelined -= spec.kind == "pipelined"
            self.builder.parallel_body = outer_parallel_body
            self.scopes.pop()
            if traced:
                self.builder.trace = None

        def nest(body):
            for var, (start, extent, step) in reversed(list(zip(loop_vars, spec.dims))):
                low = start if step == 1 else 0
                body = self._ir.for_(var.expr, to_expr(low, "int32"), to_expr(extent, "int32"), loop_kind, body,
                                     num_stages)
            return body

        # A barrier in a T.Parallel body: the iterations before it all finish first, so the
        # loop becomes one loop per stretch between barriers.
        parts = self.builder.split_at_barriers() if parallel else None
        if parts is not None:
            for kind, part in parts:
                if kind == "body":
                    self.builder.emit(nest(part))
                    continue
                try:
                    self.builder.emit_barrier(part, "a barrier")
                except ArgError as err:
                    raise self.error(stmt, err.message) from None
            return None
        body = self.builder.pop_optional()
        if body is None:
            return None
        self.builder.emit(nest(body))
        return None

    def _persistent(self, stmt, spec):
        """for w in T.serial(waves): if the block's tile of wave w is in the domain: the
        body, its loop names bound to that tile's coordinates."""
        names = self._loop_names(stmt.target, len(spec.domain))
        w = PrimExpr.var("w")
        coords, inside = spec.tiles(w)
        self.scopes.append({})
        for name, coord in zip(names, coords):
            self.bind(name, coord)
        self.builder.push()
        self.builder.loop_bodies.add(id(self.builder.blocks[-1]))
        self._loop_kinds.append("persistent")
        try:
            self.parse_block(stmt.body)
        finally:
            self._loop_kinds.pop()
            self.scopes.pop()
        body = self.builder.pop_optional()
        if body is None:
            return None
        body = self._ir.if_(to_expr(inside, "bool"), body, None)
        self.builder.emit(self._ir.for_(w.expr, to_expr(0, "int32"), to_expr(spec.waves(), "int32"), "serial", body, 0))
        return None

    def _schedule(self, stmt, spec: LoopSpec, trace: list, num_stages: int) -> int:
        """Puts the loop body's statements (the innermost block) in the order the hand
        schedule emits them; returns the loop's num_stages. Errors point at the argument."""
        block = self.builder.blocks[-1]
        try:
            ordered, num_stages = spec.schedule.apply(trace, len(self.builder.blocks), num_stages)
        except ArgError as err:
            if isinstance(stmt.iter, ast.Call):
                raise self.arg_error(stmt.iter, spec.intrinsic, err, len(stmt.iter.args)) from None
            raise self.error(stmt.iter, err.message, err.kind) from None
        # (plus a stage mark before each computation, where they run in several stages)
        assert len(ordered) >= len(block), "the traced statements are the loop body's"
        block[:] = ordered
        return num_stages

    def _loop_names(self, target, count: int) -> list[str]:
        elements = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(e, ast.Name) for e in elements):
            raise self.error(target, "loop variables must be plain names")
        if len(elements) != count:
            raise self.error(target, f"this loop has {count} variable(s), but {len(elements)} name(s) are given")
        return [e.id for e in elements]

    # Loops a break or continue may leave: those that stay loops in the generated code.
    _JUMPABLE = frozenset({"serial", "unrolled"})

    def _jump(self, stmt):
        """break / continue of the innermost loop, a serial one (T.serial, range, T.unroll):
        TileLang's meaning. Whether every thread that reaches a barrier in the loop also
        takes the jump is checked when the kernel lowers (check_loop_jumps)."""
        word = "continue" if isinstance(stmt, ast.Continue) else "break"
        if not self._loop_kinds:
            raise self.error(stmt, f"'{word}' outside a loop")
        kind = self._loop_kinds[-1]
        if kind not in self._JUMPABLE:
            what = {"python": "a loop over a Python sequence, which unrolls while the kernel is parsed",
                    "parallel": "a T.Parallel loop, whose iterations the threads share",
                    "pipelined": "a T.Pipelined loop, whose stages overlap",
                    "persistent": "a T.Persistent loop"}.get(kind, f"a loop of kind {kind}")
            raise self.error(stmt, f"'{word}' leaves only serial loops (T.serial, range, T.unroll); this is {what}")
        self.builder.emit(self._ir.loop_jump(word == "continue"))
        return None

    _STMTS = {
        ast.Break: _jump, ast.Continue: _jump,
        ast.Expr: _expr_stmt, ast.Pass: _pass, ast.Return: _return, ast.Assert: _assert,
        ast.Assign: _assign, ast.AnnAssign: _ann_assign, ast.AugAssign: _aug_assign,
        ast.If: _if, ast.For: _for, ast.With: WithStatements._with, ast.While: _while,
    }

    # ---- the signature ----
    def param_buffer(self, name: str, spec) -> BufferValue:
        """The global buffer of tensor parameter `name` (a T.Tensor or T.StridedTensor spec)."""
        shape = [to_expr(d, "int32") for d in spec.shape]
        if spec.strides:
            buf = self._ir.strided_buffer(name, spec.dtype, shape, [to_expr(d, "int32") for d in spec.strides])
        else:
            buf = self._ir.buffer(name, "global", spec.dtype, shape)
        return BufferValue(buf, name, spec.shape, spec.dtype, "global", spec.strides)

    def parse_params(self, fn_node: ast.FunctionDef, annotations: dict) -> list:
        """Parameters as (name, BufferValue or scalar PrimExpr, annotation). `annotations`
        are the ones Python already evaluated (`fn.__annotations__`): they may name locals
        of the enclosing function that the body never uses, so are not in its closure."""
        args = fn_node.args
        extra = args.vararg or args.kwarg or (args.kwonlyargs[0] if args.kwonlyargs else None)
        if extra is not None or args.posonlyargs:
            raise self.error(extra or fn_node, "a prim_func takes only plain parameters (A: T.Tensor(...), n: T.int32)")
        params = []
        for arg in args.args:
            if arg.annotation is None:
                raise self.error(arg, f"parameter '{arg.arg}' needs an annotation: T.Tensor((M, N), dtype) or a dtype")
            spec = annotations.get(arg.arg)
            if spec is None or isinstance(spec, str):
                # Postponed (string) annotations: evaluate them here, as TVMScript does.
                try:
                    spec = self.eval(arg.annotation)
                except TegulaCompileError as e:
                    if isinstance(spec, str) and "is not defined" in str(e):
                        raise self.error(arg.annotation, f"parameter '{arg.arg}': {e.message}; with `from __future__ "
                                         "import annotations` an annotation sees only names the kernel body "
                                         "also uses (drop that import, or use the name in the body)") from None
                    raise
            previous = self.set_loc(arg)
            if isinstance(spec, TensorSpec):
                value = self.param_buffer(arg.arg, spec)
                self.builder.unique_name(arg.arg)
            elif is_dtype(spec):
                value = PrimExpr.var(arg.arg, DType(normalize_dtype(spec)))
            elif is_pointer_annotation(spec):
                value = PointerValue.parameter(arg.arg, spec)
            else:
                raise self.error(arg.annotation, f"parameter '{arg.arg}': expected T.Tensor(shape, dtype), a "
                                 f"dtype such as T.int32 or T.ptr, got {spec!r}")
            self.restore_loc(previous)
            self.bind(arg.arg, value)
            params.append((arg.arg, value, spec))
        return params
