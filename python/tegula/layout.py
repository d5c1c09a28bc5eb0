"""Layouts a kernel can ask for with `T.annotate_layout({buf: layout})`.

Only the kind travels to the IR (the `layout` attr of the annotate_layout tile op); the
C++ layout algebra (src/layout) builds the actual index map for the buffer's shape and
type during layout inference.
"""
from __future__ import annotations

from .frontend.values import BufferValue


class Layout:
    """A requested layout: a kind the C++ side knows, and the buffer it was made for."""

    __slots__ = ("kind", "buffer")

    KINDS = ("swizzled",)

    def __init__(self, kind: str, buffer: BufferValue):
        if kind not in self.KINDS:
            raise ValueError(f"unknown layout kind {kind!r} (known: {', '.join(self.KINDS)})")
        self.kind = kind
        self.buffer = buffer

    def __repr__(self):
        return f"Layout({self.kind}, {getattr(self.buffer, 'name', self.buffer)})"


def make_swizzled_layout(buffer, k_major: bool = True, allow_pad: bool = True) -> Layout:
    """The bank-conflict-free XOR swizzle for a shared-memory tile (TileLang's name).

    `k_major` and `allow_pad` are TileLang's knobs; Tegula derives the swizzle from the
    buffer's shape and type and the instruction that reads it, so they are accepted only
    so that TileLang kernels port unchanged."""
    if not isinstance(buffer, BufferValue):
        raise TypeError(f"make_swizzled_layout expects a buffer, got {type(buffer).__name__} {buffer!r}")
    if buffer.scope != "shared":
        raise TypeError(f"make_swizzled_layout: buffer {buffer.name} is in {buffer.scope} memory; "
                        "only shared-memory buffers are swizzled")
    return Layout("swizzled", buffer)
