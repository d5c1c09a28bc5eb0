"""Aids for kernel authors: `plot_layout` (a picture of a fragment's or a shared buffer's
layout) and `Analyzer` (a kernel's FLOPs, bytes and resources from its lowered IR, and with
a measured time, its place on the roofline). Both import their heavy dependencies
(matplotlib) only when used."""
from __future__ import annotations

import importlib

_NAMES = {
    "plot_layout": "tegula.tools.layout_plot",
    "Analyzer": "tegula.tools.analyzer",
}

__all__ = list(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'tegula.tools' has no attribute {name!r}")
