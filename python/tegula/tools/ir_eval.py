"""Evaluating the printed IR's expressions (`ast` nodes, see ir_text.py) over many blocks at
once, and reading them as affine forms of a T.Parallel nest's loop variables.

A value is a Python number, a numpy array over blocks (one entry per block of the grid,
"lanes"; in a dense count, with one more axis per nest variable) or UNKNOWN: something only
running the kernel would tell (a value in registers or shared memory, or in a tensor whose
contents were not given). Arithmetic has the generated code's meaning (printer.cc): `//`
and `%` floor, `/` of two integers truncates, `truncmod` is C's remainder.
"""
from __future__ import annotations

import ast
import math

import numpy as np

from .ir_text import is_float_dtype


class _Unknown:
    def __repr__(self):
        return "UNKNOWN"


UNKNOWN = _Unknown()


class Deferred:
    """A let inside a T.Parallel nest: its value depends on the nest's variables, so it is
    evaluated where it is used, in whatever form the use needs."""

    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node


class NeedsData(ValueError):
    """A bound, branch or index reads a tensor whose values were not given (only its shape)."""

    def __init__(self, buffer: str):
        super().__init__(buffer)
        self.buffer = buffer


MATH = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
        "rsqrt": lambda x: 1.0 / np.sqrt(x), "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
        "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "abs": np.abs,
        "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x))}
CONSTANTS = {"infinity": math.inf, "ninfinity": -math.inf}
INT_CASTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _is_int(v) -> bool:
    if isinstance(v, (bool, int, np.integer)):
        return True
    return isinstance(v, np.ndarray) and v.dtype.kind in "biu"


def _truncdiv(a, b):
    """C's integer division (towards zero), which `/` of two integers means."""
    q = np.floor_divide(np.abs(a), np.abs(b))
    return np.where(np.sign(a) * np.sign(b) < 0, -q, q)


_BINARY = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: _truncdiv(a, b) if _is_int(a) and _is_int(b) else np.true_divide(a, b),
    ast.FloorDiv: np.floor_divide, ast.Mod: np.mod, ast.BitAnd: np.bitwise_and, ast.BitOr: np.bitwise_or,
    ast.BitXor: np.bitwise_xor, ast.LShift: np.left_shift, ast.RShift: np.right_shift,
}
_COMPARE = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
            ast.Eq: np.equal, ast.NotEq: np.not_equal}


def _scalar(v):
    """Plain Python numbers stay plain: numpy's 0-d results come back as ints/floats."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return v.item()
    if isinstance(v, np.generic):
        return v.item()
    return v


class Evaluator:
    """`ev(node, env)`: env maps names (block, loop and let variables, dynamic sizes,
    scalar parameters) to values or Deferred lets; `load(buffer, indices)` reads a tensor's
    element (global memory with known contents) or gives UNKNOWN."""

    def __init__(self, load):
        self.load = load
        self.upper = False

    def ev(self, node, env, upper=None):
        """`node`'s value; with upper=True, an upper bound where the value itself is not
        known but a select or a min bounds it (a select of two known values, min with one)."""
        if upper is not None:
            saved, self.upper = self.upper, upper
            try:
                return self.ev(node, env)
            finally:
                self.upper = saved
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.name(node.id, env)
        if isinstance(node, ast.BinOp):
            a, b = self.ev(node.left, env), self.ev(node.right, env)
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            with np.errstate(all="ignore"):
                return _scalar(_BINARY[type(node.op)](a, b))
        if isinstance(node, ast.UnaryOp):
            a = self.ev(node.operand, env)
            if a is UNKNOWN:
                return UNKNOWN
            if isinstance(node.op, ast.Not):
                return _scalar(np.logical_not(a))
            if isinstance(node.op, ast.Invert):
                return _scalar(np.invert(a))
            return _scalar(-a if isinstance(node.op, ast.USub) else a)
        if isinstance(node, ast.Compare):
            a, b = self.ev(node.left, env), self.ev(node.comparators[0], env)
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            return _scalar(_COMPARE[type(node.ops[0])](a, b))
        if isinstance(node, ast.BoolOp):
            values = [self.ev(v, env) for v in node.values]
            if any(v is UNKNOWN for v in values):
                return UNKNOWN
            join = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            out = values[0]
            for v in values[1:]:
                out = join(out, v)
            return _scalar(out)
        if isinstance(node, ast.Subscript):
            indices = [self.ev(i, env) for i in subscript_indices(node)]
            if any(i is UNKNOWN for i in indices):
                return UNKNOWN
            return self.load(node.value.id, indices)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise ValueError(f"cannot evaluate {ast.unparse(node)!r}")

    def name(self, name, env):
        try:
            v = env[name]
        except KeyError:
            if name in ("inf", "nan"):
                return float(name)
            raise
        return self.ev(v.node, env) if isinstance(v, Deferred) else v

    def call(self, node, env):
        fn = node.func.id
        if fn in CONSTANTS:
            return CONSTANTS[fn]
        args = [self.ev(a, env) for a in node.args]
        if fn == "if_then_else":
            c, a, b = args
            if a is UNKNOWN or b is UNKNOWN:
                return UNKNOWN
            if c is UNKNOWN:
                return _scalar(np.maximum(a, b)) if self.upper or np.all(a == b) else UNKNOWN
            return _scalar(np.where(c, a, b))
        if fn == "min" and self.upper and sum(a is UNKNOWN for a in args) == 1:
            return next(a for a in args if a is not UNKNOWN)
        if any(a is UNKNOWN for a in args):
            return UNKNOWN
        with np.errstate(all="ignore"):
            if fn in ("min", "max"):
                return _scalar((np.minimum if fn == "min" else np.maximum)(args[0], args[1]))
            if fn == "truncmod":
                return _scalar(np.fmod(args[0], args[1]))
            if fn in MATH:
                return _scalar(MATH[fn](np.asarray(args[0], dtype=np.float64)))
            if fn in INT_CASTS:
                x = args[0]
                return x if _is_int(x) else _scalar(np.trunc(x).astype(np.int64))
            if fn == "bool":
                return _scalar(np.asarray(args[0]) != 0)
            if is_float_dtype(fn):
                return _scalar(np.asarray(args[0], dtype=np.float64))
        return UNKNOWN  # a call with no value the count needs (print, ...)


def subscript_indices(node: ast.Subscript) -> list:
    """The index nodes of `B[i, j]`; a vector `B[i, j:+n]` gives its first element's."""
    s = node.slice
    items = list(s.elts) if isinstance(s, ast.Tuple) else [s]
    return [i.lower if isinstance(i, ast.Slice) else i for i in items]


