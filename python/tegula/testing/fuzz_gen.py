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

from .fuzz import Arg, Program, tolerance_for

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
        self.dtypes: set[str] = set()
        self.features: set[str] = set()
        self._names: dict[str, int] = {}

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
            "    @T.prim_func",
            f"    def {name}({', '.join(self.decls)}):",
            f"        {self.header}",
        ]
        header_line = len(lines)
        first = len(lines) + 1
        lines += ["            " + line for line in self.body.lines]
        lines += [f"    return {name}", ""]
        error_line = None
        if error_kind:
            error_line = header_line if self.header_mark else first + self.body.marked
        return Program("\n".join(lines), self.args, self.target, tolerance_for(self.dtypes), error_line,
                       error_kind, self.features, name)


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
        if c.flip(0.3):
            return Val(f"T.cast({e.text} {cmp} 0.25, \"float32\")", "float32", 1.0)
        return Val(f"T.if_then_else({e.text} {cmp} 0.25, {a.text}, {b.text})", _promote(a.dtype, b.dtype),
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
    return Val(f"T.if_then_else({e.text} {c.choice(['>', '<=', '==', '!='])} {c.int(-3, 3)}, {a.text}, {b.text})",
               "int32", max(a.bound, b.bound), True)


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


# ---- families of valid programs ----

def gen_elementwise(k: Kernel) -> None:
    """Load, stage, compute, optionally reduce, store: the tile pipeline of most kernels."""
    c = k.c
    tiling = _grid(k, c, c.choice([2, 2, 1]))
    is_int = c.flip(0.2)
    din = "int32" if is_int else c.choice(["float32", "float16", "bfloat16"])
    k.dtypes.add(din)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, din)
    leaves = []
    xdt = din if (is_int or c.flip(0.5)) else "float32"
    xa = load_tile(k, tiling, X, c.choice(["fragment", "shared"]), xdt, "x_tile")
    if c.flip(0.4):  # stage once more: every scope pair
        scope = c.choice(["fragment", "shared"])
        xb = k.alloc(scope, tiling.shape, xdt, "x_stage")
        k.body.emit(f"T.copy({xa}, {xb})")
        k.features.add("copy_tile_tile")
        xa = xb
    leaves.append(Val(f"{xa}[{tiling.vars()}]", xdt, 2.0 if not is_int else 40, True))
    if c.flip(0.4):
        Y = k.tensor("Y", src_shape, shape, din, values="positive" if c.flip() else "signed")
        if c.flip(0.5):
            ya = load_tile(k, tiling, Y, c.choice(["fragment", "shared"]), xdt, "y_tile")
            leaves.append(Val(f"{ya}[{tiling.vars()}]", xdt, 2.0 if not is_int else 40, True))
        else:
            k.features.add("global_read_in_parallel")
            leaves.append(Val(f"{Y}[{tiling.gidx()}]", din, 2.0 if not is_int else 40, True))
    if c.flip(0.3):
        if is_int:
            leaves.append(Val(k.scalar("s", "int32", c.int(-5, 5)), "int32", 5, True))
        else:
            leaves.append(Val(k.scalar("alpha", "float32", c.choice([0.5, -1.25, 3.0])), "float32", 3.0))
    leaves.append(Val("2" if is_int else "0.5", "int32" if is_int else "float32", 2, True))
    dz = din if is_int else c.choice(["float32", "float32", din])
    k.dtypes.add(dz)
    z = k.alloc(c.choice(["fragment", "shared"]), tiling.shape, dz, "z")
    k.body.open(tiling.parallel())
    k.body.emit(f"{z}[{tiling.vars()}] = {expr(k, leaves, c.int(1, 4), is_int).text}")
    k.body.close()
    k.features.add("parallel_math")
    if c.flip(0.4):  # a second pass, in place
        k.body.open(tiling.parallel())
        zleaf = Val(f"{z}[{tiling.vars()}]", dz, 1e3 if not is_int else 2**12)
        e = expr(k, [zleaf] + leaves, c.int(1, 2), is_int)
        if not is_int and e.bound > 1e4:
            e = zleaf
        k.body.emit(f"{z}[{tiling.vars()}] = {e.text}")
        k.body.close()
    out_dtype = dz if c.flip(0.6) else ("float32" if not is_int or c.flip() else "int32")
    if c.flip(0.45):
        z = reduce_stage(k, tiling, z, dz, is_int)
    O = k.tensor("O", src_shape, shape, out_dtype, role="out")
    k.dtypes.add(out_dtype)
    store_tile(k, tiling, z, O)


