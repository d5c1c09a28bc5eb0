"""TileLang's `carver.arch.CUDA`: the properties of CUDA device 0 under TileLang's names."""
from __future__ import annotations

from ... import env
from . import driver


class CUDA:
    """`CUDA("cuda")`, `CUDA({"kind": "cuda", "arch": "sm_90"})`: the device's SM count
    (`compute_max_core`), shared memory (`smem_cap`), warp size and compute capability."""

    def __init__(self, target="cuda"):
        self.target = env.resolve_target(target)[0]
        props = driver.get_cuda_device_properties(0)
        self.name = props.name
        self.platform = "CUDA"
        self.sm_version = int(self.target[3:].rstrip("a"))
        self.compute_capability = f"{props.major}{props.minor}"
        self.compute_max_core = int(props.multi_processor_count)
        self.smem_cap = driver.get_shared_memory_per_block(0)
        self.max_smem_usage = 2 * self.smem_cap
        self.warp_size = int(getattr(props, "warp_size", 32))
        self.reg_cap = 65536
        self.sm_partition = 4
        self.l2_cache_size_bytes = int(getattr(props, "L2_cache_size", 0))
        self.transaction_size = [32, 128]
        self.bandwidth = [750, 12080]

    def __repr__(self):
        return f"CUDA({self.name}, {self.target})"


class CDNA:
    """TileLang's AMD device model: named so programs that choose between the two import;
    building one is an error, Tegula compiles for NVIDIA GPUs only."""

    def __init__(self, target="hip"):
        raise ValueError(f"tegula.carver.arch.CDNA({target!r}): AMD devices are not supported by Tegula")


def get_arch(target="cuda") -> CUDA:
    return CUDA(target)
