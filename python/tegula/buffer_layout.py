"""The layout each fragment and shared buffer of a compiled kernel got, as the passes chose
it: `JITKernel.layouts()` reads them off the lowered kernel (`Lowered.layouts()` in
tegula._C) into BufferLayouts, which tegula.tools.plot_layout draws (tools/layout_data.py
holds what a picture shows).

    kernel.layout_of("acc")   # BufferLayout(acc: fragment float32[128, 128], 128 threads x 128 registers, ...)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of `dtype` ("float16" -> 2, "bool" -> 1)."""
    name = str(dtype)
    if name == "bool":
        return 1
    bits = re.search(r"(\d+)", name)
    if not bits:
        raise ValueError(f"dtype {name!r}: cannot tell its size")
    return max(1, int(bits.group(1)) // 8)


@dataclass
class BufferLayout:
    """One buffer's layout in a compiled kernel (`kernel.layouts()`), as the passes chose it.

    fragment: `holders[e]` lists the (thread, register) of every copy of element e (row-major
    order); `threads` and `registers` are the layout's extents.
    shared: `offsets[e]` is element e's offset (in elements) from the buffer's start, as the
    generated code addresses it; `storage` is "plain", "swizzled" or "panelled"; a buffer
    stacked for a pipeline (`stored_shape` rows = stages x rows) shows its first stage.
    """

    name: str
    scope: str
    dtype: str
    shape: tuple
    threads: int = 0
    registers: int = 0
    description: str = ""
    holders: list | None = None
    storage: str = "plain"
    stored_shape: tuple = ()
    base: int = 0
    offsets: list | None = None

    @classmethod
    def from_native(cls, entry: dict) -> BufferLayout:
        """From one dict of tegula._C's `Lowered.layouts()`."""
        common = dict(name=entry["name"], scope=entry["scope"], dtype=entry["dtype"], shape=tuple(entry["shape"]))
        if entry["scope"] == "fragment":
            holders = [[] for _ in range(int(np.prod(common["shape"])))]
            for e, t, s in zip(entry["element"], entry["thread"], entry["slot"]):
                holders[e].append((t, s))
            for h in holders:
                h.sort()
            return cls(**common, threads=entry["threads"], registers=entry["slots"],
                       description=entry["layout"], holders=holders)
        return cls(**common, storage=entry["storage"], stored_shape=tuple(entry["stored_shape"]),
                   base=max(0, entry["base"]), offsets=list(entry.get("offsets", [])))

    @property
    def elem_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    def __repr__(self):
        if self.scope == "fragment":
            return (f"BufferLayout({self.name}: fragment {self.dtype}{list(self.shape)}, {self.threads} threads x "
                    f"{self.registers} registers, {self.description})")
        return f"BufferLayout({self.name}: shared {self.dtype}{list(self.shape)}, {self.storage})"
