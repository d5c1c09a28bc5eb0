"""Arrays of other libraries as torch tensors, without a copy.

A kernel call (the C++ launcher) and the entry points take torch tensors; an argument that
is not one but exposes `__dlpack__` (CuPy, JAX, numba, NumPy...) or
`__cuda_array_interface__` (CuPy, numba, PyCUDA...) is viewed through `as_torch` first and
then checked like any tensor (dtype, shape, device, strides). Outputs stay torch tensors.

    import cupy
    x = cupy.ones((1024,), dtype=cupy.float16)
    z = kernel(x, y)         # x is torch.from_dlpack(x): same memory
"""
from __future__ import annotations

import torch


def as_torch(obj, name: str) -> torch.Tensor:
    """`obj` itself when it is a tensor; else a zero-copy view of it through DLPack or the
    CUDA array interface. TypeError naming the argument `name` for anything else."""
    if isinstance(obj, torch.Tensor):
        return obj
    if hasattr(obj, "__dlpack__"):
        try:
            return torch.from_dlpack(obj)
        except Exception as err:  # noqa: BLE001 - reported with the argument's name
            raise TypeError(f"argument '{name}': its __dlpack__ could not be read as a torch tensor "
                            f"({type(obj).__name__}: {err})") from err
    if hasattr(obj, "__cuda_array_interface__"):
        if not torch.cuda.is_available():
            raise ValueError(f"argument '{name}' is a CUDA array ({type(obj).__name__} with "
                             "__cuda_array_interface__) but torch sees no CUDA device")
        try:
            return torch.as_tensor(obj, device="cuda")
        except Exception as err:  # noqa: BLE001 - reported with the argument's name
            raise TypeError(f"argument '{name}': its __cuda_array_interface__ could not be read as a CUDA "
                            f"tensor ({type(obj).__name__}: {err})") from err
    raise TypeError(f"argument '{name}' must be a torch.Tensor or an array exposing __dlpack__ or "
                    f"__cuda_array_interface__, got {type(obj).__name__}")
