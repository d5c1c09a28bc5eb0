"""`tegula.carver`: the part of TileLang's `tilelang.carver` that programs read to pick
default configurations, the GPU's properties (`carver.arch.driver.get_num_sms()`,
`carver.arch.CUDA("cuda")`). TileLang's roller and its templates, which search tile
sizes, are not here (docs/porting.md)."""
from __future__ import annotations

from . import arch

__all__ = ["arch"]
