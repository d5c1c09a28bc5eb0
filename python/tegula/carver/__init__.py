"""`tegula.carver`: the part of TileLang's `tilelang.carver` that programs read to pick
default configurations, the GPU's properties (`carver.arch.driver.get_num_sms()`,
`carver.arch.CUDA("cuda")`), and `carver.template.MatmulTemplate`, whose recommended
tilings come from a simple rule (template.py) rather than TileLang's cost-model search."""
from __future__ import annotations

from . import arch

__all__ = ["arch"]
