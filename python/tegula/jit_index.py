"""The JIT's persistent index: a @tegula.jit call in a new process that was compiled before
gets its launchable kernel straight from the disk cache, without parsing or lowering.

The index is keyed before parsing, by everything the built program could depend on:

- the function's identity (module, qualified name, file, first line), its bound
  arguments (defaults applied) and the values its closure captured;
- the jit settings (out_idx, pass_configs) and the resolved target;
- the compiler: tegula's build stamp (C++ core and device headers), a stamp of tegula's
  own Python files, the NVRTC, Python and torch versions, and the TEGULA_* variables.

An entry holds the built program (tegula._C.Program.save: cubins, grid, parameter specs)
and the CUDA sources, and the Python files the construction read: the jit function's
file, every function called while it ran (found by a profile hook on that thread), every
prim_func and T.macro parsed, and the modules those files import from (so a constant
imported from another module counts). Before use, each file is checked: an unchanged
modification time and size, or else an unchanged SHA-256 of its content. Any doubt (a
file changed or missing, a value that cannot be keyed exactly, a profiler already
installed, an unreadable entry) means the normal path: parse, lower, compile.

What the index cannot see, it must not be trusted with: a kernel whose construction reads
mutable state at run time (a global changed by the program before the call, a device
property, an environment variable other than TEGULA_*) should pass that value as an
argument. TEGULA_JIT_INDEX=0 turns the index off; `tegula.set_cache_enabled(False)` does
too (it is part of the disk cache).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import struct
import sys
import sysconfig
import threading

import torch

from . import env
from .version import __version__

FORMAT = 1
_MAGIC = b"TGLJIT1\0"
_IGNORED_ENV = {"TEGULA_LOG", "TEGULA_CACHE_DIR", "TEGULA_DISABLE_CACHE", "TEGULA_JIT_INDEX"}
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_KERNELS_DIR = os.path.join(_PACKAGE_DIR, "kernels")
_SKIPPED_DIRS = tuple(os.path.normpath(d) + os.sep for d in {
    sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"],
    os.path.dirname(os.path.abspath(torch.__file__))})


def enabled() -> bool:
    if os.environ.get("TEGULA_JIT_INDEX", "1").strip() in ("0", "false", "off"):
        return False
    if os.environ.get("TEGULA_DUMP_IR", "0").strip() not in ("", "0"):
        return False  # the dump is printed while lowering: never skip it
    return env.native().cache_disk_enabled()


# ---- the key ----

_PRIMITIVES = (int, float, str, bool, bytes, complex, type(None), torch.dtype)


def _exact(value) -> bool:
    """True when repr(value) names the value exactly (so it can be keyed by text)."""
    if isinstance(value, (tuple, list)):
        return all(_exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _exact(v) for k, v in value.items())
    return type(value) in _PRIMITIVES


def _source_files(top: str, prefix: str = "") -> list:
    """"relative/path.py:mtime_ns:size" of every .py file under top, in name order
    (tegula's own code; kernels and __pycache__ left out)."""
    out = []
    with os.scandir(top) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in ("__pycache__", "kernels"):
                out.extend(_source_files(entry.path, prefix + entry.name + "/"))
        elif entry.name.endswith(".py"):
            st = entry.stat()
            out.append(f"{prefix}{entry.name}:{st.st_mtime_ns}:{st.st_size}")
    return out


def _make_stamp() -> str:
    C = env.native()
    return "\n".join([f"tegula {__version__}", C.build_id(), f"nvrtc {C.nvrtc_version_cached()}",
                      f"python {sys.version}", f"torch {torch.__version__}", *_source_files(_PACKAGE_DIR)])


class _Stamp:
    """What every entry depends on and one process cannot change, computed once. Its 125
    stat calls were a third of a disk-cache hit's first call in a new process, so the
    import starts it in a thread (the stat calls release the GIL) and the first key waits
    for it, by then long done."""

    def __init__(self):
        self._value = None
        self._lock = threading.Lock()
        self._thread = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._warm, name="tegula-jit-stamp", daemon=True)
        self._thread.start()

    def _warm(self) -> None:
        try:
            if enabled():
                self.get()
        except Exception:  # noqa: BLE001 - the first key computes it again and raises
            pass

    def get(self) -> str:
        with self._lock:
            if self._value is None:
                self._value = _make_stamp()
            return self._value


_STAMP = _Stamp()  # started by tegula/__init__.py, once TileLang's cache variables are read


def _compiler_stamp() -> str:
    return _STAMP.get()


