"""Environment switches and the lazily imported native module.

`import tegula` must work on a machine without a GPU driver, and even before the
extension is built (for reading docs, or to run the pure-Python pieces), so the
native module `tegula._C` is imported on first use, never at package import.

Variables:
  TEGULA_TARGET     "sm_90a", "sm_80", ...: the target for target="auto"
  TEGULA_DUMP_IR    "1": print the IR of every pipeline stage when a kernel compiles
                    (read by `tegula._C.lower` itself)
  TEGULA_CACHE_DIR  read by the native cache (see `cache_dir()`)
  TEGULA_LOG        "compile" (or "all"): one line per compile stage on stderr, with its
                    time: parse, lowering passes, printing, index and cache lookups, NVRTC
  TEGULA_JIT_INDEX  "0": @jit calls always parse and lower (see tegula/jit_index.py)
  TEGULA_ENTRY_PLANS  "0": the entry points of tegula.kernels run their Python on every
                    call, never a recorded plan (kernels/_calls.py `planned`)
  TEGULA_ALL_REDUCE "nccl": a tensor-parallel model patched by tegula.integrations.transformers
                    all-reduces every partial sum through NCCL, never through torch's
                    symmetric memory (see integrations/_tensor_parallel.py `all_reduce`)
  TEGULA_CHECK_INDICES  "1": the kernels' entry points that take index tensors (block
                    tables, lengths, positions, offsets, expert ids) check them against
                    the tensors they index, each call (see `check_indices()`)
"""
from __future__ import annotations

import importlib
import os
import re
import sys

_native = None


def native():
    """The `tegula._C` module; ImportError with a build hint when it is missing."""
    global _native
    if _native is None:
        try:
            # By its full name: an extension module is no Python file, so an import graph
            # would read `from . import _C` as an import of the package's top.
            _C = importlib.import_module("tegula._C")
        except ImportError as err:
            raise ImportError(
                "tegula._C (the compiled core) is not available: build it with "
                "`pip install -e .` from the repository root"
            ) from err
        _register_device_library(_C)
        _native = _C
    return _native


def device_include_dir() -> str | None:
    """The device header library handed to NVRTC: the repository's kernels/include when
    the package runs from a checkout (the copy setup.py makes is only as fresh as the last
    build), else the copy shipped inside the package."""
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "..", "..", "kernels", "include"), os.path.join(here, "include")):
        if os.path.isdir(os.path.join(candidate, "tegula")):
            return os.path.normpath(candidate)
    return None


def _register_device_library(C) -> None:
    # Without headers only a build fails (and says so), never parsing or lowering.
    include = device_include_dir()
    if include is not None and hasattr(C, "set_device_library"):
        C.set_device_library(include)


def env_target() -> str | None:
    value = os.environ.get("TEGULA_TARGET", "").strip()
    return value or None


_TARGET_FORMS = (
    re.compile(r"^(sm_\d+a?)$"),
    re.compile(r"^cuda\s+.*-arch=(sm_\d+a?)\b"),
    re.compile(r"^cuda\s+.*-arch\s+(sm_\d+a?)\b"),
)

COMPILE_ONLY_TARGET = "sm_90a"


def target_text(target) -> str | None:
    """A target in any of TileLang's forms as the text Tegula reads: a string as it is, a
    dict `{"kind": "cuda", "arch": "sm_90"}` (TileLang 0.1.15's form of a target with
    attributes) or an object shaped like `tvm.target.Target` (`.kind.name`, `.attrs`) as
    "cuda" or "cuda -arch=sm_90"; None stays None."""
    if target is None or isinstance(target, str):
        return target
    if isinstance(target, dict):
        kind, attrs = target.get("kind"), target
    elif hasattr(target, "kind"):
        kind = getattr(target.kind, "name", target.kind)
        attrs = dict(getattr(target, "attrs", None) or {})
    else:
        raise ValueError(f"unknown target {target!r}: expected a string such as 'cuda' or 'sm_90a', "
                         "or a dict such as {'kind': 'cuda', 'arch': 'sm_90'}")
    if kind != "cuda":
        raise ValueError(f"unknown target {target!r}: Tegula compiles for kind 'cuda' only, got kind {kind!r}")
    arch = attrs.get("arch")
    return f"cuda -arch={arch}" if arch else "cuda"


def parse_target(target) -> str:
    """Explicit spellings to "sm_XX[a]"; ValueError for anything else."""
    text = target_text(target).strip()
    for form in _TARGET_FORMS:
        match = form.search(text)
        if match:
            return match.group(1)
    raise ValueError(
        f"unknown target {target!r}: expected 'auto', 'cuda', 'sm_80', 'sm_90a', 'sm_100a' "
        "or 'cuda -arch=sm_90'"
    )


def detect_arch() -> str | None:
    """The current GPU's target, or None when no driver/GPU can be seen."""
    C = native()
    try:
        if C.driver_available():
            return C.device_arch(_current_device())
    except Exception:  # a driver without a usable device: compile-only, like no driver
        pass
    return None


