"""Explicit barriers and manual warp specialisation, with TileLang's names and meaning:
`T.alloc_barrier`, `T.barrier_arrive`, `T.barrier_wait`, `T.tma_copy`, `T.wgmma_gemm` /
`T.wait_wgmma`, `T.set_max_nreg`, `T.disable_warp_group_reg_alloc`, `T.ptx_cp_async` with
`T.access_ptr`, and `T.cp_async_barrier_noinc` (sm_90a).

    bar_full = T.alloc_barrier(arrive_count=[32] * 2)   # 2 mbarriers, 32 arrivals a phase
    tx = T.get_thread_binding()
    if tx < 128:                                         # consumers
        T.barrier_wait(bar_full[s], phase)               # until that phase has completed
        T.gemm(A_shared[s, :, :], B_shared, C)
    else:                                                # one producer warp
        T.ptx_cp_async(T.access_ptr(A_shared[s, r, c], "w", 8), T.access_ptr(A[i, c], "r", 8), 8)
        T.cp_async_barrier_noinc(bar_full[s])            # arrives once those copies landed

An mbarrier completes a phase when `arrive_count` arrivals have been made on it (every
thread that runs T.barrier_arrive makes one), and T.barrier_wait(bar, p) waits until the
phase of parity p has completed: the first phase has parity 0, so waiting for parity 1
before anything arrived passes at once. The barriers are initialised where T.alloc_barrier
stands, which must be the kernel's top level (all threads meet there once).

What Tegula does differently, with the same results: T.tma_copy copies with the threads
that run it (they finish before going on) and needs a T.barrier_arrive on its barrier
after it in the same block, which then publishes the data as the copy engine's completion
would; T.wgmma_gemm is T.gemm (complete when it returns), so T.wait_wgmma has nothing left
to wait for.
"""
from __future__ import annotations

import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.errors import ArgError
from ..frontend.values import (BufferValue, LoadValue, PrimExpr, RegionValue, call, cast_value, constant_int, ir,
                               to_expr)
from ..frontend.requests import AllocRequest
from .tileops import copy as _copy, gemm as _gemm


class BarrierRequest(AllocRequest):
    """T.alloc_barrier waiting for its name: one uint64 mbarrier in shared memory per count."""

    def __init__(self, counts: list):
        super().__init__("shared", (len(counts),), "uint64")
        self.counts = counts

    def initialize(self, builder, buffer) -> None:
        init_barriers(builder, buffer, self.counts)


@intrinsic("T.alloc_barrier")
def alloc_barrier(arrive_count):
    """`bar = T.alloc_barrier(arrive_count=128)` or `T.alloc_barrier([128] * n)`: one mbarrier
    per count in shared memory, each completing a phase after that many arrivals."""
    counts = [arrive_count] if isinstance(arrive_count, numbers.Integral) else arrive_count
    if isinstance(counts, bool) or not isinstance(counts, (list, tuple)) or not counts:
        raise ArgError("arrive_count", f"T.alloc_barrier: arrive_count must be an int or a non-empty list of ints, "
                                       f"got {arrive_count!r}")
    for i, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 1:
            raise ArgError("arrive_count", f"T.alloc_barrier: every arrive count must be an int of at least 1, got "
                                           f"{c!r} at position {i}")
    return BarrierRequest([int(c) for c in counts])


def init_barriers(b, buffer: BufferValue, counts: list) -> None:
    """Called by the parser once the barrier buffer has its name: thread 0 initialises every
    mbarrier, then the block meets (the barriers are ready before anyone arrives)."""
    if len(b.blocks) != 1 or b.parallel:
        raise ArgError(None, f"T.alloc_barrier ('{buffer.name}') must stand at the kernel's top level, where every "
                             "thread runs it once: not inside a loop or a branch")
    kernel = b.require_kernel("T.alloc_barrier")
    for c in counts:
        if c > kernel.threads:
            raise ArgError("arrive_count", f"T.alloc_barrier: an arrive count of {c} exceeds the block's "
                                           f"{kernel.threads} threads: the phase could never complete")
    inits = [ir().evaluate(ir().call("mbar_init", [ir().load(buffer.buf, [to_expr(i, "int32")], 1),
                                                   to_expr(c, "int32")], "int32")) for i, c in enumerate(counts)]
    inits.append(ir().evaluate(ir().call("fence_barrier_init", [], "int32")))
    is_first = ir().binary("eq", kernel.thread_var.expr, to_expr(0, "int32"))
    b.emit(ir().if_(is_first, ir().seq(inits)))
    b.emit(ir().sync())
    barriers_of(b)[buffer.name] = (buffer, counts)


def barriers_of(b) -> dict:
    return b.mbarriers