def subscript_lanes(node: ast.Subscript) -> int:
    """n of a vector access `B[i, j:+n]`; 1 for a scalar one."""
    s = node.slice
    last = (list(s.elts) if isinstance(s, ast.Tuple) else [s])[-1]
    if isinstance(last, ast.Slice):
        width = last.upper.operand if isinstance(last.upper, ast.UnaryOp) else last.upper
        return int(width.value)
    return 1


def names_in(node, env) -> set:
    """Every variable name `node` reads, through the Deferred lets of `env`."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
            v = env.get(n.id)
            if isinstance(v, Deferred):
                out |= names_in(v.node, env)
    return out


# ---- affine forms: base + sum(coefficient * nest variable) ----

class Affine:
    """An integer expression of a nest's variables with constant integer coefficients;
    `base` is a number or a per-block array."""

    __slots__ = ("coeffs", "base")

    def __init__(self, coeffs: dict, base):
        self.coeffs = {v: c for v, c in coeffs.items() if c}
        self.base = base

    def plus(self, other, sign=1) -> Affine:
        coeffs = dict(self.coeffs)
        for v, c in other.coeffs.items():
            coeffs[v] = coeffs.get(v, 0) + sign * c
        return Affine(coeffs, self.base + sign * other.base)

    def scaled(self, k: int) -> Affine:
        return Affine({v: c * k for v, c in self.coeffs.items()}, self.base * k)


def affine(ev: Evaluator, node, env, nest: set):
    """`node` as an Affine of the variables in `nest`, None when it is not one (products of
    two variables, floor division of a variable...), UNKNOWN when it needs a value only the
    run would tell."""
    if not (names_in(node, env) & nest):
        v = ev.ev(node, env)
        if v is UNKNOWN:
            return UNKNOWN
        if not _is_int(v):
            return None
        return Affine({}, v)
    if isinstance(node, ast.Name):
        v = env.get(node.id)
        if isinstance(v, Deferred):
            return affine(ev, v.node, env, nest)
        return Affine({node.id: 1}, 0)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        a, b = affine(ev, node.left, env, nest), affine(ev, node.right, env, nest)
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Mult):
            for x, k in ((a, b), (b, a)):
                if not k.coeffs and isinstance(k.base, (int, np.integer)):
                    return x.scaled(int(k.base))
            return None
        return a.plus(b, 1 if isinstance(node.op, ast.Add) else -1)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        a = affine(ev, node.operand, env, nest)
        return a.scaled(-1) if isinstance(a, Affine) else a
    if isinstance(node, ast.Call) and node.func.id in INT_CASTS:
        return affine(ev, node.args[0], env, nest)
    return None
