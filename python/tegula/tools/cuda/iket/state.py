"""The process's instrumentation state: whether kernels parsed now record their events
(`enable` / `disable`, nested), whether they record payload values, how many records a
launch's log holds, and the directory traces are written to.

A kernel records events when it is *parsed* with instrumentation enabled (inside
`iket.session()`); outside, `iket.mark` and `iket.range` emit nothing. The JIT keys its
kernels on this state (frontend/prim_func.py PARSE_CONTEXT), so a `@tegula.jit` call in a
session parses its own kernel.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from ....frontend.prim_func import PARSE_CONTEXT

DEFAULT_CAPACITY = 1 << 18  # records per launch: 8 MiB of log

_lock = threading.RLock()
_depth = 0
_runtime_payloads = False
_capacity = DEFAULT_CAPACITY
_output_dir: Path | None = None


def enable(*, override: bool = True) -> None:
    """Kernels parsed from now on record their events (until the matching `disable`).
    `override`: TileLang's choice about its compiler callback, which Tegula has not."""
    global _depth
    with _lock:
        _depth += 1


def disable(*, restore: bool = True) -> None:
    """Closes one `enable`; at depth zero, `iket.mark` and `iket.range` emit nothing again.
    `restore`: TileLang's (its compiler callback); nothing to restore here."""
    global _depth
    with _lock:
        _depth = max(0, _depth - 1)


def is_enabled() -> bool:
    return _depth > 0


def enable_runtime_payloads() -> None:
    """Events parsed from now on record their payload values (`iket.payload`)."""
    global _runtime_payloads
    _runtime_payloads = True


def disable_runtime_payloads() -> None:
    """Events parsed from now on record no payload value (the events themselves still)."""
    global _runtime_payloads
    _runtime_payloads = False


def runtime_payloads_enabled() -> bool:
    return _runtime_payloads


def set_capacity(records: int) -> None:
    """Records one launch's log holds, for kernels parsed from now on; a launch's events
    past it are dropped and counted (`LaunchTrace.dropped`)."""
    global _capacity
    if isinstance(records, bool) or not isinstance(records, int) or not 1 <= records < 2**31:
        raise ValueError(f"iket capacity: expected a number of records from 1 to 2**31 - 1, got {records!r}")
    _capacity = records


def capacity() -> int:
    return _capacity


def _context():
    """What the JIT keys a kernel's parse on: None when instrumentation is off."""
    return ("iket", _runtime_payloads) if _depth > 0 else None


PARSE_CONTEXT.append(_context)


# ---- where traces go ----

def set_output_dir(path: str | os.PathLike | None) -> Path | None:
    """The directory traces (`<kernel>.trace.json`) are written to, created now; None: none."""
    global _output_dir
    if path is None:
        _output_dir = None
        return None
    _output_dir = Path(path).expanduser().absolute()
    _output_dir.mkdir(parents=True, exist_ok=True)
    return _output_dir


def output_dir(default: str | os.PathLike | None = None) -> Path | None:
    """The trace directory: set_output_dir's, else TEGULA_IKET_OUTPUT_DIR (or TileLang's
    TL_IKET_OUTPUT_DIR), else `default`, else None."""
    if _output_dir is not None:
        return _output_dir
    env_dir = os.environ.get("TEGULA_IKET_OUTPUT_DIR") or os.environ.get("TL_IKET_OUTPUT_DIR")
    chosen = env_dir or default
    return None if chosen is None else Path(chosen).expanduser().absolute()


def output_path(name: str, *, directory: str | os.PathLike | None = None) -> Path:
    """`name` inside the trace directory (output_dir(directory)), which is created."""
    base = output_dir(directory)
    if base is None:
        raise RuntimeError("iket.output_path: no output directory is set: pass directory=, open "
                           "iket.session(output_dir=...), or call iket.set_output_dir(path)")
    base.mkdir(parents=True, exist_ok=True)
    return base / name


def snapshot() -> tuple:
    return _runtime_payloads, _capacity, _output_dir


def restore(saved: tuple) -> None:
    global _runtime_payloads, _capacity, _output_dir
    _runtime_payloads, _capacity, _output_dir = saved
