"""TileLang's `carver.arch.driver`: properties of a CUDA device, read through torch
(tegula/device.py, which the language reads too). Each raises RuntimeError where no CUDA
device is visible (TileLang's fail there too)."""
from __future__ import annotations

from ...device import (get_cuda_device_properties, get_device_name, get_max_dynamic_shared_size_bytes, get_num_sms,
                       get_persisting_l2_cache_max_size, get_registers_per_block, get_shared_memory_per_block)

__all__ = ["get_cuda_device_properties", "get_device_name", "get_num_sms", "get_shared_memory_per_block",
           "get_max_dynamic_shared_size_bytes", "get_registers_per_block", "get_persisting_l2_cache_max_size"]
