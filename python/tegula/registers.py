"""Register pressure: how many of its threads' registers a kernel's fragments take, and a
compile-time warning when they cannot all fit.

Each T.alloc_fragment becomes a per-thread register array of as many slots as its layout
gives one thread (lower_fragments), so it costs slots * bytes / 4 32-bit registers:
acc_o = T.alloc_fragment((128, 128), "float32") over 128 threads is 128 slots, 128
registers; a float16 tile of the same shape, 64; a row vector (128,) whose value each of
the 4 threads sharing a row keeps, 4.

What must fit is not the sum over all fragments but those live at once. ptxas allocates
element by element, so a fragment is counted from where it is (re)defined to its last
read, and an elementwise statement that turns one into another (acc_s_cast[i, j] =
acc_s[i, j]) holds the larger of the two, not both. For FlashAttention at 128x64 tiles,
head dimension 128 and 128 threads (sm_90a) the fragments sum to 244 registers but at
most 208 are live (acc_o 128 + acc_s 64 + four row vectors of 4), and ptxas fits the
kernel in 255 registers without a spill; at 128x128 tiles 272 are live, and ptxas spills
1.5 to 1.8 KB of stack per thread.

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

The analysis reads the kernel after lower_fragments: the last stage that still has tile
operations (gemm, reduce) and that lists every fragment beside its register array.
Whatever it does not recognise it counts as a read, which only raises the estimate
towards the plain sum.
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
STAGE = "lower_fragments"
_INDENT = 4  # the IR printer's indent width


class RegisterPressureWarning(UserWarning):
    """A kernel's fragments need more registers per thread than its threads get: ptxas
    will spill them to local memory, which is slow."""


def register_limit(threads: int) -> int:
    """Registers each thread of a block of `threads` threads can have."""
    return min(MAX_PER_THREAD, REGISTER_FILE // max(threads, 1)) // 8 * 8


def fragment_budget(limit: int) -> int:
    """What fragments may take of `limit` registers per thread."""
    return limit - ADDRESS_ALLOWANCE


def _bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    bits = re.search(r"(\d+)$", dtype)
    return int(bits.group(1)) // 8 if bits else 4


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


# ---- reading the tile-level IR ----

class _Stmt:
    __slots__ = ("text", "children", "kind")

    def __init__(self, text, kind):
        self.text, self.kind, self.children = text, kind, []


def _tree(lines):
    """[(indent, text)] -> statements; `for`/`if`/`elif`/`else` own the deeper lines after them."""
    root, stack = [], [(-1, None)]
    for indent, text in lines:
        while stack[-1][0] >= indent:
            stack.pop()
        kind = text.split(" ", 1)[0].rstrip(":") if text.endswith(":") else "stmt"
        node = _Stmt(text, kind)
        (stack[-1][1].children if stack[-1][1] else root).append(node)
        if text.endswith(":"):
            stack.append((indent, node))
    return root


def _split_top(text: str, sep: str) -> list[str]:
    """`text` split at `sep` outside brackets and parentheses."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text[i] in "([":
            depth += 1
        elif text[i] in ")]":
            depth -= 1
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


class _Analysis:
    def __init__(self, fragments: dict, shapes: dict):
        self.cost = fragments          # name -> registers
        self.shape = shapes            # name -> [extent, ...] as printed
        self.mention = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, fragments)) + r")\[") if fragments else None
        self.peak, self.live_at_peak, self.peak_at = 0, (), ""

    def names(self, text: str) -> set:
        return set(self.mention.findall(text)) if self.mention else set()

    def full(self, region: str) -> str | None:
        """The fragment a region `F[0:+a, 0:+b]` covers whole, or None."""
        m = re.fullmatch(r"(\w+)\[(.*)\]", region.strip())
        if not m or m.group(1) not in self.cost:
            return None
        dims = [d.strip() for d in m.group(2).split(",")]
        return m.group(1) if dims == [f"0:+{e}" for e in self.shape[m.group(1)]] else None

    # Each statement kind: (uses, kills, defs, elementwise). A kill is a whole overwrite
    # that reads nothing of the old value, so the fragment is dead before it.
    def tile_op(self, text: str):
        m = re.fullmatch(r"T\.(\w+)\((.*)\)", text)
        mentioned = self.names(text)
        if not m:
            return mentioned, set(), set(), False
        op, args = m.group(1), _split_top(m.group(2), ", ")
        attrs = dict(a.split("=", 1) for a in args if re.match(r"\w+=", a))
        if op in ("gemm", "gemm_sp") and len(args) >= (3 if op == "gemm" else 4):
            c = args[2] if op == "gemm" else args[3]  # the accumulator
            dest = self.full(c)
            if dest and attrs.get("clear_accum") == "1":
                return mentioned - {dest}, {dest}, {dest}, False
            return mentioned, set(), self.names(c), False
        if op in ("reduce", "copy"):
            halves = _split_top(args[0], " -> ")
            dest = self.full(halves[-1]) if len(halves) == 2 else None
            whole = dest and (op == "copy" or attrs.get("clear") == "1") and dest not in self.names(halves[0])
            if whole:
                return mentioned - {dest}, {dest}, {dest}, op == "copy"
            return mentioned, set(), self.names(halves[-1]), op == "copy"
        if op == "fill":
            dest = self.full(args[0])
            return (mentioned - {dest}, {dest}, {dest}, True) if dest else (mentioned, set(), mentioned, True)
        return mentioned, set(), set(), False

    def parallel_nest(self, node: _Stmt):
        """A T.Parallel nest, one elementwise statement: a fragment it stores at exactly its
        loop indices, over its whole shape, unconditionally and without reading it, is killed."""
        uses, stores = set(), {}

        def walk(n, loops, conditional):
            m = re.fullmatch(r"for (\w+) in (\w+)\(0, (\w+)\):", n.text)
            if n.kind == "for" and m and m.group(2) == "parallel" and not conditional:
                for c in n.children:
                    walk(c, loops + [(m.group(1), m.group(3))], conditional)
                return
            if n.children or n.kind != "stmt":
                uses.update(self.names(n.text))
                for c in n.children:
                    walk(c, loops, True)
                return
            store = re.fullmatch(r"(\w+)\[([^\]]*)\] = (.*)", n.text)
            if store and store.group(1) in self.cost:
                name, index = store.group(1), [s.strip() for s in store.group(2).split(",")]
                uses.update(self.names(store.group(2) + " " + store.group(3)))
                identity = (not conditional and index == [v for v, _ in loops]
                            and [e for _, e in loops] == self.shape[name])
                stores[name] = stores.get(name, True) and identity
                return
            uses.update(self.names(n.text))

        walk(node, [], False)
        kills = {n for n, whole in stores.items() if whole and n not in uses}
        return uses | (set(stores) - kills), kills, set(stores), True

    def stmt(self, node: _Stmt, live_out: set) -> set:
        if node.kind == "for" and " in parallel(" in node.text:
            return self.simple(node.text, self.parallel_nest(node), live_out)
        if node.kind == "for":
            live = set(live_out)
            while True:  # loop-carried: what the body needs at its start is live at its end
                body_in = self.block(node.children, live_out | live)
                if body_in <= live:
                    break
                live |= body_in
            return live | self.names(node.text)
        text = node.text  # (an if/elif/else chain goes to branches())
        if text.startswith("T."):
            return self.simple(text, self.tile_op(text), live_out)
        return self.simple(text, (self.names(text), set(), set(), False), live_out)

    def branches(self, nodes: list, live_out: set) -> set:
        """An if/elif/else chain: live before it is what any branch (or falling through) needs."""
        live = set() if nodes[-1].kind == "else" else set(live_out)
        for n in nodes:
            live |= self.block(n.children, live_out) | self.names(n.text)
        return live

    def block(self, nodes: list, live_out: set) -> set:
        live, i = set(live_out), len(nodes)
        while i > 0:
            j = i - 1
            while nodes[j].kind in ("elif", "else"):
                j -= 1
            live = self.branches(nodes[j:i], live) if nodes[j].kind == "if" else self.stmt(nodes[j], live)
            i = j
        return live

    def simple(self, text, effect, live_out: set) -> set:
        uses, kills, defs, elementwise = effect
        live_in = (live_out - kills) | uses
        if elementwise:
            through = live_in & live_out
            dying, born = live_in - live_out, (live_out | defs) - live_in
            larger = max((dying, born), key=self.total)
            live = through | larger
        else:
            live = live_in | live_out | defs
        total = self.total(live)
        if total >= self.peak:  # the walk is backwards: on a tie, keep the earlier statement
            self.peak, self.live_at_peak, self.peak_at = total, live, text
        return live_in

    def total(self, names) -> int:
        return sum(self.cost[n] for n in names)


