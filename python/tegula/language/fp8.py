"""`tilelang.language.fp8`: the 8-bit float type for a format name, as a kernel dtype or as
the torch dtype of the tensors a kernel takes.

    from tegula.language.fp8 import determine_fp8_type, determine_torch_fp8_type
    dtype = determine_fp8_type()              # T.float8_e4m3fn
    dtype = determine_fp8_type("e5m2")        # T.float8_e5m2
    tdtype = determine_torch_fp8_type()       # torch.float8_e4m3fn (T.fp8.determine_torch_fp8_type)

Tegula targets CUDA only, where the formats are the OCP ones (e4m3fn: no infinities, max
448; e5m2: max 57344); TileLang's ROCm answers (the fnuz variants) do not arise.
"""
from .types import DType, float8_e4m3fn, float8_e5m2

_FORMATS = {"e4m3": float8_e4m3fn, "e5m2": float8_e5m2}


def determine_fp8_type(fp8_format: str = "e4m3") -> DType:
    """The dtype of the 8-bit float format `fp8_format`, "e4m3" or "e5m2"."""
    if fp8_format not in _FORMATS:
        raise ValueError(f"determine_fp8_type: fp8_format must be 'e4m3' or 'e5m2' (got {fp8_format!r})")
    return _FORMATS[fp8_format]


def determine_torch_fp8_type(fp8_format: str = "e4m3"):
    """The torch dtype of the 8-bit float format `fp8_format`, "e4m3" (torch.float8_e4m3fn)
    or "e5m2" (torch.float8_e5m2)."""
    if fp8_format not in _FORMATS:
        raise ValueError(f"determine_torch_fp8_type: fp8_format must be 'e4m3' or 'e5m2' (got {fp8_format!r})")
    import torch

    return getattr(torch, _FORMATS[fp8_format].name)


__all__ = ["determine_fp8_type", "determine_torch_fp8_type"]