def reduce_stage(k: Kernel, tiling: Tiling, z: str, dz: str, is_int: bool) -> str:
    """Reduce a tile (through a fragment), write and read the replicated result, store
    it to an output R; returns the fragment that now holds the tile."""
    c = k.c
    if not z.startswith("zf"):
        zf = k.alloc("fragment", tiling.shape, dz, "zf")
        k.body.emit(f"T.copy({z}, {zf})")
        z = zf
    rank = len(tiling.dims)
    dim = c.int(0, rank - 1)
    kept = [d for i, d in enumerate(tiling.dims) if i != dim]
    kind = c.choice(["sum", "max", "min", "abssum", "absmax"])
    acc_t = dz if is_int else c.choice(["float32", dz])
    k.dtypes.add(acc_t)
    rshape = tuple(d[0] for d in kept) or (1,)
    r = k.alloc("fragment", rshape, acc_t, "red")
    ridx = ", ".join(d[4] for d in kept) or "0"
    clear = c.flip(0.6)
    if not clear:
        how = c.choice(["fill", "clear", "parallel"])
        if how == "fill":
            k.body.emit(f"T.fill({r}, {c.choice(['1', '2', '-3']) if is_int else c.choice(['0.5', '-1.0', '2.0'])})")
        elif how == "clear":
            k.body.emit(f"T.clear({r})")
        else:
            var = ", ".join(d[4] for d in kept) if kept else "q"
            k.body.open(f"for {var} in T.Parallel({', '.join(str(s) for s in rshape)}):")
            k.body.emit(f"{r}[{var}] = {'1' if is_int else '0.25'}")
            k.body.close()
            k.features.add("write_replicated")
    dim_text = str(dim) if c.flip(0.7) else str(dim - rank)
    k.body.emit(f"T.reduce_{kind}({z}, {r}, dim={dim_text}{'' if clear else ', clear=False'})")
    k.features.add(f"reduce_{kind}_{'clear' if clear else 'accumulate'}_dim{dim}_of{rank}")
    if c.flip(0.4):  # write the replicated fragment in a later loop
        var = ", ".join(d[4] for d in kept) if kept else "q"
        k.body.open(f"for {var} in T.Parallel({', '.join(str(s) for s in rshape)}):")
        k.body.emit(f"{r}[{var if kept else '0'}] = {r}[{var if kept else '0'}] * 2 + {'1' if is_int else '0.5'}")
        k.body.close()
        k.features.add("write_replicated")
    # read it back in the full tile
    k.body.open(tiling.parallel())
    k.body.emit(f"{z}[{tiling.vars()}] = {z}[{tiling.vars()}] {c.choice(['-', '+', '*'] if not is_int else ['-', '+'])} "
                f"{r}[{ridx}]")
    k.body.close()
    k.features.add("read_replicated")
    # the reduction itself goes out too
    if kept:
        kd = kept[0]
        other = tiling.dims[dim]
        # R holds one row of results per block along the reduced dimension.
        blocks = "bx" if len(tiling.dims) == 1 or other[3] == "0" else other[3].split(" * ")[0]
        nblk = max(1, -(-other[2] // other[0]))
        if other[3] == "0":
            blocks, nblk = "0", 1
        shape_src = [kd[1], str(nblk)] if dim == 1 else [str(nblk), kd[1]]
        shape = [kd[2], nblk] if dim == 1 else [nblk, kd[2]]
        R = k.tensor("R", shape_src, shape, acc_t, role="out")
        idx = f"{kd[3]} + {kd[4]}" if kd[3] != "0" else kd[4]
        k.body.open(f"for {kd[4]} in T.Parallel({kd[0]}):")
        k.body.open(f"if {idx} < {kd[1]}:")
        target = f"{R}[{idx}, {blocks}]" if dim == 1 else f"{R}[{blocks}, {idx}]"
        k.body.emit(f"{target} = {r}[{kd[4]}]")
        k.body.close(2)
    else:
        d = tiling.dims[0]
        nblk = max(1, -(-d[2] // d[0]))
        R = k.tensor("R", [str(nblk)], [nblk], acc_t, role="out")
        k.body.open("for q in T.Parallel(1):")
        k.body.emit(f"{R}[bx] = {r}[0]")
        k.body.close()
    return z


def gen_accumulate(k: Kernel) -> None:
    """A loop over K chunks carrying a fragment accumulation and a clear=False reduction."""
    c = k.c
    bm = c.choice([16, 8, 32, 64, 4])
    bk = c.choice([32, 16, 64, 8])
    while bm * bk > 4096:
        bk //= 2
    M, K = _size(c, bm), _size(c, bk, 4)
    din = c.choice(["float32", "float16", "bfloat16"])
    k.dtypes.add(din)
    k_src = str(K)
    if c.flip(0.2):
        k.module_lines.append('kk = T.dynamic("kk")')
        k_src = "kk"
        k.features.add("dynamic")
    X = k.tensor("X", [str(M), k_src], [M, K], din)
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={_threads(c)}) as bx:"
    xs = k.alloc("shared", (bm, bk), din, "x_shared")
    acc = k.alloc("fragment", (bm, bk), "float32", "acc")
    use_reduce = c.flip(0.5)
    if use_reduce:
        xf = k.alloc("fragment", (bm, bk), "float32", "x_frag")
        rs = k.alloc("fragment", (bm,), "float32", "row_acc")
        k.body.emit(f"T.clear({rs})")
    use_var = c.flip(0.25)
    if use_var:
        v = k.fresh("count")
        k.body.emit(f"{v} = T.alloc_var(\"int32\")")
        k.body.emit(f"{v} = 0")
        k.features.add("alloc_var")
    if c.flip():
        k.body.emit(f"T.clear({acc})")
    else:
        k.body.emit(f"T.fill({acc}, 0.5)")
    trips = f"T.ceildiv({k_src}, {bk})"
    if c.flip(0.2) and k_src != "kk":
        trips = k.scalar("trips", "int32", -(-K // bk))
    loop = c.choice(["pipelined", "serial", "range", "pipelined"])
    if loop == "pipelined":
        stages = c.int(2, 3)
        k.body.open(f"for ko in T.Pipelined({trips}, num_stages={stages}):")
    elif loop == "serial":
        k.body.open(f"for ko in T.serial({trips}):")
    else:
        k.body.open(f"for ko in range({trips}):")
    k.features.add("loop_" + loop)
    k.body.emit(f"T.copy(X[bx * {bm}, ko * {bk}], {xs})")
    leaf = Val(f"{xs}[i, j]", din, 1.0, True)
    e = float_expr(k, [leaf, Val("0.5", "float32", 0.5, True)], c.int(1, 3))
    k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
    if c.flip(0.25):
        k.body.emit(f"{acc}[i, j] = T.max({acc}[i, j], {e.text})")
    else:
        k.body.emit(f"{acc}[i, j] += {e.text}")
    k.body.close()
    if use_reduce:
        k.body.emit(f"T.copy({xs}, {xf})")
        k.body.emit(f"T.reduce_{c.choice(['sum', 'abssum'])}({xf}, {rs}, dim=1, clear=False)")
        k.features.add("reduce_accumulate_in_loop")
    if use_var:
        k.body.emit(f"{v} += 1")
    k.body.close()
    O = k.tensor("O", [str(M), str(bk)], [M, bk], "float32", role="out")
    k.dtypes.add("float32")
    if use_var:
        k.body.open(f"for i, j in T.Parallel({bm}, {bk}):")
        k.body.emit(f"{acc}[i, j] = {acc}[i, j] + {v}")
        k.body.close()
    k.body.emit(f"T.copy({acc}, {O}[bx * {bm}, 0])")
    if use_reduce:
        R = k.tensor("R", [str(M)], [M], "float32", role="out")
        k.body.open(f"for i in T.Parallel({bm}):")
        k.body.open(f"if bx * {bm} + i < {M}:")
        k.body.emit(f"{R}[bx * {bm} + i] = {rs}[i]")
        k.body.close(2)


def gen_serial_var(k: Kernel) -> None:
    """Per-thread code: a T.alloc_var accumulator and a T.alloc_local array in serial
    loops, an `if` on block values, one thread storing."""
    c = k.c
    M, N = c.int(1, 6), c.int(1, 24)
    is_int = c.flip(0.3)
    dt = "int32" if is_int else "float32"
    k.dtypes.add(dt)
    X = k.tensor("X", [str(M), str(N)], [M, N], dt)
    Y = k.tensor("Y", [str(M)], [M], dt, role="out")
    k.header = f"with T.Kernel({M}, threads={c.choice([32, 64, 128])}) as bx:"
    acc = k.fresh("acc")
    if c.flip():
        k.body.emit(f"{acc} = T.alloc_var(\"{dt}\", init={'1' if is_int else '0.5'})")
    else:
        k.body.emit(f"{acc} = T.alloc_var(\"{dt}\")")
        k.body.emit(f"{acc} = {'1' if is_int else '0.5'}")
    k.features.add("alloc_var")
    L = c.int(1, min(N, 8))
    loc = k.alloc("local", (L,), dt, "vals")
    k.body.open(f"for t in T.serial({L}):")
    k.body.emit(f"{loc}[t] = X[bx, t] * {'3' if is_int else '1.5'}")
    k.body.close()
    leaves = [Val("X[bx, kk]", dt, 40 if is_int else 1, True)]
    e = expr(k, leaves, c.int(1, 3), is_int)
    k.body.open(f"for kk in {c.choice(['T.serial', 'range'])}({N}):")
    k.body.emit(f"{acc} += {e.text}")
    k.body.close()
    k.body.open(f"for t in {c.choice(['T.unroll', 'T.serial'])}({L}):")
    k.body.emit(f"{acc} = {acc} + {loc}[t]")
    k.body.close()
    # Every thread stores the same value (the reference has no thread index to pick one).
    k.body.open("if bx % 2 == 0:")
    k.body.emit(f"Y[bx] = {acc}")
    k.body.close()
    k.body.open("else:")
    k.body.emit(f"Y[bx] = -{acc}")
    k.body.close()


def gen_atomic(k: Kernel) -> None:
    """T.atomic_add of elements (column sums across blocks) or of whole tiles."""
    c = k.c
    tiling = _grid(k, c, 2)
    dt = c.choice(["float32", "int32"])
    k.dtypes.add(dt)
    src_shape, shape = _gshape(tiling)
    X = k.tensor("X", src_shape, shape, dt, values="ints")
    n_dim = tiling.dims[1]
    if c.flip(0.5):
        S = k.tensor("S", [n_dim[1]], [n_dim[2]], dt, role="inout", values=c.choice(["zeros", "ints"]))
        k.body.open(tiling.parallel())
        k.body.open(f"if {tiling.guard()}:")
        scale = c.choice(["", " * 2", " + 1"])
        col = f"{n_dim[3]} + j" if n_dim[3] != "0" else "j"
        k.body.emit(f"T.atomic_add({S}[{col}], X[{tiling.gidx()}]{scale})")
        k.body.close(2)
        k.features.add("atomic_element")
    else:
        S = k.tensor("S", src_shape, shape, dt, role="inout", values=c.choice(["zeros", "ints"]))
        xf = load_tile(k, tiling, X, "fragment", dt, "x_tile")
        for _ in range(c.int(1, 2)):
            k.body.emit(f"T.atomic_add({tiling.corner(S)}, {xf})")
        k.features.add("atomic_tile")


def gen_gemm(k: Kernel) -> None:
    """A pipelined T.gemm with an epilogue."""
    c = k.c
    dt = c.choice(["float16", "bfloat16"])
    bm, bn, bk = c.choice([64, 32, 128]), c.choice([64, 32, 128]), c.choice([32, 16, 64])
    ta, tb = c.flip(0.25), c.flip(0.3)
    a_regs = not ta and c.flip(0.25)
    # Policies split the warps into whole 16x8 mma tiles: FullRow puts every warp along M
    # (and is what a register A needs), FullCol along N.
    threads = c.choice([t for t in (128, 256, 64) if not a_regs or bm % (16 * t // 32) == 0])
    warps = threads // 32
    policies = ["T.GemmWarpPolicy.Square"] if not a_regs else []
    if bm % (16 * warps) == 0:
        policies.append("T.GemmWarpPolicy.FullRow")
    if bn % (8 * warps) == 0 and not a_regs:
        policies.append("T.GemmWarpPolicy.FullCol")
    M, N, K = _size(c, bm, 2), _size(c, bn, 2), _size(c, bk, 3)
    a_shape, a_tile = ((K, M), (bk, bm)) if ta else ((M, K), (bm, bk))
    b_shape, b_tile = ((N, K), (bn, bk)) if tb else ((K, N), (bk, bn))
    A = k.tensor("A", [str(s) for s in a_shape], a_shape, dt)
    B = k.tensor("B", [str(s) for s in b_shape], b_shape, dt)
    out_dt = c.choice(["float32", dt])
    k.dtypes.update({"float32", out_dt})
    k.header = f"with T.Kernel(T.ceildiv({N}, {bn}), T.ceildiv({M}, {bm}), threads={threads}) as (bx, by):"
    As = k.alloc("shared", a_tile, dt, "A_shared")
    Bs = k.alloc("shared", b_tile, dt, "B_shared")
    Cf = k.alloc("fragment", (bm, bn), "float32", "C_local")
    if a_regs:
        Af = k.alloc("fragment", (bm, bk), dt, "A_local")
    policy = c.choice(policies)
    # clear_accum clears at every k-step, so it is only right when K is one step.
    clear_in_gemm = K <= bk and c.flip(0.5)
    if not clear_in_gemm:
        k.body.emit(f"T.clear({Cf})")
    stages = c.int(1, 3)
    k.body.open(f"for ko in T.Pipelined(T.ceildiv({K}, {bk}), num_stages={stages}):")
    k.body.emit(f"T.copy(A[ko * {bk}, by * {bm}], {As})" if ta else f"T.copy(A[by * {bm}, ko * {bk}], {As})")
    k.body.emit(f"T.copy(B[bx * {bn}, ko * {bk}], {Bs})" if tb else f"T.copy(B[ko * {bk}, bx * {bn}], {Bs})")
    flags = (", transpose_A=True" if ta else "") + (", transpose_B=True" if tb else "")
    flags += ", clear_accum=True" if clear_in_gemm else ""
    if a_regs:
        k.body.emit(f"T.copy({As}, {Af})")
        k.features.add("gemm_a_registers")
    k.body.emit(f"T.gemm({Af if a_regs else As}, {Bs}, {Cf}{flags}, policy={policy})")
    k.body.close()
    k.features.add(f"gemm_{k.target}_{'tA' if ta else ''}{'tB' if tb else ''}")
    if c.flip(0.5):
        leaves = [Val(f"{Cf}[i, j]", "float32", 60.0)]
        if c.flip(0.3):
            leaves.append(Val(k.scalar("alpha", "float32", 0.75), "float32", 1.0))
        k.body.open(f"for i, j in T.Parallel({bm}, {bn}):")
        k.body.emit(f"{Cf}[i, j] = {c.choice(['T.max', 'T.min'])}({Cf}[i, j], 0) * {leaves[-1].text}"
                    if len(leaves) > 1 else f"{Cf}[i, j] = T.max({Cf}[i, j], 0)")
        k.body.close()
    C = k.tensor("C", [str(M), str(N)], [M, N], out_dt, role="out")
    k.body.emit(f"T.copy({Cf}, {C}[by * {bm}, bx * {bn}])")


FAMILIES = [(gen_elementwise, 5), (gen_accumulate, 2), (gen_serial_var, 1), (gen_atomic, 1), (gen_gemm, 2)]


def gen_valid(c) -> Program:
    table = [f for f, w in FAMILIES for _ in range(w)]
    family = c.choice(table)
    k = Kernel(c, c.choice(["sm_80", "sm_90a"]))
    family(k)
    k.features.add(family.__name__)
    return k.finish(family.__name__.replace("gen_", "fuzz_"))


# ---- invalid programs ----

def gen_invalid(c) -> Program:
    from .fuzz_invalid import INVALID

    kind = c.choice(sorted(INVALID))
    k = Kernel(c, c.choice(["sm_80", "sm_90a"]))
    INVALID[kind](k)
    return k.finish("fuzz_" + kind, error_kind=kind)

