"""A compiled kernel's work and resources, read from its lowered IR, and with a measured
time its place on the roofline (TileLang's `tilelang.tools.Analyzer`, counted exactly).

    kernel = matmul(4096, 4096, 4096)                    # a JITKernel
    result = Analyzer.analysis(kernel)                   # static shapes: nothing else needed
    result = Analyzer(rms_kernel, x, w, y).calculate()   # tensors (or their shapes) give T.dynamic sizes
    result = Analyzer(rms_kernel, m=32768).calculate()   # ... or name them
    result = kernel.get_profiler().roofline()            # timed on the GPU, with the time
    print(result)                                        # the table; result.bound, result.peak_fraction...

What is counted, over every block of the grid and every kernel of the program
(tensor-core FLOPs, CUDA-core FLOPs, bytes loaded and stored), and the exact rules, are in
the compiler's analysis src/analysis/work_counts.h, which reads the lowered IR itself
(`Lowered.count_work`); this module presents its numbers. Bytes come two ways:

- accessed (`load_bytes`, `store_bytes`): every access each block makes of a global
  tensor, what the SMs ask of the memory system; a tile that many blocks read (a GEMM
  operand panel, a weight row, the keys every query tile visits) counts for each.
- DRAM (`dram_load_bytes`, `dram_store_bytes`, `dram_bytes`): each tensor's accessed bytes
  capped at the tensor's size, per kernel and direction: the traffic left when every
  re-read is served by L2, i.e. the compulsory traffic. It is exact when each tensor is
  either read (written) whole or no element of it twice, as in the shipped kernels; the
  roofline uses it (arithmetic intensity, memory time, GB/s).

Besides: shared memory per block (the lowered kernel's plan), threads per
block (the launch's, a warp-specialised producer included), registers per thread (what
ptxas allocated, read from the cubin; the fragments' estimate of tegula.registers beside
it) and occupancy from those for the target's per-SM limits (hardware.py).

With a device (its datasheet peaks, hardware.DEVICES) the result gives the arithmetic
intensity (FLOPs per byte), the roofline time (the larger of compute at peak and bytes at
the memory roof; tensor-core and CUDA-core work overlap, so the compute time is the larger
of theirs), the ridge point and the bound: memory when the bytes take longer at the memory
roof than the FLOPs at peak. The memory roof is a copy bandwidth: given, or measured on the
GPU by a device-to-device copy when timing there, else the datasheet's HBM figure. With a
time, the fractions of peak: compute (tensor and CUDA-core separately, and together), of
copy bandwidth, and `peak_fraction`, the share of the binding roof the kernel reaches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from . import hardware
from .hardware import DEVICES, DeviceSpec, Occupancy, TargetLimits  # noqa: F401 - re-exported

__all__ = ["Analyzer", "AnalysisResult", "KernelAnalysis", "Counts", "count", "DeviceSpec", "DEVICES", "TargetLimits", "Occupancy"]

STAGE = "expand_tile_ops"   # the IR stage the count reads (src/analysis/work_counts.h says why)
DENSE_LIMIT = 1 << 22       # nest points enumerated per count before evenly spaced blocks stand for the rest


@dataclass(frozen=True)
class Counts:
    """One kernel's work over its whole grid, as the compiler's analysis counts it."""

    tensor_flops: int
    cuda_flops: int
    loads: dict     # global tensor -> bytes loaded
    stores: dict    # global tensor -> bytes stored
    sizes: dict     # global tensor -> its bytes
    notes: tuple    # where the count estimated or assumed
    grid: tuple


def count(lowered, values=None, data=None, stage=STAGE, per_thread=False) -> Counts:
    """The work of `lowered` (a tegula._C.Lowered) at IR `stage` (work_counts.h): values,
    dynamic sizes and scalar parameters by name; data, tensor name -> a function giving its
    contents (a numpy array) or None where only its shape is known. per_thread counts a
    per-thread stage ("final") thread by thread. A kernel the count cannot follow raises
    ValueError naming the statement."""
    c = lowered.count_work(stage, values or {}, data or {}, per_thread, DENSE_LIMIT)
    return Counts(c["tensor_flops"], c["cuda_flops"], c["loads"], c["stores"], c["sizes"], tuple(sorted(c["notes"])),
                  tuple(c["grid"]))


@dataclass(frozen=True)
class KernelAnalysis:
    """One `with T.Kernel` block of a program, over its whole grid."""

    name: str
    grid: tuple
    threads: int
    smem_bytes: int
    registers: int | None            # per thread, as ptxas allocated them (None: not compiled)
    fragment_registers: int | None   # tegula.registers' estimate of the fragments' peak
    tensor_flops: int
    cuda_flops: int
    loads: dict                      # global tensor -> bytes loaded (accessed)
    stores: dict                     # global tensor -> bytes stored (accessed)
    tensor_bytes: dict               # global tensor -> its size in bytes
    occupancy: Occupancy | None
    notes: tuple = ()

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def load_bytes(self) -> int:
        return sum(self.loads.values())

    @property
    def store_bytes(self) -> int:
        return sum(self.stores.values())

    @property
    def dram_load_bytes(self) -> int:
        return sum(min(n, self.tensor_bytes[t]) for t, n in self.loads.items())

    @property
    def dram_store_bytes(self) -> int:
        return sum(min(n, self.tensor_bytes[t]) for t, n in self.stores.items())


def _ratio(a, b):
    if b:
        return a / b
    return math.inf if a else 0.0


@dataclass(frozen=True)
class AnalysisResult:
    name: str
    target: str
    kernels: tuple
    time_ms: float | None = None
    device: DeviceSpec | None = None
    copy_gbs: float | None = None        # the memory roof, GB/s
    copy_source: str = ""                # "given", "measured" or "datasheet"
    notes: tuple = field(default=())

    # ---- totals over the kernels ----
    @property
    def tensor_flops(self) -> int:
        return sum(k.tensor_flops for k in self.kernels)

    @property
    def cuda_flops(self) -> int:
        return sum(k.cuda_flops for k in self.kernels)

    @property
    def flops(self) -> int:
        return self.tensor_flops + self.cuda_flops

    @property
    def load_bytes(self) -> int:
        return sum(k.load_bytes for k in self.kernels)

    @property
    def store_bytes(self) -> int:
        return sum(k.store_bytes for k in self.kernels)

    @property
    def accessed_bytes(self) -> int:
        return self.load_bytes + self.store_bytes

    @property
    def dram_load_bytes(self) -> int:
        return sum(k.dram_load_bytes for k in self.kernels)

    @property
    def dram_store_bytes(self) -> int:
        return sum(k.dram_store_bytes for k in self.kernels)

    @property
    def dram_bytes(self) -> int:
        return self.dram_load_bytes + self.dram_store_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of DRAM traffic (dram_bytes)."""
        return _ratio(self.flops, self.dram_bytes)

    # TileLang's names (its counts are per tile copy, as load_bytes + store_bytes here)
    @property
    def total_flops(self) -> int:
        return self.flops

    @property
    def total_global_bytes(self) -> int:
        return self.accessed_bytes

    @property
    def estimated_time(self) -> float:
        """The roofline time in seconds."""
        return self.roofline_ms * 1e-3

    # ---- the roofline (needs a device) ----
    def _need_device(self) -> DeviceSpec:
        if self.device is None:
            raise ValueError(f"{self.name}: no device: use result.with_time(time_ms, device=...) or "
                             "Analyzer.calculate(device=...)")
        return self.device

    @property
    def compute_ms(self) -> float:
        """The FLOPs at peak: tensor-core and CUDA-core work overlap, so the larger of the two."""
        d = self._need_device()
        return max(self.tensor_flops / (d.tensor_tflops * 1e9), self.cuda_flops / (d.fp32_tflops * 1e9))

    @property
    def memory_ms(self) -> float:
        """The DRAM bytes at the memory roof (copy bandwidth)."""
        self._need_device()
        return self.dram_bytes / (self.copy_gbs * 1e6)

    @property
    def roofline_ms(self) -> float:
        """The least time the roofline allows (TileLang's estimated_time, in ms)."""
        return max(self.compute_ms, self.memory_ms)

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which this kernel's compute roof meets the memory roof: its FLOP
        mix at peak over the copy bandwidth."""
        d = self._need_device()
        peak = self.flops / (self.compute_ms * 1e-3) if self.flops else d.fp32_tflops * 1e12
        return peak / (self.copy_gbs * 1e9)

    @property
    def bound(self) -> str:
        """"compute" when the FLOPs at peak take at least as long as the bytes at the memory
        roof (arithmetic intensity at or past the ridge), else "memory"."""
        return "compute" if self.flops and self.compute_ms >= self.memory_ms else "memory"

    # ---- measured (needs a time) ----
    def _seconds(self) -> float:
        if self.time_ms is None:
            raise ValueError(f"{self.name}: no measured time: use profiler.roofline() or result.with_time(ms)")
        return self.time_ms * 1e-3

    @property
    def tflops(self) -> float:
        return self.flops / self._seconds() / 1e12

    @property
    def gbs(self) -> float:
        """DRAM bytes per second."""
        return self.dram_bytes / self._seconds() / 1e9

    @property
    def tensor_fraction(self) -> float:
        return self.tensor_flops / self._seconds() / (self._need_device().tensor_tflops * 1e12)

    @property
    def cuda_fraction(self) -> float:
        return self.cuda_flops / self._seconds() / (self._need_device().fp32_tflops * 1e12)

    @property
    def compute_fraction(self) -> float:
        """The FLOPs' time at peak over the measured time."""
        return self.compute_ms / self.time_ms if self._seconds() else 0.0

    @property
    def bandwidth_fraction(self) -> float:
        """DRAM bytes per second over the copy bandwidth."""
        return self.memory_ms / self.time_ms if self._seconds() else 0.0

    @property
    def hbm_fraction(self) -> float:
        return self.gbs / self._need_device().hbm_gbs

    @property
    def peak_fraction(self) -> float:
        """The share of the binding roof reached: compute_fraction when compute bound,
        bandwidth_fraction when memory bound."""
        return self.roofline_ms / self.time_ms if self._seconds() else 0.0

    # ---- building ----
    def with_time(self, time_ms=None, device=None, copy_bandwidth=None) -> AnalysisResult:
        """The same counts with a measured time (ms), a device and a copy bandwidth (GB/s).
        device: see hardware.device_spec (None: this GPU, else the target's part).
        copy_bandwidth: None measures it on the GPU when a time is given there, else takes
        the datasheet's HBM figure."""
        if time_ms is not None and (isinstance(time_ms, bool) or not isinstance(time_ms, (int, float))
                                    or not time_ms > 0):
            raise ValueError(f"time_ms must be a positive number of milliseconds, got {time_ms!r}")
        time_ms = None if time_ms is None else float(time_ms)
        try:
            spec = hardware.device_spec(device if device is not None else self.device, target=self.target)
        except ValueError as err:
            if device is not None or self.device is not None:
                raise
            # This GPU has no peak numbers: the counts and the measured rates stand alone.
            return replace(self, time_ms=time_ms, device=None, copy_gbs=None, copy_source="",
                           notes=tuple(dict.fromkeys(self.notes + (f"{err}; no roofline",))))
        if copy_bandwidth is not None:
            if isinstance(copy_bandwidth, bool) or not isinstance(copy_bandwidth, (int, float)) \
                    or not copy_bandwidth > 0:
                raise ValueError(f"copy_bandwidth must be a positive number of GB/s, got {copy_bandwidth!r}")
            gbs, source = float(copy_bandwidth), "given"
        elif self.copy_source in ("given", "measured") and spec == self.device:
            gbs, source = self.copy_gbs, self.copy_source
        elif time_ms is not None and _is_this_gpu(spec):
            gbs, source = hardware.measure_copy_bandwidth(), "measured"
        else:
            gbs, source = spec.hbm_gbs, "datasheet"
        return replace(self, time_ms=time_ms, device=spec, copy_gbs=gbs, copy_source=source)

    @classmethod
    def combine(cls, results, name=None) -> AnalysisResult:
        """One result for several programs launched together (e.g. a split kernel and its
        combine kernel): their kernels side by side; time and device are set afterwards."""
        results = list(results)
        if not results:
            raise ValueError("combine: no results given")
        targets = {r.target for r in results}
        if len(targets) != 1:
            raise ValueError(f"combine: results of different targets {sorted(targets)}")
        return cls(name or " + ".join(r.name for r in results), results[0].target,
                   tuple(k for r in results for k in r.kernels),
                   notes=tuple(dict.fromkeys(n for r in results for n in r.notes)))

    # ---- text ----
    def summary(self) -> str:
        return _summary(self)

    def __str__(self):
        return self.summary()


