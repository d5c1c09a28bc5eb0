"""The test decorators and helpers of `tilelang.testing`, with TileLang's meaning.

    import tegula.testing                      # or: import tilelang.testing, through the port

    @tegula.testing.requires_cuda
    @tegula.testing.requires_cuda_compute_version_ge(9, 0)
    def test_wgmma(): ...

    if __name__ == "__main__":
        tegula.testing.main()                  # pytest on this file, with the command's arguments

A `requires_*` decorator adds pytest `skipif` marks, decided once when the module is
imported: `requires_cuda` skips without a CUDA GPU, `requires_cuda_compute_version(major,
minor, mode)` unless the current GPU's compute capability compares as `mode` says ("ge",
"gt", "le", "lt", "eq") against (major, minor), and requires a GPU too. The decorators of
TileLang's other backends (LLVM, Metal, ROCm and its CDNA and gfx950 GPUs) always skip:
Tegula compiles for CUDA only. pytest is imported on first use, not with the package.
"""
from __future__ import annotations

import functools
import inspect
import operator
import random
import sys

__all__ = [
    "requires_cuda", "requires_cuda_or_cdna", "requires_package", "requires_llvm", "requires_metal", "requires_rocm",
    "requires_cdna", "requires_gfx950", "requires_cuda_compute_version", "requires_cuda_compute_version_ge",
    "requires_cuda_compute_version_gt", "requires_cuda_compute_version_le", "requires_cuda_compute_version_lt",
    "requires_cuda_compute_version_eq", "set_random_seed", "main",
]

_COMPARE = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt, "eq": operator.eq}


@functools.lru_cache(maxsize=None)
def cuda_compute_version() -> tuple[int, int] | None:
    """The current GPU's (major, minor) compute capability; None without a CUDA GPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return tuple(torch.cuda.get_device_capability())
    except Exception:  # a broken driver is no GPU, as far as tests are concerned
        return None


class Requirement:
    """A decorator that skips a test (function or class) unless `available()` holds, usable
    as `@requirement` or `@requirement()`; `.marks()` gives its pytest marks, to combine."""

    def __init__(self, available, reason: str):
        self._available = available
        self.reason = reason

    def marks(self) -> list:
        import pytest

        return [pytest.mark.skipif(not self._available(), reason=self.reason)]

    def __call__(self, func=None):
        if func is None:
            return self
        return apply_marks(func, self.marks())


def apply_marks(func, marks):
    for mark in marks:
        func = mark(func)
    return func


def _never() -> bool:
    return False


requires_cuda = Requirement(lambda: cuda_compute_version() is not None, "needs a CUDA GPU, and none is visible")
requires_cuda_or_cdna = requires_cuda
requires_llvm = Requirement(_never, "TileLang's LLVM (CPU) target: Tegula compiles for CUDA only")
requires_metal = Requirement(_never, "TileLang's Metal backend: Tegula compiles for CUDA only")
requires_rocm = Requirement(_never, "TileLang's ROCm backend: Tegula compiles for CUDA only")
requires_cdna = Requirement(_never, "an AMD CDNA GPU (ROCm): Tegula compiles for CUDA only")
requires_gfx950 = Requirement(_never, "an AMD gfx950 GPU (ROCm): Tegula compiles for CUDA only")


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def requires_package(*packages: str):
    """Skips unless every named package imports."""
    import pytest

    marks = [pytest.mark.skipif(not _importable(p), reason=f"Cannot import '{p}'") for p in packages]
    return lambda func: apply_marks(func, marks)


def requires_cuda_compute_version(major_version: int, minor_version: int = 0, mode: str = "ge"):
    """Skips unless there is a CUDA GPU whose compute capability is `mode` (major, minor):
    `requires_cuda_compute_version(9)` runs on sm_90 and later."""
    if mode not in _COMPARE:
        raise ValueError(f"Invalid mode: {mode} (expected one of {', '.join(_COMPARE)})")
    import pytest

    wanted = (major_version, minor_version)
    have = cuda_compute_version() or (0, 0)
    wanted_text, have_text = ".".join(map(str, wanted)), ".".join(map(str, have))
    marks = [pytest.mark.skipif(not _COMPARE[mode](have, wanted),
                                reason=f"Requires CUDA compute {mode} {wanted_text}, but have {have_text}"),
             *requires_cuda.marks()]
    return lambda func: apply_marks(func, marks)


def _with_mode(mode: str):
    def requirement(major_version: int, minor_version: int = 0):
        return requires_cuda_compute_version(major_version, minor_version, mode=mode)

    requirement.__name__ = requirement.__qualname__ = f"requires_cuda_compute_version_{mode}"
    requirement.__doc__ = f"requires_cuda_compute_version(major_version, minor_version, mode={mode!r})"
    return requirement


requires_cuda_compute_version_ge = _with_mode("ge")
requires_cuda_compute_version_gt = _with_mode("gt")
requires_cuda_compute_version_le = _with_mode("le")
requires_cuda_compute_version_lt = _with_mode("lt")
requires_cuda_compute_version_eq = _with_mode("eq")


def set_random_seed(seed: int = 42) -> None:
    """Seeds Python's, NumPy's (when installed) and torch's generators, every GPU's too."""
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        np.random.seed(seed)
    import torch

    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def main():
    """Runs pytest on the calling file, with the command line's arguments, and exits with
    pytest's status."""
    import pytest

    caller = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([caller, *sys.argv[1:]]))