def key_for(fn, bound_args, settings: dict, target: str, guessed: bool) -> str | None:
    """The index key of one call (hex), or None when it cannot be keyed exactly."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_filename.startswith("<"):
        return None
    closure = tuple(c.cell_contents for c in (fn.__closure__ or ()))
    if not _exact(list(bound_args)) or not _exact(closure):
        return None
    configs = {str(getattr(k, "value", k)): v for k, v in (settings.get("pass_configs") or {}).items()}
    if not _exact(configs) or not _exact(settings.get("out_idx")):
        return None
    variables = sorted((k, v) for k, v in os.environ.items() if k.startswith("TEGULA_") and k not in _IGNORED_ENV)
    text = "\n".join([
        f"tegula jit index v{FORMAT}", _compiler_stamp(),
        f"{fn.__module__}.{fn.__qualname__} {os.path.abspath(code.co_filename)}:{code.co_firstlineno}",
        repr(list(bound_args)), repr(closure), repr(settings.get("out_idx")), repr(sorted(configs.items())),
        f"{target} guessed={guessed}", repr(variables)])
    return hashlib.sha256(text.encode()).hexdigest()


def _entry_name(key: str) -> str:
    return "jit-" + key


# ---- dependencies ----

def _tracked(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    path = os.path.abspath(path)
    if path.startswith(_PACKAGE_DIR + os.sep) and not path.startswith(_KERNELS_DIR + os.sep):
        return False  # tegula's own code: in the compiler stamp
    return not path.startswith(_SKIPPED_DIRS)


class Tracker:
    """Records, on this thread, the files of every Python function called and of every
    source parsed while active. `ok` is False when another profiler was installed (the
    files could not be seen, so nothing may be recorded)."""

    def __init__(self):
        self.files: set = set()
        self.ok = True

    def _profile(self, frame, event, arg):
        if event == "call":
            self.files.add(frame.f_code.co_filename)

    def __enter__(self):
        from .frontend.prim_func import SOURCE_OBSERVERS

        self.ok = sys.getprofile() is None
        if self.ok:
            sys.setprofile(self._profile)
        SOURCE_OBSERVERS.append(self.files.add)
        return self

    def __exit__(self, *exc):
        from .frontend.prim_func import SOURCE_OBSERVERS

        if self.ok:
            sys.setprofile(None)
        SOURCE_OBSERVERS.remove(self.files.add)
        return False


def _module_files() -> dict:
    out = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path:
            out.setdefault(os.path.abspath(path), name)
    return out


def _imported_files(path: str, by_file: dict) -> set:
    """Files of the modules `path` imports from, one level deep."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return set()
    here = by_file.get(os.path.abspath(path), "")
    is_package = os.path.basename(path) == "__init__.py"
    package = here if is_package else here.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(parts + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    files = set()
    for name in names:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path:
            files.add(os.path.abspath(path))
    return files


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def dependencies(tracker: Tracker, fn) -> list | None:
    """[path, mtime_ns, size, sha256] of every file the construction depended on."""
    if not tracker.ok:
        return None
    seen = {os.path.abspath(f) for f in tracker.files if _tracked(f)}
    seen.add(os.path.abspath(fn.__code__.co_filename))
    by_file = _module_files()
    for path in list(seen):
        seen |= {f for f in _imported_files(path, by_file) if _tracked(f)}
    deps = []
    try:
        for path in sorted(seen):
            st = os.stat(path)
            deps.append([path, st.st_mtime_ns, st.st_size, _digest(path)])
    except OSError:
        return None
    return deps


def _unchanged(deps) -> bool:
    for path, mtime_ns, size, digest in deps:
        try:
            st = os.stat(path)
            if st.st_mtime_ns == mtime_ns and st.st_size == size:
                continue
            if st.st_size != size or _digest(path) != digest:
                return False
        except OSError:
            return False
    return True


# ---- entries ----

def store(key: str, deps: list, meta: dict, program) -> bool:
    """Writes the entry; False (and nothing written) when the program cannot be saved."""
    blob = program.save()
    if not blob:
        return False
    header = json.dumps({"format": FORMAT, "key": key, "deps": deps, "meta": meta}).encode()
    env.native().cache_put(_entry_name(key), _MAGIC + struct.pack("<Q", len(header)) + header + blob)
    return True


def lookup(key: str):
    """(meta, Program) of a valid, current entry; None otherwise."""
    C = env.native()
    data = C.cache_get(_entry_name(key))
    if data is None or not data.startswith(_MAGIC):
        return None
    try:
        (size,) = struct.unpack_from("<Q", data, len(_MAGIC))
        start = len(_MAGIC) + 8
        header = json.loads(data[start:start + size])
        if header.get("format") != FORMAT or header.get("key") != key or not _unchanged(header["deps"]):
            return None
        return header["meta"], C.load_program(data[start + size:])
    except Exception:  # noqa: BLE001 - a damaged entry is a miss, never an error
        return None
