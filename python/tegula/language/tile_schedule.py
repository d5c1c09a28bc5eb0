"""`T.PersistentTileScheduler`: which output tile each block of a persistent kernel works on.

    with T.Kernel(num_workers, threads=128) as worker:
        sched = T.PersistentTileScheduler(m_tiles, n_tiles, num_workers=num_workers, swizzle_size=8)
        sched.init(worker)
        while sched.valid():
            bx, by = sched.m_idx, sched.n_idx          # this iteration's tile
            ...
            sched.next_tile()

The m_tiles x n_tiles grid of tiles is numbered linearly and dealt out round robin: worker
w takes tiles w, w + num_workers, w + 2 num_workers, ... A linear number t becomes a tile
(m, n) in panels of `swizzle_size` columns (rows when column_major=False): the fast axis is
swept whole for each panel, so blocks running at once share operand tiles in L2.
Worked example, 4 x 2 tiles, column_major, swizzle 1: t = 0..7 gives (0,0) (1,0) (2,0)
(3,0) (0,1) (1,1) (2,1) (3,1). With cluster_size c the rows are clusters of c tiles and
m is the cluster row (the caller adds its rank in the cluster).

The state lives in four T.alloc_var int32 variables (`{name}_m_idx`, `_n_idx`,
`_linear_idx`, `_current_iter`), written by init and next_tile; `stateful=False` keeps no
state and offers only `coord(t)`, for loops that count the waves themselves.
"""
from __future__ import annotations

import inspect
import numbers

from .. import device
from ..frontend import builder
from ..frontend.errors import ArgError
from ..frontend.values import PrimExpr, VarBuffer, store
from .builtins import ceildiv
from .builtins import max as _max
from .builtins import min as _min

_STATE = ("m_idx", "n_idx", "linear_idx", "current_iter")


def _count(value, what: str, allow_expr: bool = True):
    if isinstance(value, PrimExpr) and allow_expr:
        if not value.expr.dtype.startswith(("int", "uint")):
            raise ArgError(what, f"T.PersistentTileScheduler: {what} must be an integer, got {value} ({value.expr.dtype})")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        kinds = "a positive int or an integer kernel value" if allow_expr else "a positive int"
        raise ArgError(what, f"T.PersistentTileScheduler: {what} must be {kinds}, got {value!r}")
    return int(value)


class PersistentTileScheduler:
    """The tile schedule of a persistent kernel (see the module docstring): `init(w)`,
    `valid()`, `next_tile()`, the current tile `m_idx` / `n_idx`, `current_iter` (how many
    tiles this worker has done) and `linear_idx`; `coord(t)` decodes any linear number."""

    def __init__(self, num_m_tiles, num_n_tiles, num_workers=None, swizzle_size=1, column_major=True,
                 cluster_size=1, stateful=True, name=None):
        frame = builder.current("T.PersistentTileScheduler")
        frame.require_kernel("T.PersistentTileScheduler")
        num_m_tiles = _count(num_m_tiles, "num_m_tiles")
        num_n_tiles = _count(num_n_tiles, "num_n_tiles")
        self.swizzle_size = _count(swizzle_size, "swizzle_size", allow_expr=False)
        self.cluster_size = _count(cluster_size, "cluster_size", allow_expr=False)
        if num_workers is None:
            num_workers = device.get_num_sms() // self.cluster_size
        self.num_workers = _count(num_workers, "num_workers")
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise ArgError("name", f"T.PersistentTileScheduler: name must be an identifier (a prefix of the state "
                           f"variables' names), got {name!r}")
        self._column_major = bool(column_major)
        self._stateful = bool(stateful)
        m_clusters = ceildiv(num_m_tiles, self.cluster_size)
        self.total_tiles = m_clusters * num_n_tiles
        self._primary, self._secondary = (m_clusters, num_n_tiles) if column_major else (num_n_tiles, m_clusters)
        self._vars = {}
        if self._stateful:
            prefix = f"{name}_" if name else ""
            for field in _STATE:
                self._vars[field] = frame.allocate(prefix + field, "local", "int32", (1,), VarBuffer)

    # ---- state ----
    def _var(self, field: str) -> VarBuffer:
        if not self._stateful:
            raise ValueError(f"T.PersistentTileScheduler(stateful=False) keeps no {field}: use sched.coord(tile_id), "
                             "or make it stateful")
        return self._vars[field]

    def _set(self, field: str, value) -> None:
        builder.current("T.PersistentTileScheduler").emit(store(self._var(field), [0], value))

    @property
    def m_idx(self):
        """The current tile's row (its cluster row with cluster_size > 1)."""
        return self._var("m_idx").load()

    @property
    def n_idx(self):
        """The current tile's column."""
        return self._var("n_idx").load()

    @property
    def linear_idx(self):
        """The current tile's linear number."""
        return self._var("linear_idx").load()

    @property
    def current_iter(self):
        """How many tiles this worker has moved past (0 for its first)."""
        return self._var("current_iter").load()

    # ---- the schedule ----
    def coord(self, tile_id):
        """(m, n) of linear tile number `tile_id`: expressions, no state read or written."""
        if isinstance(tile_id, bool) or not isinstance(tile_id, (numbers.Integral, PrimExpr)):
            raise TypeError(f"sched.coord: tile_id must be an int or an integer kernel value, got {tile_id!r}")
        primary, secondary, swizzle = self._primary, self._secondary, self.swizzle_size
        panel = primary * swizzle
        group = tile_id // panel
        base = group * swizzle
        # The last panel may be narrower; at least 1, so a tile past the end divides safely.
        width = _max(1, _min(swizzle, secondary - base))
        within = tile_id - group * panel
        fast, slow = within // width, base + within % width
        return (fast, slow) if self._column_major else (slow, fast)

    def _update(self) -> None:
        m, n = self.coord(self.linear_idx)
        self._set("m_idx", m)
        self._set("n_idx", n)

    def init(self, worker_id) -> None:
        """Starts worker `worker_id` (0 .. num_workers - 1) at its first tile."""
        if isinstance(worker_id, bool) or not isinstance(worker_id, (numbers.Integral, PrimExpr)):
            raise TypeError(f"sched.init: worker_id must be an int or an integer kernel value, got {worker_id!r}")
        self._set("current_iter", 0)
        self._set("linear_idx", worker_id)
        self._update()

    def next_tile(self) -> None:
        """Moves to this worker's next tile (num_workers further on)."""
        self._set("current_iter", self.current_iter + 1)
        self._set("linear_idx", self.linear_idx + self.num_workers)
        self._update()

    def valid(self):
        """Whether the current tile is inside the grid: `while sched.valid():`."""
        return self.linear_idx < self.total_tiles

    def __repr__(self):
        return f"<T.PersistentTileScheduler {self._primary}x{self._secondary} over {self.num_workers} workers>"


# Checked as a T.* call: a wrong keyword or argument is shown at the argument.
PersistentTileScheduler.__tegula_intrinsic__ = "T.PersistentTileScheduler"
PersistentTileScheduler.__tegula_signature__ = inspect.signature(PersistentTileScheduler)
