"""`T.Kernel` and the names of a kernel's threads and blocks (TileLang's
tilelang.language.kernel).

    with T.Kernel(T.ceildiv(N, 128), M, threads=128) as (bx, by):
        tx = T.get_thread_binding()          # or T.launch_thread("threadIdx.x", 128)

`threads` is n or [x, y, z] (shorter lists padded with 1). A block of [x, y, z] threads
runs as a flat block of x * y * z threads, numbered as CUDA numbers them (x fastest), so
T.get_thread_binding(1) is tx // x % y: every value a program reads is CUDA's.
"""
from __future__ import annotations

import math
import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.errors import ArgError
from ..frontend.requests import KernelSpec, loop_extent as _extent
from ..frontend.values import PrimExpr, constant_int

DEFAULT_THREADS = 128  # TileLang's, when T.Kernel is given none
MAX_THREADS = 1024  # per block, on every NVIDIA GPU


def _normalize_threads(threads) -> list[int]:
    """A thread-block extent as three ints [x, y, z]: None is [128, 1, 1], n is [n, 1, 1],
    a list or tuple of one to three extents is padded with 1. ValueError for an extent that
    is not a positive int (a block of no threads would launch nothing)."""
    if threads is None:
        return [DEFAULT_THREADS, 1, 1]
    dims = list(threads) if isinstance(threads, (list, tuple)) else [threads]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"threads must be an int or a list of 1 to 3 ints, got {threads!r}")
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
            raise ValueError(f"threads must be positive ints, got {dim!r} in {threads!r}")
        if dim <= 0:
            raise ValueError(f"threads must be positive, got {threads!r}")
    return [int(d) for d in dims] + [1] * (3 - len(dims))


# Blocks per cluster that every sm_90 GPU can launch (the portable cluster size).
MAX_CLUSTER_SIZE = 8


def _cluster_dims(cluster_dims, grid: list, fn: str) -> tuple | None:
    """cluster_dims as (x, y, z): an int n is (n, 1, 1), a shorter list is padded with 1s;
    (1, 1, 1) is no cluster (None). Each must divide its grid extent where that is known."""
    if cluster_dims is None:
        return None
    dims = list(cluster_dims) if isinstance(cluster_dims, (list, tuple)) else [cluster_dims]
    if not 1 <= len(dims) <= 3:
        raise ArgError("cluster_dims", f"{fn}: cluster_dims must be an int or 1 to 3 ints, got {cluster_dims!r}")
    for index, d in enumerate(dims):
        d = dims[index] = constant_int(d)
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d <= 0:
            raise ArgError("cluster_dims", f"{fn}: cluster_dims must be positive constant ints, got {cluster_dims!r}",
                           index if isinstance(cluster_dims, (list, tuple)) else None)
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    if dims == (1, 1, 1):
        return None
    if math.prod(dims) > MAX_CLUSTER_SIZE:
        raise ArgError("cluster_dims", f"{fn}: a cluster holds at most {MAX_CLUSTER_SIZE} blocks (the portable "
                       f"cluster size), got cluster_dims={dims} = {math.prod(dims)} blocks")
    for axis, d in enumerate(dims):
        extent = grid[axis] if axis < len(grid) else 1
        if isinstance(extent, numbers.Integral) and extent % d:
            raise ArgError("cluster_dims", f"{fn}: cluster_dims={dims} must divide the grid, but grid dimension "
                           f"{axis} is {extent}, not a multiple of {d}")
    return dims


@intrinsic("T.Kernel")
def Kernel(*blocks, threads=None, is_cpu=False, prelude=None, cluster_dims=None):  # noqa: N802 - TileLang's name
    """`with T.Kernel(gx[, gy[, gz]], threads=n) as bx` (or `as (bx, by[, bz])`): a kernel
    launched over a grid of 1 to 3 dimensions with n threads per block (1..1024, default
    128; or [x, y, z], a block of that shape); the names bound are the block indices.
    cluster_dims=(cx, cy, cz) (or an int, for (cx, 1, 1)) launches the blocks in thread
    block clusters of that shape (sm_90+; see T.ClusterKernel)."""
    return kernel_spec("T.Kernel", blocks, threads, is_cpu, prelude, cluster_dims)


def kernel_spec(fn: str, blocks: tuple, threads, is_cpu, prelude, cluster_dims) -> KernelSpec:
    """T.Kernel's and T.ClusterKernel's arguments checked; `fn` names the call in errors."""
    if not 1 <= len(blocks) <= 3:
        raise ArgError(None, f"{fn} takes 1 to 3 grid dimensions, got {len(blocks)}")
    grid = [_extent(b, fn, i) for i, b in enumerate(blocks)]
    for index, extent in enumerate(grid):
        if isinstance(extent, numbers.Integral) and extent <= 0:
            raise ArgError(index, f"{fn}: grid extents must be positive, got {extent} in grid dimension {index}")
    try:
        x, y, z = _normalize_threads(threads)
    except ValueError as err:
        raise ArgError("threads", f"{fn}: {err}") from None
    if x * y * z > MAX_THREADS:
        what = "an int in 1.." if (y, z) == (1, 1) else "extents whose product is at most "
        raise ArgError("threads", f"{fn}: threads must be {what}{MAX_THREADS}, got {threads!r}")
    if is_cpu:
        raise ArgError("is_cpu", f"{fn}: CPU kernels are not supported by Tegula")
    if prelude is not None:
        raise ArgError("prelude", f"{fn}: prelude source is not supported by Tegula")
    return KernelSpec(grid, x * y * z, _cluster_dims(cluster_dims, grid, fn), (x, y, z))


