"""Register pressure: how many of its threads' registers a kernel's fragments take, and a
compile-time warning when they cannot all fit.

The estimate is the compiler's (src/analysis/register_liveness.h states its rules, with
examples): each fragment's registers per thread, its register array's slots * bytes / 4
(acc_o = T.alloc_fragment((128, 128), "float32") over 128 threads: 128), and the most of
them live at once, a fragment counting from where it is (re)defined to its last read. It
reads the IR of lower_fragments and comes back as data (`Lowered.register_liveness()`);
this module presents it and words the warning.

The budget: a block of `threads` threads gets min(255, 65536 // threads) registers each,
rounded down to a multiple of 8 (the register file is 64K 32-bit registers per SM on
sm_80..sm_100; allocation is per warp in units of 256, i.e. 8 per thread). The fragments
get that less ADDRESS_ALLOWANCE: what every tile kernel keeps beside them (64-bit
global pointers, block and thread indices and the offsets derived from them, loop and
pipeline-stage counters, shared-memory addresses and wgmma descriptors). ptxas took 26
to 30 registers more than the live fragments for attention at head dimension 64 on small
tiles; it takes more at other shapes, but only where registers are to spare. A warp-specialised kernel
(sm_90a) launches a producer warpgroup more; its consumers, the threads that hold the
fragments, keep what the larger launch gives them or what setmaxnreg raises them to.
"""
from __future__ import annotations

import re
import struct
import sys
import warnings
from dataclasses import dataclass, field

ADDRESS_ALLOWANCE = 24  # registers per thread kept for addresses, indices and counters (ptxas fit 208 live
#                         fragment registers into 232 without spilling: 24 is what it needed)
REGISTER_FILE = 65536   # 32-bit registers per SM (and per block)
MAX_PER_THREAD = 255


class RegisterPressureWarning(UserWarning):
    """A kernel's fragments need more registers per thread than its threads get: ptxas
    will spill them to local memory, which is slow."""


