"""Errors in the user's kernel, shown at the user's own file:line:col with a caret.

Every DSL mistake, whether found while parsing (here) or while lowering (the C++
passes raise `tegula._C.CompileError` carrying the location the frontend stamped on
the node), reaches the user as one `TegulaCompileError`:

    kernels.py:14:17: name 'A_shard' is not defined in the kernel
                T.copy(A_shard, B)
                       ^
"""
from __future__ import annotations

import linecache
import re


class TegulaCompileError(Exception):
    """A mistake in a Tegula kernel; `str()` shows the location, the line and a caret."""

    def __init__(self, message: str, file: str = "<unknown>", line: int = 0, col: int = 0,
                 source_line: str | None = None):
        self.message = message
        self.file = file
        self.line = line
        self.col = col  # 1-based, in characters
        self.source_line = source_line
        super().__init__(self._render())

    def _render(self) -> str:
        if self.line <= 0:
            return self.message
        head = f"{self.file}:{self.line}:{self.col}: {self.message}"
        if not self.source_line:
            return head
        text = self.source_line.rstrip("\n")
        # Keep tabs in the caret's indent so it lines up under tab-indented code too.
        pad = "".join(ch if ch == "\t" else " " for ch in text[: max(self.col - 1, 0)])
        return f"{head}\n{text}\n{pad}^"


# Shown as `tegula.TegulaCompileError`, where users import it from.
TegulaCompileError.__module__ = "tegula"

_KINDED: dict = {}


def compile_error_class(kind: type | None) -> type:
    """TegulaCompileError, or for `kind` (ValueError, AssertionError, ...) a subclass that
    is also that Python exception: where TileLang raises a ValueError for a mistake, the
    ported program's `except ValueError` still catches ours, which shows the user's line."""
    if kind is None or issubclass(TegulaCompileError, kind):
        return TegulaCompileError
    cls = _KINDED.get(kind)
    if cls is None:
        cls = type("TegulaCompileError", (TegulaCompileError, kind), {"__module__": "tegula"})
        _KINDED[kind] = cls
    return cls


class ArgError(Exception):
    """Raised by a `T.*` intrinsic about one of its arguments; the parser turns it into a
    TegulaCompileError whose caret points at that argument in the call. `kind`: the Python
    exception type TileLang raises for the same mistake (the error is also one)."""

    def __init__(self, arg: str | int | None, message: str, item: int | None = None, kind: type | None = None):
        self.arg = arg  # parameter name, positional index, or None for the whole call
        self.message = message
        self.item = item  # the element of a tuple/list argument at fault, if one is
        self.kind = kind
        super().__init__(message)


class SourceInfo:
    """Where a prim_func's source lives, to map ast positions back to the real file.

    `inspect.getsource` + `textwrap.dedent` gives text whose line 1 is the function's
    first decorator line (`co_firstlineno`) and whose columns lost `indent` characters.
    """

    def __init__(self, file: str, first_line: int, indent: int, lines: list[str],
                 raw_lines: list[str]):
        self.file = file
        self.first_line = first_line
        self.indent = indent
        self.lines = lines  # dedented source lines, index 0 is ast line 1
        self.raw_lines = raw_lines  # the same lines as the user wrote them

    def position(self, node) -> tuple[int, int]:
        """(file line, 1-based character column) of an ast node."""
        rel = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        if 0 < rel <= len(self.lines):
            text = self.lines[rel - 1]
            if not text.isascii():  # ast columns count UTF-8 bytes, carets count characters
                col = len(text.encode("utf-8")[:col].decode("utf-8", "ignore"))
        return self.first_line + rel - 1, self.indent + col + 1

    def source_line(self, line: int) -> str | None:
        rel = line - self.first_line
        if 0 <= rel < len(self.raw_lines):
            return self.raw_lines[rel]
        return linecache.getline(self.file, line) or None

    def error_at(self, node, message: str, kind: type | None = None) -> TegulaCompileError:
        line, col = self.position(node)
        return compile_error_class(kind)(message, self.file, line, col, self.source_line(line))

    def error_at_loc(self, file: str, line: int, col: int, message: str) -> TegulaCompileError:
        text = self.source_line(line) if file == self.file else (linecache.getline(file, line) or None)
        return TegulaCompileError(message, file, line, col, text)


def _strip_loc_prefix(message: str, file: str, line: int) -> str:
    # The C++ side may already prefix its message with "file:line:col: "; show it once.
    return re.sub(r"^" + re.escape(f"{file}:{line}:") + r"\d+:\s*", "", message)


def from_native(err: Exception, source: SourceInfo | None) -> TegulaCompileError:
    """Convert a `tegula._C.CompileError` (attributes .file .line .col) to ours."""
    file = getattr(err, "file", None) or "<unknown>"
    line = int(getattr(err, "line", 0) or 0)
    col = int(getattr(err, "col", 0) or 0)
    message = _strip_loc_prefix(str(err), file, line)
    if source is not None and line > 0:
        return source.error_at_loc(file, line, col, message)
    text = linecache.getline(file, line) if line > 0 else None
    return TegulaCompileError(message, file, line, col, text or None)