def _barrier(bar, fn: str, arg: str = "barrier"):
    """The IR load of one mbarrier: `bar` (its first) or `bar[i]`."""
    b = builder.current(fn)
    b.require_kernel(fn)
    if b.parallel:
        raise ArgError(None, f"{fn} inside a T.Parallel loop: its iterations are divided among the threads, so how "
                             "many arrive or wait would depend on the layout; call it outside the loop")
    if b.pipelined and not (b.ws_levels and b.ws_levels[-1] == b.pipelined):
        raise ArgError(None, f"{fn} inside a T.Pipelined loop: the pipeline issues later iterations' copies ahead "
                             "of this iteration's statements; order the stages with the barriers in a T.serial loop "
                             "(or in T.ws scopes inside the loop, which then runs in order in each warp group)")
    known = barriers_of(b)
    if isinstance(bar, BufferValue) and bar.name in known and known[bar.name][0] is bar:
        if len(known[bar.name][1]) != 1:
            raise ArgError(arg, f"{fn}: '{bar.name}' holds {len(known[bar.name][1])} barriers: name one, "
                                f"{bar.name}[i]")
        return ir().load(bar.buf, [to_expr(0, "int32")], 1), bar
    if isinstance(bar, LoadValue) and bar.buffer.name in known and known[bar.buffer.name][0] is bar.buffer \
            and len(bar.indices) == 1:
        return bar.expr, bar.buffer
    raise ArgError(arg, f"{fn}: '{arg}' must be a barrier of T.alloc_barrier (bar or bar[i]), got {bar!r}")


def _emit(fn: str, op: str, args: list) -> None:
    b = builder.current(fn)
    b.emit(ir().evaluate(ir().call(op, args, "int32")))


@intrinsic("T.barrier_arrive")
def barrier_arrive(mbarrier):
    """Every thread that runs it makes one arrival on the mbarrier, without waiting; its
    memory writes before it are visible to the threads that wait for the phase."""
    load, buffer = _barrier(mbarrier, "T.barrier_arrive", "mbarrier")
    b = builder.current()
    block = id(b.blocks[-1])
    b.pending_tma = [p for p in b.pending_tma if not (p[0] == block and p[1] == buffer.name)]
    _emit("T.barrier_arrive", "mbar_arrive", [load])


mbarrier_arrive = barrier_arrive


def _parity(parity, fn: str):
    if isinstance(parity, bool):
        parity = int(parity)
    if isinstance(parity, numbers.Integral):
        if parity not in (0, 1):
            raise ArgError("parity", f"{fn}: parity is 0 or 1, got {parity}")
        return to_expr(parity, "int32")
    if not isinstance(parity, PrimExpr) or not str(parity.expr.dtype).startswith(("int", "uint")):
        raise ArgError("parity", f"{fn}: parity must be 0, 1 or an integer kernel value, got {parity!r}")
    return cast_value(parity, "int32").expr


@intrinsic("T.barrier_wait")
def barrier_wait(mbarrier, parity):
    """Waits until the mbarrier's phase of parity `parity` (0 or 1) has completed."""
    load, _ = _barrier(mbarrier, "T.barrier_wait", "mbarrier")
    _emit("T.barrier_wait", "mbar_wait", [load, _parity(parity, "T.barrier_wait")])


@intrinsic("T.mbarrier_wait_parity")
def mbarrier_wait_parity(mbarrier, parity):
    """T.barrier_wait under its other TileLang name."""
    load, _ = _barrier(mbarrier, "T.mbarrier_wait_parity", "mbarrier")
    _emit("T.mbarrier_wait_parity", "mbar_wait", [load, _parity(parity, "T.mbarrier_wait_parity")])


@intrinsic("T.cp_async_barrier_noinc")
def cp_async_barrier_noinc(barrier):
    """Each thread that runs it makes one arrival on the mbarrier once all its earlier
    T.ptx_cp_async copies have landed (`cp.async.mbarrier.arrive.noinc`)."""
    load, _ = _barrier(barrier, "T.cp_async_barrier_noinc")
    _emit("T.cp_async_barrier_noinc", "mbar_cp_async_arrive_noinc", [load])


@intrinsic("T.ptx_commit_group")
def ptx_commit_group():
    """`cp.async.commit_group`: the thread's cp.async copies issued since its last commit
    (T.ptx_cp_async, and copies the engine made asynchronous) become one group, for
    T.ptx_wait_group to wait on."""
    fn = "T.ptx_commit_group"
    builder.current(fn).require_kernel(fn)
    _emit(fn, "cp_async_commit", [])


@intrinsic("T.ptx_wait_group")
def ptx_wait_group(num):
    """`cp.async.wait_group num`: the thread waits until at most `num` of its committed
    groups are still in flight. A wait orders only the thread's own copies; the engine puts
    the block's barrier between a copy's landing and another thread's read."""
    fn = "T.ptx_wait_group"
    num = constant_int(num)
    if isinstance(num, bool) or not isinstance(num, numbers.Integral) or num < 0:
        raise ArgError("num", f"{fn}: num is a constant int of at least 0, got {num!r}")
    builder.current(fn).require_kernel(fn)
    _emit(fn, "cp_async_wait", [to_expr(int(num), "int32")])