def _current_device() -> int:
    # torch's current device when torch has already set one up; 0 otherwise (asking
    # torch would initialise CUDA in this process just to learn the default).
    try:
        import torch

        if torch.cuda.is_initialized():
            return torch.cuda.current_device()
    except Exception:
        pass
    return 0


def resolve_target(target: str | None) -> tuple[str, bool]:
    """(concrete target, guessed). `guessed` is True when "auto" found no GPU and fell
    back to COMPILE_ONLY_TARGET: the kernel can be compiled and inspected, not launched."""
    target = target_text(target)
    if target is None or target.strip() in ("auto", "cuda"):
        chosen = env_target()
        if chosen:
            return parse_target(chosen), False
        arch = detect_arch()
        if arch:
            return arch, False
        return COMPILE_ONLY_TARGET, True
    return parse_target(target), False


def cache_dir() -> str:
    """Where compiled kernels are cached on disk."""
    return native().cache_dir()


def set_cache_enabled(enabled: bool) -> None:
    """Turn the kernel cache (memory and disk) on or off for this process."""
    native().set_cache_enabled(bool(enabled))


def log_enabled(topic: str = "compile") -> bool:
    """TEGULA_LOG names `topic` (a comma list), or is "1" / "all"."""
    value = os.environ.get("TEGULA_LOG", "").strip()
    return bool(value) and (value in ("1", "all") or topic in value.split(","))


def log_compile(kernel: str, stage: str, ms: float, detail: str = "") -> None:
    """One stage of a compile, in the format the C++ side prints too."""
    sys.stderr.write(f"tegula[compile] {kernel}: {stage:<14} {ms:8.1f} ms{'  ' + detail if detail else ''}\n")


_SWITCH_VALUES = {"": False, "0": False, "false": False, "no": False, "off": False,
                  "1": True, "true": True, "yes": True, "on": True}


def check_indices() -> bool:
    """TEGULA_CHECK_INDICES: whether the entry points that take index tensors check them
    (tegula/kernels/_index_checks.py), where a call does not say with check_indices=.
    Read on every such call, so a test or a debugging session can switch it at run time."""
    value = os.environ.get("TEGULA_CHECK_INDICES", "")
    on = _SWITCH_VALUES.get(value.strip().lower())
    if on is None:
        raise ValueError(f"TEGULA_CHECK_INDICES={value!r}: expected 1 (check) or 0 (do not), "
                         "or true/false, yes/no, on/off")
    return on


def _tegula_cache_dir() -> str:
    try:
        return cache_dir()
    except ImportError:  # no compiled core: the directory the native cache would choose
        return (os.environ.get("TEGULA_CACHE_DIR") or os.environ.get("TILELANG_CACHE_DIR")
                or os.path.expanduser("~/.cache/tegula"))


class Environment:
    """TileLang's `tilelang.env.env` (and the module attributes of `tilelang.env`): the
    settings TileLang programs read, with Tegula's values. `TILELANG_CACHE_DIR` is the
    directory Tegula caches kernels in, `TILELANG_TMP_DIR` a `tmp` folder in it (or the
    variable's value); other TILELANG_* names read the environment with TileLang's
    defaults. Setting an attribute fixes its value for the process, as in TileLang."""

    _DEFAULTS = {"TILELANG_PRINT_ON_COMPILATION": "1", "TILELANG_DISABLE_CACHE": "0",
                 "TILELANG_AUTO_TUNING_DISABLE_CACHE": "0", "TILELANG_DEFAULT_TARGET": "auto",
                 "TILELANG_PASS_PROFILE_THRESHOLD_MS": "0", "TILELANG_PASS_DIFF": "0"}

    def __init__(self):
        object.__setattr__(self, "_forced", {})

    def __getattr__(self, name: str):
        forced = self._forced
        if name in forced:
            return forced[name]
        if name == "TILELANG_CACHE_DIR":
            return _tegula_cache_dir()
        if name == "TILELANG_TMP_DIR":
            return os.environ.get("TILELANG_TMP_DIR") or os.path.join(self.TILELANG_CACHE_DIR, "tmp")
        if name in self._DEFAULTS:
            return os.environ.get(name, self._DEFAULTS[name])
        raise AttributeError(f"tegula.env has no setting {name!r}")

    def __setattr__(self, name: str, value):
        self._forced[name] = value

    def is_cache_enabled(self) -> bool:
        return bool(native().cache_disk_enabled())

    def enable_cache(self) -> None:
        set_cache_enabled(True)

    def disable_cache(self) -> None:
        set_cache_enabled(False)

    def is_autotune_cache_disabled(self) -> bool:
        return str(self.TILELANG_AUTO_TUNING_DISABLE_CACHE).lower() in ("1", "true", "yes", "on")

    def get_default_target(self):
        return self.TILELANG_DEFAULT_TARGET


env = Environment()


def __getattr__(name: str):
    # `tilelang.env.TILELANG_CACHE_DIR`: TileLang's module attributes read the settings.
    if name.startswith("TILELANG_"):
        return getattr(env, name)
    raise AttributeError(f"module 'tegula.env' has no attribute {name!r}")
