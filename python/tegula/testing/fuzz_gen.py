"""The program generator behind tegula.testing.fuzz (its docstring lists the coverage).

Every random decision goes through a chooser: `RandomChooser(seed)` for scripts, or the
hypothesis adapter of `strategy()`, whose draws shrink towards the first choice, the
low end of a range and False, so a failure shrinks to a short program.

Programs are correct by construction: every tile element is written before it is read
(ragged tiles are padded by the masked loads, which give 0), no two threads or blocks
write one element with different values (except through T.atomic_add, on integer
values), divisors are bounded away from 0, logs and roots take |x| + c, exp takes
bounded arguments, and comparisons only look at values every implementation computes
exactly (inputs as loaded, integers), so a rounding difference cannot flip a branch.
"""
from __future__ import annotations

import math
import random

from .fuzz_program import Arg, Program, tolerance_for

# ---- choosers ----


class RandomChooser:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def choice(self, seq):
        return seq[self.rng.randrange(len(seq))]

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def flip(self, p: float = 0.5) -> bool:
        return self.rng.random() < p


class _HypothesisChooser:
    def __init__(self, draw):
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def choice(self, seq):
        return seq[self.draw(self.st.integers(0, len(seq) - 1))]

    def int(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def flip(self, p: float = 0.5) -> bool:
        return self.draw(self.st.integers(0, 999)) >= 1000 - int(p * 1000)


def strategy(generate):
    from hypothesis import strategies as st

    @st.composite
    def programs(draw):
        return generate(_HypothesisChooser(draw))

    return programs()


# ---- source text ----

class Body:
    """Kernel statements, indented; `mark()` remembers the next line (invalid programs)."""

    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0
        self.marked: int | None = None

    def emit(self, text: str, mark: bool = False) -> None:
        if mark:
            self.marked = len(self.lines)
        self.lines.append("    " * self.depth + text)

    def open(self, header: str, mark: bool = False) -> None:
        self.emit(header, mark)
        self.depth += 1

    def close(self, n: int = 1) -> None:
        self.depth -= n


class Kernel:
    """A program under construction: parameters, kernel header, body."""

    def __init__(self, c, target: str):
        self.c = c
        self.target = target
        self.args: list[Arg] = []
        self.decls: list[str] = []
        self.body = Body()
        self.header = ""
        self.header_mark = False
        self.module_lines: list[str] = []  # module-level lines (T.dynamic)
        # A `with` around the prim_func's definition in make(), which parses it there (an
        # instrumentation session: fuzz_families_iket.py).
        self.make_context: str | None = None
        self.dtypes: set[str] = set()
        self.features: set[str] = set()
        self._names: dict[str, int] = {}
        self.oracle = None  # the outputs in torch, for a program the reference cannot run

    def fresh(self, base: str) -> str:
        n = self._names.get(base, 0)
        self._names[base] = n + 1
        return base if n == 0 else f"{base}{n}"

    def tensor(self, name, shape_src, shape, dtype, role="in", values="signed") -> str:
        self.args.append(Arg(name, role, dtype, tuple(shape), values))
        self.decls.append(f"{name}: T.Tensor(({', '.join(shape_src)},), \"{dtype}\")")
        return name

    def scalar(self, name, dtype, value) -> str:
        self.args.append(Arg(name, "scalar", dtype, (), scalar=value))
        self.decls.append(f"{name}: T.{dtype}")
        self.features.add("scalar_" + dtype)
        return name

    def alloc(self, scope: str, shape: tuple, dtype: str, base: str) -> str:
        name = self.fresh(base)
        fn = {"shared": "alloc_shared", "fragment": "alloc_fragment", "local": "alloc_local"}[scope]
        self.body.emit(f"{name} = T.{fn}(({', '.join(map(str, shape))},), \"{dtype}\")")
        self.features.add("alloc_" + scope)
        return name

    def finish(self, name: str, error_kind: str = "") -> Program:
        outs = [i for i, a in enumerate(self.args) if a.role == "out"]
        lines = ["import tegula", "import tegula.language as T", "", f"TARGET = \"{self.target}\""] + \
            self.module_lines + [
            "",
            f"@tegula.jit(out_idx={outs}, target=TARGET)",
            "def make():",
        ]
        pad = "    " if self.make_context is None else "        "
        if self.make_context is not None:
            lines.append(f"    with {self.make_context}:")
        lines += [f"{pad}@T.prim_func", f"{pad}def {name}({', '.join(self.decls)}):", f"{pad}    {self.header}"]
        header_line = len(lines)
        first = len(lines) + 1
        lines += [pad + "        " + line for line in self.body.lines]
        lines += [f"    return {name}", ""]
        error_line = None
        if error_kind:
            error_line = header_line if self.header_mark else first + self.body.marked
        return Program("\n".join(lines), self.args, self.target, tolerance_for(self.dtypes), error_line,
                       error_kind, self.features, name, self.oracle)


# ---- expressions ----

class Val:
    """An expression's text, dtype, a bound on |value|, and whether every implementation
    computes it exactly (so comparing it cannot flip on rounding)."""

    __slots__ = ("text", "dtype", "bound", "exact")

    def __init__(self, text: str, dtype: str, bound: float, exact: bool = False):
        self.text, self.dtype, self.bound, self.exact = text, dtype, bound, exact


def _promote(a: str, b: str) -> str:
    if a == b:
        return a
    if "int32" in (a, b):
        return b if a == "int32" else a
    return "float32"


def float_expr(k: Kernel, leaves: list, depth: int) -> Val:
    """A floating-point expression over `leaves` whose magnitude stays bounded."""
    c = k.c
    if depth <= 0 or c.flip(0.25):
        return c.choice(leaves)
    kind = c.choice(["add", "sub", "mul", "div", "unary", "unary", "maxmin", "select", "cast", "const"])
    a = float_expr(k, leaves, depth - 1)
    if kind == "const":
        v = c.choice([0.5, 2.0, -1.5, 3.0])
        op = c.choice(["+", "*", "-"])
        return Val(f"({a.text} {op} {v})", a.dtype, a.bound * 3 + 3)
    if kind in ("add", "sub", "mul", "div", "maxmin"):
        b = float_expr(k, leaves, depth - 1)
        t = _promote(a.dtype, b.dtype)
        if kind == "add":
            return Val(f"({a.text} + {b.text})", t, a.bound + b.bound)
        if kind == "sub":
            return Val(f"({a.text} - {b.text})", t, a.bound + b.bound)
        if kind == "mul" and a.bound * b.bound <= 1e3:
            return Val(f"({a.text} * {b.text})", t, a.bound * b.bound)
        if kind == "div":
            k.features.add("div")
            return Val(f"({a.text} / (T.abs({b.text}) + 1.0))", t, a.bound)
        fn = c.choice(["T.max", "T.min"])
        k.features.add("maxmin")
        return Val(f"{fn}({a.text}, {b.text})", t, max(a.bound, b.bound))
    if kind == "unary":
        fn = c.choice(["exp", "exp2", "log", "sqrt", "rsqrt", "abs", "neg"])
        k.features.add("math_" + fn)
        if fn in ("exp", "exp2"):
            if a.bound > 4:
                return Val(f"T.{fn}(T.min(T.max({a.text}, -4.0), 4.0))", a.dtype, 60.0)
            return Val(f"T.{fn}({a.text})", a.dtype, math.exp(a.bound) + 1)
        if fn == "log":
            return Val(f"T.log(T.abs({a.text}) + 1.0)", a.dtype, math.log(a.bound + 1) + 1)
        if fn == "sqrt":
            return Val(f"T.sqrt(T.abs({a.text}) + 0.25)", a.dtype, math.sqrt(a.bound + 1))
        if fn == "rsqrt":
            return Val(f"T.rsqrt(T.abs({a.text}) + 0.5)", a.dtype, 1.5)
        if fn == "abs":
            return Val(f"T.abs({a.text})", a.dtype, a.bound)
        return Val(f"(-{a.text})", a.dtype, a.bound)
    if kind == "select":
        exact = [v for v in leaves if v.exact]
        if not exact:
            return a
        e = c.choice(exact)
        b = float_expr(k, leaves, depth - 1)
        cmp = c.choice([">", "<", ">=", "<="])
        k.features.add("select")
        cond = _joined(k, f"{e.text} {cmp} 0.25", [f"{v.text} {c.choice(['>', '<='])} 0.25" for v in exact])
        if c.flip(0.3):
            return Val(f"T.cast({cond}, \"float32\")", "float32", 1.0)
        return Val(f"T.if_then_else({cond}, {a.text}, {b.text})", _promote(a.dtype, b.dtype),
                   max(a.bound, b.bound))
    # cast
    t = c.choice(["float16", "bfloat16", "float32"])
    if a.bound > 6e4:
        t = "float32"
    k.dtypes.add(t)
    k.features.add("cast_" + t)
    return Val(f"T.cast({a.text}, \"{t}\")", t, a.bound * 1.01)


def int_expr(k: Kernel, leaves: list, depth: int) -> Val:
    """An int32 expression over `leaves` that cannot overflow."""
    c = k.c
    if depth <= 0 or c.flip(0.25):
        return c.choice(leaves)
    kind = c.choice(["add", "sub", "mul", "div", "mod", "bits", "shift", "invert", "maxmin", "select", "abs"])
    a = int_expr(k, leaves, depth - 1)
    if kind in ("add", "sub", "mul", "maxmin", "bits"):
        b = int_expr(k, leaves, depth - 1)
        if kind == "mul" and a.bound * b.bound < 2**24:
            return Val(f"({a.text} * {b.text})", "int32", a.bound * b.bound, True)
        if kind == "bits":
            op = c.choice(["&", "|", "^"])
            k.features.add("bitwise")
            bound = 2 ** max(1, math.ceil(math.log2(max(a.bound, b.bound) + 1)) + 1)
            return Val(f"({a.text} {op} {b.text})", "int32", bound, True)
        if kind == "maxmin":
            return Val(f"{c.choice(['T.max', 'T.min'])}({a.text}, {b.text})", "int32", max(a.bound, b.bound), True)
        op = "-" if kind == "sub" else "+"
        return Val(f"({a.text} {op} {b.text})", "int32", a.bound + b.bound, True)
    if kind in ("div", "mod"):
        d = c.choice([1, 2, 3, 4, 7])
        op = c.choice(["//", "%", "/"]) if kind == "div" else "%"
        k.features.add("int_" + {"//": "floordiv", "%": "floormod", "/": "truncdiv"}[op])
        return Val(f"({a.text} {op} {d})", "int32", a.bound, True)
    if kind == "shift":
        s = c.int(0, 3)
        if a.bound * 8 < 2**24 and c.flip():
            return Val(f"({a.text} << {s})", "int32", a.bound * 8, True)
        k.features.add("shift")
        return Val(f"({a.text} >> {s})", "int32", a.bound, True)
    if kind == "invert":
        k.features.add("bitwise")
        return Val(f"(~{a.text})", "int32", a.bound + 1, True)
    if kind == "abs":
        return Val(f"T.abs({a.text})", "int32", a.bound, True)
    b = int_expr(k, leaves, depth - 1)
    e = c.choice(leaves)
    k.features.add("select")
    cond = _joined(k, f"{e.text} {c.choice(['>', '<=', '==', '!='])} {c.int(-3, 3)}",
                   [f"{v.text} {c.choice(['>', '<='])} {c.int(-3, 3)}" for v in leaves])
    return Val(f"T.if_then_else({cond}, {a.text}, {b.text})", "int32", max(a.bound, b.bound), True)


def _joined(k: Kernel, first: str, others: list) -> str:
    """`first`, or `first and / or` one of `others`: the generated CUDA evaluates a right
    operand that reads no memory eagerly and keeps the short circuit for one that does."""
    if not others or not k.c.flip(0.3):
        return first
    op = k.c.choice(["and", "or"])
    k.features.add("select_" + op)
    return f"({first} {op} {k.c.choice(others)})"


def expr(k: Kernel, leaves: list, depth: int, is_int: bool) -> Val:
    return int_expr(k, leaves, depth) if is_int else float_expr(k, leaves, depth)


# ---- tiles ----

class Tiling:
    """How a block's tile sits in a global tensor: per tile dimension its size, the
    tensor's size there (a literal or a T.dynamic name), its base expression, loop var."""

    def __init__(self, dims):
        self.dims = dims  # [(tile, global_src, global_size, base, var)]

    @property
    def shape(self):
        return tuple(d[0] for d in self.dims)

    def vars(self):
        return ", ".join(d[4] for d in self.dims)

    def parallel(self):
        return f"for {self.vars()} in T.Parallel({', '.join(str(d[0]) for d in self.dims)}):"

    def gidx(self):
        return ", ".join(f"{d[3]} + {d[4]}" if d[3] != "0" else d[4] for d in self.dims)

    def guard(self):
        return " and ".join(f"{d[3]} + {d[4]} < {d[1]}" if d[3] != "0" else f"{d[4]} < {d[1]}" for d in self.dims)

    def ragged(self):
        return any(d[2] % d[0] for d in self.dims)

    def corner(self, g):
        return f"{g}[{', '.join(d[3] for d in self.dims)}]"

    def slice(self, g):
        return f"{g}[{', '.join(f'{d[3]}:{d[3]} + {d[0]}' if d[3] != '0' else f'0:{d[0]}' for d in self.dims)}]"


def load_tile(k: Kernel, tiling: Tiling, src: str, scope: str, dtype: str, base: str) -> str:
    """A new tile of `scope` holding the block's part of global `src` (padding 0)."""
    c = k.c
    name = k.alloc(scope, tiling.shape, dtype, base)
    how = c.choice(["corner", "slice", "parallel"])
    k.features.add(f"copy_global_{scope}_{how}")
    if how == "corner":
        k.body.emit(f"T.copy({tiling.corner(src)}, {name})")
    elif how == "slice":
        k.body.emit(f"T.copy({tiling.slice(src)}, {name})")
    else:
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        k.body.emit(f"{name}[{tiling.vars()}] = {src}[{tiling.gidx()}]")
        k.body.close()
        k.body.open("else:")
        k.body.emit(f"{name}[{tiling.vars()}] = 0")
        k.body.close(2)
    return name


def store_tile(k: Kernel, tiling: Tiling, tile: str, dst: str) -> None:
    c = k.c
    how = c.choice(["corner", "slice", "parallel"])
    k.features.add(f"copy_to_global_{how}")
    if how == "corner":
        k.body.emit(f"T.copy({tile}, {tiling.corner(dst)})")
    elif how == "slice":
        k.body.emit(f"T.copy({tile}, {tiling.slice(dst)})")
    else:
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        k.body.emit(f"{dst}[{tiling.gidx()}] = {tile}[{tiling.vars()}]")
        k.body.close(2)


def _threads(c) -> int:
    return c.choice([128, 32, 64, 256])


def _size(c, tile: int, count_max: int = 3) -> int:
    """A tensor extent covered by 1..count_max tiles, ragged half of the time."""
    n = c.int(1, count_max) * tile
    if tile > 1 and c.flip(0.5):
        n -= c.int(1, tile - 1)
    return max(n, 1)


def _grid(k: Kernel, c, rank: int):
    """Tile shape, sizes and the T.Kernel header: (Tiling, names of block vars)."""
    if rank == 1:
        bn = c.choice([32, 64, 128, 1, 4, 16, 256])
        n = _size(c, bn, 4)
        n_src = str(n)
        if c.flip(0.2):
            k.module_lines.append('n = T.dynamic("n")')
            n_src = "n"
            k.features.add("dynamic")
        k.header = f"with T.Kernel(T.ceildiv({n_src}, {bn}), threads={_threads(c)}) as bx:"
        k.features.add("grid1d")
        return Tiling([(bn, n_src, n, "bx * " + str(bn), "j")])
    bm = c.choice([16, 8, 32, 64, 1, 2, 4])
    bn = c.choice([32, 64, 16, 8, 1, 4])
    while bm * bn > 4096:
        bn //= 2
    m, n = _size(c, bm), _size(c, bn)
    m_src = str(m)
    if c.flip(0.15):
        k.module_lines.append('m = T.dynamic("m")')
        m_src = "m"
        k.features.add("dynamic")
    threads = _threads(c)
    if c.flip(0.3) and n == bn:
        # One block per row tile, the whole width in one tile.
        k.header = f"with T.Kernel(T.ceildiv({m_src}, {bm}), threads={threads}) as bx:"
        k.features.add("grid1d_rows")
        return Tiling([(bm, m_src, m, f"bx * {bm}", "i"), (bn, str(n), n, "0", "j")])
    k.header = (f"with T.Kernel(T.ceildiv({n}, {bn}), T.ceildiv({m_src}, {bm}), threads={threads}) "
                "as (bx, by):")
    k.features.add("grid2d")
    return Tiling([(bm, m_src, m, f"by * {bm}", "i"), (bn, str(n), n, f"bx * {bn}", "j")])


def _gshape(tiling: Tiling):
    return [d[1] for d in tiling.dims], [d[2] for d in tiling.dims]