@intrinsic("T.tma_copy")
def tma_copy(src, dst, barrier=None, cluster_mask=None, leader_scope_threads=None, eviction_policy=None,
             annotations=None):
    """Copies global `src` into shared `dst`, completing on `barrier`. Tegula copies with the
    threads that run it and asks for a T.barrier_arrive on `barrier` later in the same block,
    which publishes the data (see the module's note)."""
    fn = "T.tma_copy"
    if barrier is None:
        raise ArgError("barrier", f"{fn}: a load needs the barrier it completes on (barrier=bar)")
    if cluster_mask is not None:
        raise ArgError("cluster_mask", f"{fn}: multicast (cluster_mask) is not supported")
    _, buffer = _barrier(barrier, fn)
    for value, arg, scope in ((src, "src", "global"), (dst, "dst", "shared")):
        base = value.buffer if isinstance(value, (RegionValue, LoadValue)) else value
        if not isinstance(base, BufferValue) or base.scope != scope:
            raise ArgError(arg, f"{fn}: '{arg}' must be a {scope} buffer or region of one, got {value!r}")
    b = builder.current(fn)
    _copy(src, dst)
    b.pending_tma.append((id(b.blocks[-1]), buffer.name, getattr(dst, "name", None) or dst.buffer.name))


def check_tma_arrivals(b) -> None:
    """At the end of a kernel: every T.tma_copy was followed by an arrival on its barrier."""
    for _, bar, dst in b.pending_tma:
        raise ArgError(None, f"T.tma_copy into '{dst}' completes on '{bar}', but no T.barrier_arrive({bar}) follows "
                             "it in the same block: Tegula's copy is published by that arrival")
    b.pending_tma = []


@intrinsic("T.wgmma_gemm")
def wgmma_gemm(A, B, C, transpose_A=False, transpose_B=False, policy=None, clear_accum=False, k_pack=1,
               wg_wait=0):
    """TileLang's asynchronous wgmma issue; in Tegula it is T.gemm, complete when it returns."""
    kwargs = {} if policy is None else {"policy": policy}
    _gemm(A, B, C, transpose_A=transpose_A, transpose_B=transpose_B, clear_accum=clear_accum, **kwargs)


@intrinsic("T.wait_wgmma")
def wait_wgmma(id):  # noqa: A002 - TileLang's name
    """Waits until at most `id` wgmma groups are in flight; T.wgmma_gemm completes at once
    in Tegula, so nothing is left to wait for."""
    if isinstance(id, bool) or not isinstance(id, numbers.Integral) or id < 0:
        raise ArgError("id", f"T.wait_wgmma: the count of groups left in flight is an int >= 0, got {id!r}")
    builder.current("T.wait_wgmma").require_kernel("T.wait_wgmma")


@intrinsic("T.set_max_nreg")
def set_max_nreg(reg_count, is_inc):
    """`setmaxnreg`: the warpgroup running it raises (is_inc=1) or lowers (0) its registers
    per thread to reg_count (24..256, a multiple of 8)."""
    fn = "T.set_max_nreg"
    if isinstance(reg_count, bool) or not isinstance(reg_count, numbers.Integral) or not (
            24 <= reg_count <= 256 and reg_count % 8 == 0):
        raise ArgError("reg_count", f"{fn}: reg_count is an int in 24..256, a multiple of 8, got {reg_count!r}")
    if is_inc not in (0, 1, True, False):
        raise ArgError("is_inc", f"{fn}: is_inc is 1 (raise) or 0 (lower), got {is_inc!r}")
    b = builder.current(fn)
    b.require_kernel(fn)
    _emit(fn, "set_max_nreg", [to_expr(int(reg_count), "int32"), to_expr(int(is_inc), "int32")])


@intrinsic("T.annotate_producer_reg_dealloc")
def annotate_producer_reg_dealloc(reg_count=24):
    """TileLang's mark at the top of a hand-written producer branch: its warpgroup lowers
    its registers per thread to reg_count (`T.set_max_nreg(reg_count, 0)` where it stands)."""
    set_max_nreg(reg_count, 0)


@intrinsic("T.annotate_consumer_reg_alloc")
def annotate_consumer_reg_alloc(reg_count=240):
    """TileLang's mark at the top of a hand-written consumer branch: its warpgroup raises
    its registers per thread to reg_count (`T.set_max_nreg(reg_count, 1)` where it stands)."""
    set_max_nreg(reg_count, 1)