def register_limit(threads: int) -> int:
    """Registers each thread of a block of `threads` threads can have."""
    return min(MAX_PER_THREAD, REGISTER_FILE // max(threads, 1)) // 8 * 8


def fragment_budget(limit: int) -> int:
    """What fragments may take of `limit` registers per thread."""
    return limit - ADDRESS_ALLOWANCE


@dataclass(frozen=True)
class RegisterUsage:
    """The fragments of one kernel and the registers per thread they take."""

    kernel: str
    threads: int     # as declared: the threads that hold the fragments
    limit: int       # registers each of them gets
    fragments: dict  # name -> registers per thread, every fragment, in declaration order
    peak: int        # registers of the fragments live at once, at the worst statement
    live_at_peak: dict  # name -> registers of those fragments, largest first
    peak_at: str     # that statement, as the tile-level IR prints it
    shapes: dict = field(repr=False, default_factory=dict)  # name -> "float32[128, 128]"

    @property
    def budget(self) -> int:
        return fragment_budget(self.limit)

    @property
    def over_budget(self) -> bool:
        return self.peak > self.budget

    def __str__(self):
        """The report; when over budget, the RegisterPressureWarning's text."""
        width = max([len(n) for n in self.live_at_peak] + [len("total")])
        rows = "".join(f"    {n:<{width}}  {r:>4} registers  ({self.shapes.get(n, '?')} over {self.threads} threads)\n"
                       for n, r in self.live_at_peak.items())
        text = (f"kernel {self.kernel}: its fragments need {self.peak} registers per thread at once, "
                f"{'over' if self.over_budget else 'within'} the budget of {self.budget} ({self.limit} registers "
                f"per thread at threads={self.threads}, less {ADDRESS_ALLOWANCE} for addresses and indices)")
        if self.over_budget:
            text += "; ptxas will spill to local memory, which is slow"
        text += f".\n{rows}    {'total':<{width}}  {self.peak:>4} registers, live together at: {self.peak_at}"
        if self.over_budget:
            text += ("\n  Use a smaller tile (block_M / block_N: a fragment's registers scale with its elements), "
                     "more threads (each thread holds elements / threads of a tile), or a T.GemmWarpPolicy that "
                     "spreads the tile differently over the warps (which changes how many rows of the row vectors "
                     "each thread keeps).")
        return text


def kernel_usage(jit_kernel, index: int = 0) -> RegisterUsage | None:
    """Register usage of kernel `index` (one per `with T.Kernel`) of a JITKernel."""
    lowered = jit_kernel._lowered_all[index]
    estimate = lowered.register_liveness()
    if estimate is None:  # no tile IR: a kernel of CUDA source
        return None
    name = jit_kernel.prim_func.name
    if len(jit_kernel._lowered_all) > 1:
        name += f" (T.Kernel {index} of {len(jit_kernel._lowered_all)})"
    # The threads that hold the fragments: the program's, or two warpgroups for its one.
    threads = lowered.tile_threads
    raised = re.search(r"setmaxnreg_inc<(\d+)>", lowered.source)
    limit = int(raised.group(1)) if raised else register_limit(lowered.threads)
    fragments = {f["name"]: f["registers"] for f in estimate["fragments"]}
    shapes = {f["name"]: f"{f['dtype']}[{', '.join(map(str, f['shape']))}]" for f in estimate["fragments"]}
    live = {n: fragments[n] for n in estimate["live_at_peak"]}
    return RegisterUsage(name, threads, limit, fragments, estimate["peak"], live, estimate["peak_at"], shapes)


def _caller_stacklevel() -> int:
    """The stacklevel of the first frame outside tegula, so the warning points at the
    user's line whichever entry point (compile, a @jit call, an eager call) compiled."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_globals.get("__name__", "").split(".")[0] == "tegula"
                                 or frame.f_code.co_filename.startswith("<tegula")):  # eager's dispatcher
        frame, level = frame.f_back, level + 1
    return level


def warn_if_over_budget(jit_kernel) -> None:
    """Once per JITKernel (that is, per lowering: a @jit cache hit returns the same
    JITKernel and warns no more; Python's own filter then shows a given text once per line)."""
    for index in range(len(jit_kernel._lowered_all)):
        usage = kernel_usage(jit_kernel, index)
        if usage is not None and usage.over_budget:
            warnings.warn(RegisterPressureWarning(str(usage)), stacklevel=_caller_stacklevel())


# ---- what ptxas decided, read from the cubin ----

def compiled_resources(cubin: bytes) -> dict:
    """{entry: (registers, stack bytes)} of each kernel in a cubin, as ptxas -v reports them:
    the ELF's .nv.info section holds EIATTR_REGCOUNT (0x2f) and EIATTR_FRAME_SIZE (0x11)
    records of (symbol index, value). A nonzero stack in a Tegula kernel is spilling (its
    register arrays are indexed by constants only)."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise ValueError("compiled_resources expects a 64-bit ELF cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]

    def section(h):
        return cubin[h[4]:h[4] + h[5]]

    def cstr(blob, at):
        return blob[at:blob.index(b"\0", at)].decode()

    names = section(headers[names_index])
    by_name = {cstr(names, h[0]): h for h in headers}
    symtab, strtab = section(by_name[".symtab"]), section(by_name[".strtab"])
    values = {}
    info = section(by_name[".nv.info"]) if ".nv.info" in by_name else b""
    at = 0
    while at + 4 <= len(info):
        fmt, attr, size = info[at], info[at + 1], struct.unpack_from("<H", info, at + 2)[0]
        if fmt == 4:  # EIFMT_SVAL: a payload of `size` bytes
            if attr in (0x2F, 0x11) and size == 8:
                sym, value = struct.unpack_from("<II", info, at + 4)
                values[(sym, attr)] = value
            at += 4 + size
        else:
            at += 4
    out = {}
    for sym, attr in values:
        if attr == 0x2F:  # kernels; device functions' registers count in their callers'
            name = cstr(strtab, struct.unpack_from("<I", symtab, sym * 24)[0])
            out[name] = (values[(sym, 0x2F)], values.get((sym, 0x11), 0))
    return out