def _is_this_gpu(spec: DeviceSpec) -> bool:
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        return hardware.device_spec(torch.cuda.get_device_name()) == spec
    except ValueError:
        return False


# ---- the table ----

def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _occupancy_text(k: KernelAnalysis) -> str:
    o = k.occupancy
    if o is None:
        return "-"
    return f"{o.blocks_per_sm}/SM {o.fraction:.0%} ({o.limited_by})"


def _summary(r: AnalysisResult) -> str:
    head = f"{r.name} ({r.target}" + (f", {r.device.name}" if r.device else "") + \
        f"): {len(r.kernels)} kernel{'s' if len(r.kernels) != 1 else ''}"
    columns = ("kernel", "grid", "threads", "smem", "regs", "occupancy", "tensor FLOP", "CUDA FLOP", "loaded",
               "stored", "DRAM")
    rows = [(k.name, "x".join(map(str, k.grid)), str(k.threads), _si(k.smem_bytes, "B"),
             "-" if k.registers is None else str(k.registers), _occupancy_text(k), _si(k.tensor_flops, ""),
             _si(k.cuda_flops, ""), _si(k.load_bytes, "B"), _si(k.store_bytes, "B"),
             _si(k.dram_load_bytes + k.dram_store_bytes, "B")) for k in r.kernels]
    if len(r.kernels) > 1:
        rows.append(("total", "", "", "", "", "", _si(r.tensor_flops, ""), _si(r.cuda_flops, ""),
                     _si(r.load_bytes, "B"), _si(r.store_bytes, "B"), _si(r.dram_bytes, "B")))
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]

    def line(cells):
        return "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    lines = [head, line(columns)] + [line(row) for row in rows]
    lines.append(f"  arithmetic intensity {r.arithmetic_intensity:.3g} FLOP/B of DRAM traffic (loaded and stored: "
                 "every block's accesses; DRAM: each tensor's capped at its size)")
    if r.device is not None:
        d = r.device
        lines.append(f"  roofs: {d.tensor_tflops:g} TFLOP/s tensor, {d.fp32_tflops:g} TFLOP/s fp32, "
                     f"{r.copy_gbs:.0f} GB/s ({r.copy_source} copy bandwidth); ridge {r.ridge:.3g} FLOP/B "
                     f"-> {r.bound} bound; roofline time {r.roofline_ms:.4g} ms")
        if r.time_ms is not None:
            lines.append(f"  measured {r.time_ms:.4g} ms: {r.tflops:.3g} TFLOP/s ({r.tensor_fraction:.1%} of tensor "
                         f"peak, {r.cuda_fraction:.1%} of fp32 peak), {r.gbs:.0f} GB/s "
                         f"({r.bandwidth_fraction:.1%} of copy bandwidth); {r.peak_fraction:.1%} of the "
                         f"{r.bound} roof")
    elif r.time_ms is not None:
        lines.append(f"  measured {r.time_ms:.4g} ms: {r.tflops:.3g} TFLOP/s, {r.gbs:.0f} GB/s of DRAM traffic")
    for note in dict.fromkeys(r.notes + tuple(n for k in r.kernels for n in k.notes)):
        lines.append(f"  note: {note}")
    return "\n".join(lines)