@intrinsic("T.disable_warp_group_reg_alloc")
def disable_warp_group_reg_alloc():
    """The kernel's warp-specialised form (if the compiler makes one) keeps the launch's
    register count in every warpgroup: no setmaxnreg of its own."""
    b = builder.current("T.disable_warp_group_reg_alloc")
    b.require_kernel("T.disable_warp_group_reg_alloc")
    _emit("T.disable_warp_group_reg_alloc", "no_set_max_nreg", [])


no_set_max_nreg = disable_warp_group_reg_alloc


@intrinsic("T.fence_proxy_async")
def fence_proxy_async():
    """Orders the thread's ordinary writes to shared memory before later asynchronous reads
    of it (wgmma, bulk copies out of shared memory) by any thread it synchronises with
    (sm_90+). Tegula's own barriers fence where they need to; this one is the program's."""
    b = builder.current("T.fence_proxy_async")
    b.require_kernel("T.fence_proxy_async")
    _emit("T.fence_proxy_async", "fence_proxy_async", [])


class AccessPtr:
    """T.access_ptr(X[i, j], mode, extent): the address of X[i, j] and the `extent` elements
    after it, for T.ptx_cp_async."""

    def __init__(self, load: LoadValue, mode: str, extent: int):
        self.load, self.mode, self.extent = load, mode, extent

    def __repr__(self):
        return f"T.access_ptr({self.load.buffer.name}[...], {self.mode!r}, {self.extent})"


@intrinsic("T.access_ptr")
def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim=0):
    """A pointer to an element of a buffer (`T.access_ptr(A[i, j], "r", 8)`) covering
    `extent` elements from it (default 1); for T.ptx_cp_async."""
    fn = "T.access_ptr"
    if isinstance(base, BufferValue):
        base = base[tuple([0] * base.ndim)] if base.ndim > 1 else base[0]
    if not isinstance(base, LoadValue):
        raise ArgError("base", f"{fn}: base must be an element of a buffer (X[i, j]) or a buffer, got {base!r}")
    mode = {1: "r", 2: "w", 3: "rw"}.get(access_type, access_type)
    if mode not in ("r", "w", "rw"):
        raise ArgError("access_type", f"{fn}: access_type is 'r', 'w' or 'rw' (or 1, 2, 3), got {access_type!r}")
    if ignore_last_ndim:
        raise ArgError("ignore_last_ndim", f"{fn}: ignore_last_ndim is not supported")
    if not (isinstance(offset, numbers.Integral) and offset == 0):
        raise ArgError("offset", f"{fn}: give the element itself (X[i + k]) instead of an offset")
    count = extent
    if count is None:
        count = 1
        for e in extents:
            count = count * e
    if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise ArgError("extent", f"{fn}: the extent is a constant int of at least 1, got {count!r}")
    return AccessPtr(base, mode, int(count))


@intrinsic("T.ptx_cp_async")
def ptx_cp_async(dst_access_ptr, src_access_ptr, num_elems, predicate=None):
    """`cp.async` of num_elems elements (4, 8 or 16 bytes) from global memory into shared
    memory, landing asynchronously: T.cp_async_barrier_noinc tells a barrier when."""
    fn = "T.ptx_cp_async"
    for value, arg, scope in ((dst_access_ptr, "dst_access_ptr", "shared"), (src_access_ptr, "src_access_ptr",
                                                                             "global")):
        if not isinstance(value, AccessPtr):
            raise ArgError(arg, f"{fn}: '{arg}' must be a T.access_ptr(...), got {value!r}")
        if value.load.buffer.scope != scope:
            raise ArgError(arg, f"{fn}: '{arg}' must point into {scope} memory ('{value.load.buffer.name}' is "
                                f"{value.load.buffer.scope})")
    dst, src = dst_access_ptr.load, src_access_ptr.load
    if dst.buffer.dtype != src.buffer.dtype:
        raise ArgError("src_access_ptr", f"{fn}: '{src.buffer.name}' ({src.buffer.dtype}) and '{dst.buffer.name}' "
                                         f"({dst.buffer.dtype}) must have one dtype")
    if isinstance(num_elems, bool) or not isinstance(num_elems, numbers.Integral):
        raise ArgError("num_elems", f"{fn}: num_elems is a constant int, got {num_elems!r}")
    nbytes = int(num_elems) * dst.buffer.dtype.itemsize
    if nbytes not in (4, 8, 16):
        raise ArgError("num_elems", f"{fn}: {num_elems} {dst.buffer.dtype} elements are {nbytes} bytes; cp.async "
                                    "moves 4, 8 or 16")
    if predicate is not None:
        raise ArgError("predicate", f"{fn}: a predicate is not supported; branch around the copy")
    b = builder.current(fn)
    b.require_kernel(fn)
    _emit(fn, "ptx_cp_async", [dst.expr, src.expr, to_expr(nbytes, "int32")])
