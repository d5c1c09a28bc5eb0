"""The printed IR of one lowered kernel (`Lowered.ir(stage)`), read back into a tree whose
expressions are Python `ast` nodes.

The printer writes Python's syntax and precedence (`src/ir/printer.cc`): `//` and `%` floor,
`a:+n` a vector or a region, `if_then_else(c, a, b)` a select, `float16(x)` a cast. So an
expression line parses with `ast`, and only the statement forms need their own reading:

    kernel NAME(X: float16[m, 4096], W: float16[4096], n: int32):   the signature
        dynamic m: int32 / grid (g0, g1) -> (bx, by) / threads 128 -> tx / alloc ... / smem ...
        for VAR in KIND(MIN, EXTENT[, num_stages=S]):               KIND: serial parallel ...
        if COND: / elif COND: / else:
        let VAR = EXPR                                              scopes over what follows
        BUF[i, j] = EXPR                                            a store
        T.OP(REGION -> REGION, ..., key=value)                      a tile op
        CALL(...)                                                   an evaluated call
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

INDENT = 4


@dataclass
class Buffer:
    name: str
    scope: str          # global, shared, fragment, local
    dtype: str
    shape: list         # ast nodes


@dataclass
class Stmt:
    kind: str           # for, if, let, store, tile, call
    line: str
    body: list = field(default_factory=list)    # for: the loop body
    var: str = ""                               # for, let
    loop_kind: str = ""                         # for: serial, parallel, pipelined, unrolled, ...
    args: list = field(default_factory=list)    # for: [min, extent]; if: conditions (None: else)
    branches: list = field(default_factory=list)  # if: one body per condition
    node: ast.AST | None = None                 # let: the value; store: the Assign; tile, call: the Call


@dataclass
class KernelText:
    name: str
    params: list            # [(name, Buffer or dtype string for a scalar)]
    buffers: dict           # name -> Buffer: the tensor parameters and the allocations
    scalars: dict           # scalar parameter name -> dtype
    dynamic: list           # names of the dynamic sizes
    grid: list              # ast nodes
    block_vars: list        # names, one per grid dimension (fewer when the kernel names none)
    threads: int
    thread_var: str         # "" when the kernel names none
    body: list              # Stmt


class IRTextError(ValueError):
    """A line this reader does not know: the printer wrote a form it has not learned."""


def parse_expr(text: str) -> ast.AST:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise IRTextError(f"cannot read the IR expression {text!r}: {err.msg}") from None


def split_top(text: str, sep: str = ", ") -> list[str]:
    """`text` split at `sep` outside brackets, parentheses and quotes."""
    parts, depth, start, i, quoted = [], 0, 0, 0, False
    while i < len(text):
        c = text[i]
        if c == '"':
            quoted = not quoted
        elif not quoted and c in "([":
            depth += 1
        elif not quoted and c in ")]":
            depth -= 1
        elif not quoted and depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


_TYPED = re.compile(r"(\w+): (\w+)\[(.*)\](?: (\w+))?$")


def _buffer(name, dtype, shape, scope) -> Buffer:
    return Buffer(name, scope, dtype, [parse_expr(d) for d in split_top(shape)])


def _signature(line: str):
    m = re.fullmatch(r"kernel (\w+)\((.*)\):", line)
    if not m:
        raise IRTextError(f"expected a kernel signature, got {line!r}")
    params = []
    for item in split_top(m.group(2)):
        typed = _TYPED.fullmatch(item.strip())
        if typed:
            name, dtype, shape, scope = typed.groups()
            params.append((name, _buffer(name, dtype, shape, scope or "global")))
        else:
            name, dtype = (s.strip() for s in item.split(":", 1))
            params.append((name, dtype))
    return m.group(1), params


_FOR = re.compile(r"for (\w+) in (\w+)\((.*)\):")


def _statement(text: str) -> Stmt:
    m = _FOR.fullmatch(text)
    if m:
        call = parse_expr(f"f({m.group(3)})")
        return Stmt("for", text, var=m.group(1), loop_kind=m.group(2), args=list(call.args[:2]))
    if text.startswith("let "):
        name, value = text[4:].split(" = ", 1)
        return Stmt("let", text, var=name.strip(), node=parse_expr(value))
    if text.startswith("T."):
        # `src -> dst` of copy and reduce reads as two arguments.
        call = parse_expr(text[2:].replace(" -> ", ", "))
        return Stmt("tile", text, var=call.func.id, node=call)
    try:
        tree = ast.parse(text).body
    except SyntaxError as err:
        raise IRTextError(f"cannot read the IR statement {text!r}: {err.msg}") from None
    if len(tree) == 1 and isinstance(tree[0], ast.Assign):
        return Stmt("store", text, node=tree[0])
    if len(tree) == 1 and isinstance(tree[0], ast.Expr) and isinstance(tree[0].value, ast.Call):
        return Stmt("call", text, var=getattr(tree[0].value.func, "id", ""), node=tree[0].value)
    raise IRTextError(f"cannot read the IR statement {text!r}")


def _block(lines: list, at: int, indent: int):
    """Statements at `indent` from lines[at]; returns (statements, next index)."""
    out = []
    while at < len(lines) and lines[at][0] == indent:
        text = lines[at][1]
        at += 1
        if text == "pass":
            continue
        head = re.fullmatch(r"(if|elif) (.*):", text)
        if head or text == "else:":
            body, at = _block(lines, at, indent + 1)
            if head and head.group(1) == "if":
                out.append(Stmt("if", text, args=[parse_expr(head.group(2))], branches=[body]))
                continue
            if not out or out[-1].kind != "if" or out[-1].args[-1] is None:
                raise IRTextError(f"'{text}' follows no if")
            out[-1].args.append(parse_expr(head.group(2)) if head else None)
            out[-1].branches.append(body)
            continue
        stmt = _statement(text)
        if stmt.kind == "for":
            stmt.body, at = _block(lines, at, indent + 1)
        out.append(stmt)
    return out, at


def parse_kernel(text: str) -> KernelText:
    raw = [line for line in text.splitlines() if line.strip()]
    if not raw:
        raise IRTextError("empty IR text")
    name, params = _signature(raw[0].strip())
    lines = [((len(r) - len(r.lstrip(" "))) // INDENT, r.strip()) for r in raw[1:]]
    buffers = {n: b for n, b in params if isinstance(b, Buffer)}
    scalars = {n: b for n, b in params if not isinstance(b, Buffer)}
    dynamic, grid, block_vars, threads, thread_var = [], [], [], 0, ""
    at = 0
    while at < len(lines) and lines[at][0] == 1:
        text = lines[at][1]
        word = text.split(" ", 1)[0]
        if word == "dynamic":
            dynamic.append(text.split(" ")[1].rstrip(":"))
        elif word == "grid":
            dims, _, names = text[5:].partition(" -> ")
            grid = list(parse_expr(dims).elts)
            block_vars = [e.id for e in parse_expr(names).elts] if names else []
        elif word == "threads":
            count, _, thread_var = text[8:].partition(" -> ")
            threads = int(count)
        elif word == "alloc":
            m = re.fullmatch(r"alloc (\w+): (\w+) (\w+)\[(.*)\]", text)
            if not m:
                raise IRTextError(f"cannot read the allocation {text!r}")
            buffers[m.group(1)] = _buffer(m.group(1), m.group(3), m.group(4), m.group(2))
        elif word == "view":
            # A view (T.reshape, T.view, T.Tensor(..., buf.data)): its accesses are its root's
            # memory, in the root's scope, under the view's own shape and dtype.
            m = re.fullmatch(r"view (\w+): (\w+)\[(.*)\] of (\w+)", text)
            if not m or m.group(4) not in buffers:
                raise IRTextError(f"cannot read the view {text!r}")
            buffers[m.group(1)] = _buffer(m.group(1), m.group(2), m.group(3), buffers[m.group(4)].scope)
        elif word not in ("smem", "swizzle"):
            break
        at += 1
    body, end = _block(lines, at, 1)
    if end != len(lines):
        raise IRTextError(f"cannot place the IR line {lines[end][1]!r} (indentation {lines[end][0]})")
    return KernelText(name, params, buffers, scalars, dynamic, grid, block_vars, threads, thread_var, body)


def dtype_bits(dtype: str) -> int:
    """float16 -> 16, float8_e4m3 -> 8, bool -> 8."""
    if dtype == "bool":
        return 8
    m = re.match(r"[a-z]+?(\d+)", dtype)
    if not m:
        raise IRTextError(f"unknown dtype {dtype!r}")
    return int(m.group(1))


def is_float_dtype(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))