def _thread_index(frame, axis: int):
    """The index of the thread along axis 0, 1 or 2 (x, y, z) of the block's shape, from the
    flat index tx = x + X * (y + Y * z)."""
    dims = frame.thread_dims
    tx = frame.thread_var
    if dims[axis] == 1:
        return 0
    below = math.prod(dims[:axis])
    index = tx // below if below > 1 else tx
    return index % dims[axis] if math.prod(dims[axis + 1:]) > 1 else index


_THREAD_AXES = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}


@intrinsic("T.get_thread_binding")
def get_thread_binding(dim=0):
    """The thread's index in the block along dimension `dim` (0, 1, 2: threadIdx.x, .y, .z
    of the block's shape)."""
    frame = builder.current("T.get_thread_binding").require_kernel("T.get_thread_binding")
    if isinstance(dim, bool) or dim not in (0, 1, 2):
        raise ArgError("dim", f"T.get_thread_binding: dim must be 0, 1 or 2 (x, y, z), got {dim!r}")
    return _thread_index(frame, dim)


@intrinsic("T.thread_binding")
def thread_binding(start, stop=None, thread="threadIdx.x", annotations=None):
    """TileLang's `tx = T.thread_binding(0, threads, thread="threadIdx.x")`: the thread index
    along that dimension of the block (as T.get_thread_binding(0), (1) or (2)), whose
    extent `stop` must be; `T.thread_binding(threads, ...)` is the same with start 0."""
    fn = "T.thread_binding"
    frame = builder.current(fn).require_kernel(fn)
    if stop is None:
        start, stop = 0, start
    if thread not in _THREAD_AXES:
        raise ArgError("thread", f"{fn}: thread must be 'threadIdx.x', 'threadIdx.y' or 'threadIdx.z', got {thread!r}")
    axis = _THREAD_AXES[thread]
    extent = (frame.thread_dims)[axis]
    if start != 0 or stop != extent:
        raise ArgError("stop", f"{fn}: binds all the block's threads along {thread}, [0, {extent}); got "
                       f"[{start}, {stop}) (a range of threads is an `if` on T.get_thread_binding())")
    return _thread_index(frame, axis)


@intrinsic("T.get_block_binding")
def get_block_binding(dim=0):
    """The block index along grid dimension `dim`."""
    frame = builder.current("T.get_block_binding").require_kernel("T.get_block_binding")
    if not isinstance(dim, int) or not 0 <= dim < len(frame.block_vars):
        raise ArgError("dim", f"T.get_block_binding: dim must be in 0..{len(frame.block_vars) - 1}")
    return frame.block_vars[dim]


_BLOCK_AXES = {"blockIdx.x": 0, "blockIdx.y": 1, "blockIdx.z": 2}


@intrinsic("T.launch_thread")
def launch_thread(thread, extent):
    """TVM's `tx = T.launch_thread("threadIdx.x", n)` inside a T.Kernel: the index of the
    launch dimension `thread` ("threadIdx.x/y/z", "blockIdx.x/y/z"),
    whose extent must be the one T.Kernel launched along it."""
    fn = "T.launch_thread"
    frame = builder.current(fn).require_kernel(fn)
    if isinstance(extent, bool) or not isinstance(extent, (numbers.Integral, PrimExpr)):
        raise ArgError("extent", f"{fn}: extent must be an int, got {extent!r}")
    if thread in _THREAD_AXES:
        axis = _THREAD_AXES[thread]
        declared = (frame.thread_dims)[axis]
        if extent != declared:
            raise ArgError("extent", f"{fn}: {thread} spans the block's {declared} threads along it (T.Kernel's "
                           f"threads=), got extent {extent!r}")
        return _thread_index(frame, axis)
    if thread in _BLOCK_AXES:
        axis = _BLOCK_AXES[thread]
        if axis >= len(frame.grid):
            raise ArgError("thread", f"{fn}: the kernel's grid has {len(frame.grid)} dimension(s), so there is no "
                           f"{thread}")
        declared = frame.grid[axis]
        if isinstance(extent, numbers.Integral) and isinstance(declared, numbers.Integral) and extent != declared:
            raise ArgError("extent", f"{fn}: {thread} spans T.Kernel's grid extent {declared}, got {extent}")
        return frame.block_vars[axis]
    raise ArgError("thread", f"{fn}: thread must be 'threadIdx.x', 'threadIdx.y', 'threadIdx.z', 'blockIdx.x', "
                   f"'blockIdx.y' or 'blockIdx.z', got {thread!r}")