_ALLOC = re.compile(r"alloc (\w+): (\w+) (\w+)\[(.*)\]")


def usage_of(ir_text: str, kernel: str, threads: int, limit: int) -> RegisterUsage | None:
    """The register usage of a kernel printed after lower_fragments; None when the text has
    no fragment-to-register pairing to read (a stage this module does not know)."""
    lines = []
    for raw in ir_text.splitlines()[1:]:
        text = raw.strip()
        if text:
            lines.append(((len(raw) - len(raw.lstrip(" "))) // _INDENT, text))
    header = [t for i, t in lines if i == 1 and re.match(r"(dynamic|grid|threads|alloc|smem|swizzle) ", t)]
    allocs = [_ALLOC.fullmatch(t).groups() for t in header if _ALLOC.fullmatch(t)]
    frags = [a for a in allocs if a[1] == "fragment"]
    registers = allocs[len(allocs) - len(frags):] if frags else []
    if any(r[1] != "local" or r[2] != f[2] for f, r in zip(frags, registers)):
        return None  # lower_fragments appends one register array per fragment, in order
    cost, shapes, dims = {}, {}, {}
    for (name, _, dtype, shape), (_, _, _, slots) in zip(frags, registers):
        cost[name] = -(-int(slots) * _bytes(dtype) // 4)
        shapes[name] = f"{dtype}[{shape}]"
        dims[name] = [d.strip() for d in shape.split(",")]
    analysis = _Analysis(cost, dims)
    analysis.block(_tree(lines[len(header):]), set())
    live = sorted(analysis.live_at_peak, key=lambda n: (-cost[n], list(cost).index(n)))
    return RegisterUsage(kernel, threads, limit, cost, analysis.peak, {n: cost[n] for n in live}, analysis.peak_at, shapes)


def kernel_usage(jit_kernel, index: int = 0) -> RegisterUsage | None:
    """Register usage of kernel `index` (one per `with T.Kernel`) of a JITKernel."""
    lowered = jit_kernel._lowered_all[index]
    if STAGE not in lowered.stages():
        return None
    name = jit_kernel.prim_func.name
    if len(jit_kernel._lowered_all) > 1:
        name += f" (T.Kernel {index} of {len(jit_kernel._lowered_all)})"
    # The threads that hold the fragments: the program's, or two warpgroups for its one.
    threads = lowered.tile_threads
    raised = re.search(r"setmaxnreg_inc<(\d+)>", lowered.source)
    limit = int(raised.group(1)) if raised else register_limit(lowered.threads)
    return usage_of(lowered.ir(STAGE), name, threads, limit)


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
