"""`from tilelang.cuda.intrinsics.layout.mma_layout import make_mma_swizzle_layout`: the
module TileLang keeps the function in (tegula.cuda.intrinsics defines it)."""
from .. import make_mma_swizzle_layout

__all__ = ["make_mma_swizzle_layout"]
