"""Barriers wider than a block, with TileLang's names and meaning: `T.sync_grid()` (every
block of the grid), and thread block clusters (sm_90+): `T.ClusterKernel`, the cluster
barrier (`T.cluster_arrive` / `T.cluster_wait` / `T.cluster_sync`), the block's rank in
its cluster and the compile-time cluster shape (`T.get_cluster_dims`, ...).

    with T.ClusterKernel(128, threads=128, cluster_dims=4) as bx:
        rank = T.block_rank_in_cluster()       # bx % 4
        T.cluster_sync()                       # the 4 blocks of the cluster meet

A cluster is a cluster_dims-shaped tile of the grid: block (x, y, z) has rank
x % cx + (y % cy) * cx + (z % cz) * cx * cy. A barrier here is reached by every thread of
every block it names, as in CUDA; a kernel with `T.sync_grid()` is launched cooperatively,
and a grid larger than the GPU holds at once is refused at launch.
"""
from __future__ import annotations

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.errors import ArgError
from ..frontend.values import call, ir
from .kernel import kernel_spec


@intrinsic("T.ClusterKernel")
def ClusterKernel(*blocks, cluster_dims, threads=None, prelude=None):  # noqa: N802 - TileLang's name
    """`with T.ClusterKernel(gx[, gy[, gz]], cluster_dims=(cx, cy, cz), threads=n) as bx`:
    T.Kernel whose blocks run in clusters of cx * cy * cz (at most 8) co-scheduled blocks
    (sm_90+). cluster_dims may be an int (cx, 1, 1); each must divide its grid extent."""
    return kernel_spec("T.ClusterKernel", blocks, threads, False, prelude, cluster_dims)


def _statement(fn: str, name: str) -> None:
    """A barrier statement; in a T.Parallel body it splits the loop (Builder.emit_barrier),
    the arrive halves too: each thread arrives once."""
    frame = builder.current(fn)
    frame.require_kernel(fn)
    if frame.pipelined:
        raise ArgError(None, f"{fn} inside a T.Pipelined loop: the pipeline loads later iterations' tiles before "
                       "this iteration's barrier, so they could miss what other blocks write before it; loop with "
                       "T.serial instead")
    frame.emit_barrier(ir().evaluate(call(name, [], "int32").expr), fn)


@intrinsic("T.sync_grid")
def sync_grid():
    """A barrier of the whole grid: every thread of every block reaches it before any
    goes on, and their global memory writes before it are visible after it
    (`cooperative_groups::this_grid().sync()`; the kernel is launched cooperatively)."""
    _statement("T.sync_grid", "sync_grid")


@intrinsic("T.cluster_arrive_relaxed")
def cluster_arrive_relaxed():
    """The arrive half of the cluster barrier, without ordering memory
    (`barrier.cluster.arrive.relaxed.aligned`); T.cluster_wait completes it."""
    _statement("T.cluster_arrive_relaxed", "cluster_arrive_relaxed")


@intrinsic("T.cluster_arrive")
def cluster_arrive():
    """The arrive half of the cluster barrier (`barrier.cluster.arrive.aligned`): this
    thread's earlier memory writes are visible to the cluster after the matching wait."""
    _statement("T.cluster_arrive", "cluster_arrive")


@intrinsic("T.cluster_wait")
def cluster_wait():
    """Waits until every thread of every block of the cluster has arrived
    (`barrier.cluster.wait.aligned`), after this thread's own T.cluster_arrive."""
    _statement("T.cluster_wait", "cluster_wait")


@intrinsic("T.cluster_sync")
def cluster_sync():
    """A barrier of the cluster: T.cluster_arrive then T.cluster_wait."""
    _statement("T.cluster_sync", "cluster_sync")


@intrinsic("T.block_rank_in_cluster")
def block_rank_in_cluster():
    """The block's rank in its cluster (`%cluster_ctarank`): 0 .. cluster size - 1, x
    fastest; 0 in a kernel without clusters."""
    builder.current("T.block_rank_in_cluster").require_kernel("T.block_rank_in_cluster")
    return call("block_rank_in_cluster", [], "int32")


# ---- the cluster shape, known when the kernel is written ----

def _frame(fn: str):
    return builder.current(fn).require_kernel(fn)


def _dim(dim, fn: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= 2:
        raise ArgError("dim", f"{fn}: dim must be 0, 1 or 2, got {dim!r}")
    return dim


@intrinsic("T.get_cluster_dims")
def get_cluster_dims():
    """The cluster shape [x, y, z] of the kernel ([1, 1, 1] without clusters)."""
    return list(_frame("T.get_cluster_dims").cluster_dims or (1, 1, 1))


@intrinsic("T.get_cluster_size")
def get_cluster_size():
    """Blocks per cluster: the product of the cluster dimensions."""
    x, y, z = _frame("T.get_cluster_size").cluster_dims or (1, 1, 1)
    return x * y * z


@intrinsic("T.get_cluster_id")
def get_cluster_id(dim=0):
    """The index of the block's cluster along `dim`: block index // cluster_dims[dim]."""
    fn = "T.get_cluster_id"
    frame, dim = _frame(fn), _dim(dim, fn)
    if dim >= len(frame.block_vars):
        return 0
    size = (frame.cluster_dims or (1, 1, 1))[dim]
    block = frame.block_vars[dim]
    return block if size == 1 else block // size


@intrinsic("T.get_cluster_ids")
def get_cluster_ids():
    """The cluster index along every grid dimension of the kernel."""
    frame = _frame("T.get_cluster_ids")
    return [get_cluster_id(d) for d in range(len(frame.block_vars))]


@intrinsic("T.get_cluster_extent")
def get_cluster_extent(dim=0):
    """Clusters along `dim`: ceil(grid extent / cluster_dims[dim])."""
    fn = "T.get_cluster_extent"
    frame, dim = _frame(fn), _dim(dim, fn)
    extent = frame.grid[dim] if dim < len(frame.grid) else 1
    size = (frame.cluster_dims or (1, 1, 1))[dim]
    return extent if size == 1 else (extent + size - 1) // size


@intrinsic("T.get_cluster_extents")
def get_cluster_extents():
    """Clusters along each of the three dimensions."""
    return [get_cluster_extent(d) for d in range(3)]