# ---- the analyzer ----

def _as_kernel(kernel_or_program, target):
    from ..frontend.prim_func import PrimFunc
    from ..jit import JITKernel, compile

    if isinstance(kernel_or_program, JITKernel):
        if target is not None and target != kernel_or_program.target:
            raise ValueError(f"target {target!r}: the kernel was compiled for {kernel_or_program.target}; "
                             "compile it for that target instead")
        return kernel_or_program
    if isinstance(kernel_or_program, PrimFunc):
        return compile(kernel_or_program, target=target or "auto")
    raise TypeError("Analyzer expects a compiled kernel (tegula.jit / tegula.compile) or a T.prim_func, got "
                    f"{type(kernel_or_program).__name__}")


def _device_argument(args):
    """(args without it, the device) when one of `args` is a device model (TileLang's
    `carver.arch.CUDA`: a `platform`, a `name` and a `target`), else (args, None)."""
    devices = [a for a in args if getattr(a, "platform", None) == "CUDA" and hasattr(a, "target")]
    if not devices:
        return args, None
    if len(devices) > 1:
        raise TypeError(f"Analyzer.analysis: {len(devices)} devices given, expected one")
    return tuple(a for a in args if a is not devices[0]), devices[0]


def _shape_of(name, value):
    if hasattr(value, "shape"):
        return tuple(int(d) for d in value.shape)
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        return tuple(value)
    raise TypeError(f"Analyzer: argument '{name}' must be a tensor, an array or a shape (a tuple of ints), "
                    f"got {type(value).__name__}")


