"""TileLang's `tilelang.cuda.intrinsics.layout` package: its `mma_layout` module."""
