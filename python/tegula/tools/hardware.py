"""The numbers a roofline needs: each GPU's peaks, each target's per-SM limits (for
occupancy), and the copy bandwidth measured on the GPU at hand.

Peaks are the datasheets' dense figures (no structured sparsity): fp16/bf16 tensor-core
TFLOP/s, fp32 CUDA-core TFLOP/s (a fused multiply-add counts 2) and HBM bandwidth. The
bandwidth a kernel can reach is nearer a device-to-device copy's than the datasheet's, so
the roofline's memory roof is a measured copy (bytes read + bytes written per second) when
one is given or can be measured, and the datasheet's figure only otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    arch: str                # the target whose limits apply: sm_80, sm_90a, sm_100a
    tensor_tflops: float     # dense fp16/bf16 tensor-core peak
    fp32_tflops: float       # fp32 CUDA-core peak
    hbm_gbs: float           # datasheet memory bandwidth, GB/s
    sms: int


DEVICES = {
    "H100 SXM": DeviceSpec("H100 SXM", "sm_90a", 989.5, 67.0, 3350.0, 132),
    "H200": DeviceSpec("H200 SXM", "sm_90a", 989.5, 67.0, 4800.0, 132),
    "A100": DeviceSpec("A100 SXM 80GB", "sm_80", 312.0, 19.5, 2039.0, 108),
    "B200": DeviceSpec("B200 (HGX, 1000 W)", "sm_100a", 2250.0, 75.0, 8000.0, 148),
}
# The device a target stands for when no device is named: the part it was built for.
_ARCH_DEVICE = {"sm_80": "A100", "sm_90": "H100 SXM", "sm_90a": "H100 SXM", "sm_100": "B200", "sm_100a": "B200"}


def device_spec(device=None, target: str | None = None) -> DeviceSpec:
    """A DeviceSpec from: a DeviceSpec; a key of DEVICES ("H100 SXM", "h200", "a100"...); a
    name as torch.cuda.get_device_name() gives it ("NVIDIA H100 80GB HBM3"); an arch
    ("sm_90a"); or None: the current GPU where there is one, else `target`'s part."""
    if isinstance(device, DeviceSpec):
        return device
    if device is None:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.get_device_name()
        elif target is not None:
            device = target
        else:
            raise ValueError("device: no GPU here and no target to take the peaks from; name a device "
                             f"({', '.join(DEVICES)}) or pass a DeviceSpec")
    if not isinstance(device, str):
        raise TypeError(f"device must be a DeviceSpec or a name, got {device!r}")
    text = device.strip()
    for key in DEVICES:
        if text.lower() == key.lower():
            return DEVICES[key]
    if text in _ARCH_DEVICE:
        return DEVICES[_ARCH_DEVICE[text]]
    upper = text.upper()
    if "H200" in upper:
        return DEVICES["H200"]
    if "H100" in upper and "PCIE" not in upper and "NVL" not in upper:
        return DEVICES["H100 SXM"]
    if "A100" in upper and "PCIE" not in upper and "40GB" not in upper:
        return DEVICES["A100"]
    if "B200" in upper:
        return DEVICES["B200"]
    raise ValueError(f"device {device!r}: no peak numbers for it; known devices: {', '.join(DEVICES)} (and the "
                     "arches sm_80, sm_90a, sm_100a); pass tegula.tools.analyzer.DeviceSpec(...) for another")


@dataclass(frozen=True)
class TargetLimits:
    """Per-SM resources of an architecture, as CUDA's occupancy calculator uses them."""

    arch: str
    smem_per_sm: int                 # bytes, the largest carve-out
    max_smem_per_block: int          # bytes, with the opt-in the launcher makes
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    registers_per_sm: int = 65536
    max_registers_per_block: int = 65536
    register_unit: int = 256         # a warp's registers are allocated in units of 256
    register_partitions: int = 4     # the register file is split between the SM's 4 schedulers
    smem_reserved_per_block: int = 1024
    smem_unit: int = 128

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // 32


TARGETS = {
    "sm_80": TargetLimits("sm_80", smem_per_sm=167936, max_smem_per_block=166912),
    "sm_90a": TargetLimits("sm_90a", smem_per_sm=233472, max_smem_per_block=232448),
    "sm_100a": TargetLimits("sm_100a", smem_per_sm=233472, max_smem_per_block=232448),
}
_TARGET_ALIASES = {"sm_90": "sm_90a", "sm_100": "sm_100a"}


def target_limits(arch: str) -> TargetLimits:
    key = _TARGET_ALIASES.get(arch, arch)
    if key not in TARGETS:
        raise ValueError(f"target {arch!r}: no occupancy limits for it; known: {', '.join(TARGETS)}")
    return TARGETS[key]


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    warps_per_sm: int
    fraction: float          # resident warps / the SM's maximum
    limited_by: str          # "threads", "registers", "shared memory" or "blocks"
    limits: dict             # each resource -> the blocks per SM it alone allows


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(limits: TargetLimits, threads: int, registers: int | None, smem_bytes: int) -> Occupancy:
    """Blocks of `threads` threads, `registers` per thread (None: not known, no limit) and
    `smem_bytes` of shared memory that one SM holds at once, by the occupancy calculator's
    rules: warps rounded up; registers per warp rounded up to the allocation unit and split
    over the register file's partitions; shared memory per block plus the 1 KiB the
    runtime reserves, rounded up to 128 bytes."""
    warps = -(-threads // 32)
    by = {"blocks": limits.max_blocks_per_sm, "threads": limits.max_warps_per_sm // warps}
    if registers:
        per_warp = _round_up(registers * 32, limits.register_unit)
        # The hardware's launch check assumes every partition gets a block's warps.
        assumed = per_warp * _round_up(warps, limits.register_partitions)
        if max(assumed, per_warp * warps) > limits.max_registers_per_block:
            by["registers"] = 0
        else:
            per_partition = limits.registers_per_sm // limits.register_partitions
            by["registers"] = (per_partition // per_warp) * limits.register_partitions // warps
    if smem_bytes > limits.max_smem_per_block:
        by["shared memory"] = 0
    else:
        by["shared memory"] = limits.smem_per_sm // _round_up(smem_bytes + limits.smem_reserved_per_block,
                                                            limits.smem_unit)
    order = ["threads", "registers", "shared memory", "blocks"]
    limited = min((k for k in order if k in by), key=lambda k: (by[k], order.index(k)))
    blocks = by[limited]
    return Occupancy(blocks, blocks * warps, blocks * warps / limits.max_warps_per_sm, limited, by)


_COPY_GBS: dict = {}


def measure_copy_bandwidth(device=None, nbytes: int = 1 << 30) -> float:
    """GB/s of a device-to-device copy of `nbytes` on a CUDA device (bytes read + bytes
    written, per second; L2 flushed before each timed copy), measured once per device and
    process."""
    import torch

    from ..bench import do_bench

    if not torch.cuda.is_available():
        raise RuntimeError("measure_copy_bandwidth needs a CUDA device (torch.cuda.is_available() is False here)")
    index = torch.device("cuda", torch.cuda.current_device() if device is None else device).index
    if index not in _COPY_GBS:
        with torch.cuda.device(index):
            src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
            dst = torch.empty_like(src)
            ms = do_bench(lambda: dst.copy_(src), return_mode="median")
            _COPY_GBS[index] = 2 * nbytes / (ms * 1e-3) / 1e9
            del src, dst
            torch.cuda.empty_cache()
    return _COPY_GBS[index]
