"""TileLang's CUDA-specific helpers that programs import by name (`tilelang.cuda.*`)."""
