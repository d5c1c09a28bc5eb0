"""`tilelang.carver.roller`: only the names a program reads off a hint (`Hint`, the
rasterization plans); TileLang's cost-model search itself is not in Tegula."""
from __future__ import annotations

from .hint import Hint
from .rasterization import NoRasterization, Rasterization, Rasterization2DColumn, Rasterization2DRow

__all__ = ["Hint", "Rasterization", "NoRasterization", "Rasterization2DRow", "Rasterization2DColumn"]
