"""Tegula: a JIT GPU-kernel engine with TileLang's language.

    import tegula                 # or: import tegula as tilelang
    import tegula.language as T

Importing needs neither a GPU driver nor, until a kernel is parsed, the compiled core.
"""
from __future__ import annotations

from . import language, layout
from .env import cache_dir, set_cache_enabled
from .frontend.errors import TegulaCompileError
from .jit import JITKernel, KernelParam, compile, jit
from .transform import PassConfigKey
from .math import cdiv, next_power_of_2
from .registers import RegisterPressureWarning

__version__ = "0.1.0"

__all__ = [
    "jit", "compile", "JITKernel", "KernelParam", "language", "layout", "profiler", "PassConfigKey",
    "TensorSupplyType", "TegulaCompileError", "autotune", "set_cache_enabled", "cache_dir", "__version__",
]
__all__ += ["cdiv", "next_power_of_2", "RegisterPressureWarning", "custom_op"]


def __getattr__(name: str):
    # profiler.py and autotuner.py are separate modules (and autotuner may not exist in
    # every build); load them on first use so `import tegula` stays light.
    import importlib

    if name == "custom_op":
        return importlib.import_module(".ops", __name__).custom_op
    if name == "profiler":
        return importlib.import_module(".profiler", __name__)
    if name == "TensorSupplyType":
        return importlib.import_module(".profiler", __name__).TensorSupplyType
    if name in ("autotune", "autotuner"):
        try:
            module = importlib.import_module(".autotuner", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.autotuner":
                raise
            raise AttributeError(f"tegula.{name} is not available: tegula/autotuner.py is missing") from None
        return module if name == "autotuner" else module.autotune
    raise AttributeError(f"module 'tegula' has no attribute {name!r}")
