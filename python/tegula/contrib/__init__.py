"""TileLang's `tilelang.contrib` helpers that programs call around their kernels."""
