"""`tilelang.carver.arch`: a CUDA GPU's properties, read through torch."""
from __future__ import annotations

from . import driver
from .cuda import CDNA, CUDA, get_arch

__all__ = ["driver", "CUDA", "CDNA", "get_arch"]
