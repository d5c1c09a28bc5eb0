"""Properties of the CUDA device, read through torch: what TileLang's
`carver.arch.driver` answers (tegula.carver re-exports these under that name) and what
T.PersistentTileScheduler reads for its default worker count. Each raises RuntimeError
where no CUDA device is visible (TileLang's fail there too)."""
from __future__ import annotations


def get_cuda_device_properties(device_id: int = 0):
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("tegula.carver.arch.driver: no CUDA device is visible (torch.cuda.is_available() is False)")
    return torch.cuda.get_device_properties(device_id)


def get_device_name(device_id: int = 0) -> str:
    return get_cuda_device_properties(device_id).name


def get_num_sms(device_id: int = 0) -> int:
    """The number of streaming multiprocessors: 132 on an H100 SXM."""
    return int(get_cuda_device_properties(device_id).multi_processor_count)


def _scaled(value: int, format: str) -> int:
    units = {"bytes": 1, "kb": 1024, "mb": 1024 * 1024}
    if format not in units:
        raise ValueError(f"format must be one of {tuple(units)}, got {format!r}")
    return int(value) // units[format]


def get_shared_memory_per_block(device_id: int = 0, format: str = "bytes") -> int:
    """Shared memory a block gets without opting in (48 KiB on NVIDIA GPUs)."""
    return _scaled(get_cuda_device_properties(device_id).shared_memory_per_block, format)


def get_max_dynamic_shared_size_bytes(device_id: int = 0, format: str = "bytes") -> int:
    """The most shared memory one block may opt in to (227 KiB on an H100)."""
    return _scaled(get_cuda_device_properties(device_id).shared_memory_per_block_optin, format)


def get_registers_per_block(device_id: int = 0) -> int:
    props = get_cuda_device_properties(device_id)
    return int(getattr(props, "regs_per_multiprocessor", 65536))


def get_persisting_l2_cache_max_size(device_id: int = 0) -> int:
    return int(getattr(get_cuda_device_properties(device_id), "L2_cache_size", 0))
