"""`from tilelang.cuda.intrinsics import make_mma_swizzle_layout` (or from
`tilelang.cuda.intrinsics.layout.mma_layout`, its module in TileLang): the shared-memory
layout an MMA's operand tile is stored in, asked for with T.annotate_layout."""
from __future__ import annotations

from ...frontend.dtypes import itemsize
from ...layout import Layout, make_swizzled_layout


def make_mma_swizzle_layout(buffer, is_smooth: bool = False) -> Layout:
    """The XOR swizzle of a 2-D shared tile whose rows are a power of two (two or more) of
    16-byte chunks, as `T.layout.make_swizzled_layout`; any other tile keeps its
    row-major layout (TileLang then leaves it unswizzled too), and `is_smooth=True` asks
    for no swizzle. The layout only changes where the elements sit in shared memory, never
    the values a program computes."""
    layout = make_swizzled_layout(buffer)  # checks that it is a shared buffer
    shape = buffer.shape
    row = shape[-1] * itemsize(str(buffer.dtype)) if len(shape) == 2 and isinstance(shape[-1], int) else 0
    chunks = row // 16 if row % 16 == 0 else 0
    if is_smooth or chunks < 2 or chunks & (chunks - 1):
        return Layout(None, kind="row_major", buffer=buffer)
    return layout