def _contents(value):
    """A function returning the argument's values as a numpy array, or None for a shape."""
    if not hasattr(value, "shape"):
        return lambda: None
    cache = []

    def get():
        if not cache:
            import numpy as np

            v = value.detach().cpu() if hasattr(value, "detach") else value
            cache.append(np.asarray(v))
        return cache[0]

    return get


class Analyzer:
    """The counts of a compiled kernel (a JITKernel, or a T.prim_func compiled for `target`).

    args: the kernel's inputs (as a call takes them) or all its parameters, each a tensor,
    an array or a shape; they give the T.dynamic sizes, the scalar parameters and, for a
    kernel whose loop bounds or indices read a tensor (sequence lengths, a block table),
    that tensor's values. sizes: dynamic sizes by name (m=4096). compile: read registers
    per thread from the cubin (NVRTC, through the cache); False leaves registers out of
    occupancy."""

    def __init__(self, kernel, *args, target=None, compile=True, **sizes):  # noqa: A002 - the flag's plain name
        self.kernel = _as_kernel(kernel, target)
        self.values, self.data = self._bind(args, sizes)
        self.kernels = tuple(self._analyze(i, compile) for i in range(self.kernel.num_kernels))

    @classmethod
    def analysis(cls, kernel_or_program, *args, time_ms=None, device=None, copy_bandwidth=None, target=None,
                 compile=True, **sizes) -> AnalysisResult:  # noqa: A002
        """TileLang's one-call form: the counts, with the device's roofs (and the time).
        As in TileLang, the device may come positionally after the kernel:
        `Analyzer.analysis(program, CUDA("cuda"))` (a tegula.carver.arch device)."""
        args, found = _device_argument(args)
        if found is not None:
            if device is not None:
                raise TypeError("Analyzer.analysis: the device is given twice (positionally and as device=)")
            device = found.name
            target = target or found.target
        return cls(kernel_or_program, *args, target=target, compile=compile, **sizes).calculate(
            time_ms=time_ms, device=device, copy_bandwidth=copy_bandwidth)

    def calculate(self, time_ms=None, device=None, copy_bandwidth=None) -> AnalysisResult:
        """The result: counts, with the device's roofs, and the fractions of peak when a
        measured `time_ms` is given (see AnalysisResult.with_time)."""
        name = self.kernel.__dict__.get("_name") or self.kernel.prim_func.name
        return AnalysisResult(name, self.kernel.target, self.kernels).with_time(time_ms, device, copy_bandwidth)

    # ---- arguments ----
    def _bind(self, args, sizes):
        k = self.kernel
        params = list(k.params)
        if len(args) == len(params):
            pairs = list(zip(params, args))
        elif len(args) == k.num_inputs:
            pairs = list(zip([p for p in params if not p.is_output], args))
        elif not args:
            pairs = []
        else:
            inputs = ", ".join(p.name for p in params if not p.is_output)
            raise TypeError(f"Analyzer: kernel {k.prim_func.name} takes its {k.num_inputs} inputs ({inputs}) or all "
                            f"{len(params)} parameters, got {len(args)} arguments")
        values, data, shapes = {}, {}, {}
        for p, value in pairs:
            if p.is_scalar:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"Analyzer: argument '{p.name}' is a scalar parameter, got {value!r}")
                values[p.name] = value
                continue
            shape = _shape_of(p.name, value)
            if len(shape) != len(p.shape) or any(d is not None and d != s for d, s in zip(p.shape, shape)):
                want = tuple("dynamic" if d is None else d for d in p.shape)
                raise ValueError(f"Analyzer: argument '{p.name}' must have shape {want}, got {shape}")
            shapes[p.name] = shape
            data[p.name] = _contents(value)
        for p in params:  # a tensor not given has no known values (a workspace is not a parameter)
            if not p.is_scalar:
                data.setdefault(p.name, lambda: None)
        sizes_of = k._lowered_all[0].dynamic_sizes()
        dynamic, dims = sizes_of["names"], sizes_of["dims"]
        for name, size in sizes.items():
            if name not in dynamic:
                raise TypeError(f"Analyzer: {name}={size!r} names no dynamic size of kernel {sizes_of['kernel']} "
                                f"(its dynamic sizes: {', '.join(dynamic) or 'none'})")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise ValueError(f"Analyzer: {name} must be a non-negative int, got {size!r}")
            values[name] = size
        for pname, names in dims.items():
            if pname not in shapes:
                continue
            for axis, var in enumerate(names):
                if var is not None:
                    got = shapes[pname][axis]
                    if values.setdefault(var, got) != got:
                        raise ValueError(f"Analyzer: dynamic size '{var}' is {values[var]} elsewhere, but dimension "
                                         f"{axis} of '{pname}' is {got}")
        for var in dynamic:
            if var not in values:
                where = next((f"dimension {a} of '{n}'" for n, names in dims.items() for a, d in enumerate(names)
                              if d == var), "a dimension")
                raise ValueError(f"Analyzer: kernel {sizes_of['kernel']} has the dynamic size '{var}' ({where}): pass "
                                 f"that tensor (or its shape) or {var}=<int>")
        return values, data

    # ---- one T.Kernel ----
    def _counted_lowering(self, index):
        """The lowered kernel whose IR is counted: the kernel's own, or, where its copies
        became bulk tensor copies, the same program lowered without them (work_counts.h)."""
        lowered = self.kernel._lowered_all[index]
        if not getattr(lowered, "tensor_maps", 0):
            return lowered
        from .. import env

        options = dict(self.kernel.options, disable_tma=True)
        return env.native().lower(self.kernel.prim_func.kernels[index], self.kernel.target, options)

    def _analyze(self, index, compile_cubin) -> KernelAnalysis:
        k = self.kernel
        lowered = k._lowered_all[index]
        try:
            counts = count(self._counted_lowering(index), self.values, self.data)
        except ValueError as err:
            raise ValueError(f"Analyzer: {err}") from None
        notes = list(counts.notes)
        registers = None
        if compile_cubin:
            from ..registers import compiled_resources

            try:
                registers = compiled_resources(k.cubin(index))[lowered.entry][0]
            except Exception as err:  # reported, not fatal: the counts stand without it
                notes.append(f"registers unknown (compiling failed: {str(err).splitlines()[0][:120]})")
        usage = k.register_usage(index)
        try:
            limits = hardware.target_limits(k.target)
        except ValueError as err:
            limits = None
            notes.append(str(err))
        occ = None if limits is None else hardware.occupancy(limits, lowered.threads, registers, lowered.smem_bytes)
        name = k.prim_func.kernels[index].name if k.num_kernels > 1 else (k.__dict__.get("_name") or k.prim_func.name)
        return KernelAnalysis(name, counts.grid, lowered.threads, lowered.smem_bytes, registers,
                              None if usage is None else usage.peak, counts.tensor_flops, counts.cuda_flops,
                              counts.loads, counts.stores, counts.sizes, occ, tuple(notes))
