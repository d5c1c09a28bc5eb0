"""`with` statements in a kernel, a part of the Parser (parser.py): `with T.Kernel(...) as
...:` (the kernel itself, then statement scopes such as a tool's iket.range beside it),
statement scopes inside the kernel (frontend/builder.py), and `with T.ws(...):` (a body
only some warp groups run, language/warpgroup.py)."""
from __future__ import annotations

import ast

from .builder import KernelFrame, StatementScope
from .errors import ArgError
from .requests import KERNEL_CHECKS, KernelSpec, WarpSpecializeSpec
from .values import BufferValue, PrimExpr

_WITH_ITEMS = ("a `with` in a kernel takes `T.Kernel(...) as ...` first, then scopes such as a tool's "
               "iket.range(name); inside the kernel, only such scopes, or `with T.ws(...):` alone")


class WithStatements:
    """The Parser's `with` statements (it supplies eval, error, builder, scopes and the rest)."""

    _WITH_FORMS = "only `with T.Kernel(...) as ...:` and `with T.ws(...):` are supported in a kernel"

    def _with(self, stmt):
        item = stmt.items[0]
        spec = self.eval(item.context_expr)
        if isinstance(spec, WarpSpecializeSpec):
            if len(stmt.items) != 1:
                raise self.error(stmt, self._WITH_FORMS)
            return self._warp_groups(stmt, spec)
        if isinstance(spec, StatementScope):
            return self._scoped(stmt, stmt.items, spec)
        if not isinstance(spec, KernelSpec):
            raise self.error(item.context_expr, _WITH_ITEMS)
        if self.builder.blocks:
            raise self.error(stmt, "`with T.Kernel(...)` blocks cannot nest: write them one after another "
                             "(they are launched in order)")
        default = ["bx", "by", "bz"][: len(spec.grid)]
        target = item.optional_vars
        count = len(target.elts) if isinstance(target, (ast.Tuple, ast.List)) else 1
        if target is not None and count != len(spec.grid):
            raise self.error(target, f"T.Kernel has {len(spec.grid)} grid dimension(s) but `as` names {count} "
                             "block index(es): name one per dimension, e.g. `as (bx, by)` for a 2-D grid")
        names = default if target is None else self._loop_names(target, len(spec.grid))
        block_vars = [PrimExpr.var(name) for name in names]
        thread_var = PrimExpr.var("tx")
        self.builder.kernel = KernelFrame(spec.grid, block_vars, thread_var, spec.threads, spec.cluster_dims,
                                          spec.thread_dims)
        self.builder.kernel.node = item.context_expr  # where errors about the kernel as a whole point
        self.scopes.append({})
        for name, var in zip(names, block_vars):
            if item.optional_vars is not None:
                self.bind(name, var)
        self.builder.push()
        self._scoped(stmt, stmt.items[1:])
        try:
            for check in KERNEL_CHECKS:
                check(self.builder)
        except ArgError as err:
            raise self.error(stmt, err.message, err.kind) from None
        body = self.builder.pop_optional()
        self.builder.finish_kernel(self.builder.kernel, body if body is not None else self._ir.seq([]))
        # Python values named inside the kernel stay visible to the rest of the function;
        # its buffers and kernel values do not (a later kernel cannot see them).
        inner = self.scopes.pop()
        self.scopes[-1].update({k: v for k, v in inner.items() if not isinstance(v, (BufferValue, PrimExpr))})
        return None

    def _scoped(self, stmt, items: list, first=None) -> None:
        """The body of a `with` inside its statement scopes (frontend/builder.py), each
        entered in order and exited in reverse; `first`: the first item, evaluated."""
        entered = []
        for index, item in enumerate(items):
            scope = first if index == 0 and first is not None else self.eval(item.context_expr)
            if not isinstance(scope, StatementScope):
                raise self.error(item.context_expr, _WITH_ITEMS)
            if not self.builder.blocks:
                raise self.error(item.context_expr, "this `with` item must be inside `with T.Kernel(...)` (or "
                                 "follow T.Kernel(...) in the same `with`)")
            previous = self.set_loc(item.context_expr)
            scope.enter()
            self.restore_loc(previous)
            entered.append((item, scope))
            if item.optional_vars is not None:
                self.assign(item.optional_vars, scope)
        self.parse_block(stmt.body)
        for item, scope in reversed(entered):
            previous = self.set_loc(item.context_expr)
            scope.exit()
            self.restore_loc(previous)

    def _warp_groups(self, stmt, spec):
        """`with T.ws(g):` is the branch `if g * 128 <= tx < (g + 1) * 128:` over its body
        (language/warpgroup.py); names bound inside end with it, as in an `if`."""
        if stmt.items[0].optional_vars is not None:
            raise self.error(stmt.items[0].optional_vars, f"{spec!r} binds no name: write `with {spec!r}:`")
        if self.builder.parallel:
            raise self.error(stmt, f"`with {spec!r}:` inside a T.Parallel loop: a T.Parallel iteration has no "
                             "warp group of its own; put the T.Parallel loop inside the T.ws scope")
        cond = spec.condition(self.builder.kernel.thread_var)
        self.builder.ws_scopes += 1
        self.builder.ws_levels.append(self.builder.pipelined)
        try:
            body = self.parse_nested(stmt.body)
        finally:
            self.builder.ws_levels.pop()
        if body is None:
            return None
        if cond is None:  # every thread of the block: the body as it stands
            self.builder.emit(body)
            return None
        previous = self.set_loc(stmt)
        self.builder.emit(self._ir.if_(cond.expr, body, None))
        self.restore_loc(previous)
        return None

