"""Tegula: a JIT GPU-kernel engine with TileLang's language.

    import tegula                 # or: import tegula as tilelang
    import tegula.language as T

Importing needs neither a GPU driver nor, until a kernel is parsed, the compiled core.
"""
from __future__ import annotations

import os as _os

from . import language, layout
from .env import cache_dir, set_cache_enabled
from .frontend.errors import TegulaCompileError
from .jit import JITKernel, KernelParam, compile, jit, lower, par_compile
from . import jit_eager as _jit_eager  # noqa: F401 - gives tegula.jit its eager form
from . import profiler  # gives JITKernel.get_profiler its Profiler
from .profiler import TensorSupplyType
from .tools import layout_plot as _layout_plot  # noqa: F401 - gives JITKernel.plot_layout its drawing
from .transform import PassConfigKey
from .math import cdiv, next_power_of_2
from .registers import RegisterPressureWarning
from .version import __version__

# A program ported by its imports keeps its setup: TileLang's cache variables name Tegula's
# where Tegula's are not set (the native cache reads them at its first use, after this).
for _theirs, _ours in (("TILELANG_CACHE_DIR", "TEGULA_CACHE_DIR"), ("TILELANG_DISABLE_CACHE", "TEGULA_DISABLE_CACHE")):
    if _os.environ.get(_theirs) and not _os.environ.get(_ours):
        _os.environ[_ours] = _os.environ[_theirs]

# The JIT index's stamp of this installation, computed while the program goes on importing
# and making its tensors (a disk-cache hit's first call then finds it ready).
from . import jit_index as _jit_index  # noqa: E402

_jit_index._STAMP.start()

__all__ = [
    "jit", "compile", "lower", "JITKernel", "KernelParam", "language", "layout", "profiler", "PassConfigKey",
    "TensorSupplyType", "TegulaCompileError", "autotune", "set_cache_enabled", "cache_dir", "__version__",
]
__all__ += ["par_compile", "cdiv", "next_power_of_2", "RegisterPressureWarning", "custom_op"]
__all__ += ["enable_cache", "disable_cache", "is_cache_enabled", "DataType", "set_log_level"]


def DataType(value) -> "language.dtype":  # noqa: N802 - TileLang's (TVM's) name
    """A dtype from any spelling, with `.bits`, `.lanes` and `.itemsize`:
    `DataType("float16").bits == 16`."""
    return language.dtype(value)


def set_log_level(level) -> None:
    """TileLang's logging switch: Tegula's compile log goes to stderr at "DEBUG" or "INFO"
    (the level names of `logging`, or their numbers) and is off above them."""
    import logging

    number = logging.getLevelName(level.upper()) if isinstance(level, str) else int(level)
    if not isinstance(number, int):
        raise ValueError(f"set_log_level: unknown level {level!r} (DEBUG, INFO, WARNING, ERROR)")
    if number <= logging.INFO:
        _os.environ["TEGULA_LOG"] = "compile"
    else:
        _os.environ.pop("TEGULA_LOG", None)


def enable_cache() -> None:
    """TileLang's name for `set_cache_enabled(True)`."""
    set_cache_enabled(True)


def disable_cache() -> None:
    """TileLang's name for `set_cache_enabled(False)`: kernels are compiled again rather
    than read from the disk cache (a kernel already built in this process is reused)."""
    set_cache_enabled(False)


def is_cache_enabled() -> bool:
    """Whether compiled kernels are read from and written to the disk cache: False after
    `disable_cache()`, with TEGULA_DISABLE_CACHE (or TILELANG_DISABLE_CACHE) set, or when
    there is no cache directory."""
    from .env import native

    return bool(native().cache_disk_enabled())


def __getattr__(name: str):
    # ops.py (custom_op) and autotuner.py (which may not exist in every build) load on
    # first use, so that `import tegula` stays light.
    import importlib

    if name == "custom_op":
        return importlib.import_module(".ops", __name__).custom_op
    if name in ("autotune", "autotuner"):
        try:
            module = importlib.import_module(".autotuner", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.autotuner":
                raise
            raise AttributeError(f"tegula.{name} is not available: tegula/autotuner.py is missing") from None
        return module if name == "autotuner" else module.autotune
    raise AttributeError(f"module 'tegula' has no attribute {name!r}")
