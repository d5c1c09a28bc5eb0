"""The data behind a layout picture (tegula.tools.plot_layout draws it).

A fragment's layout says which thread holds each element and in which of its registers;
a shared buffer's says at which address each element is stored, and so in which bank.
Both come from the compiler (`Lowered.layouts()` in tegula._C: what layout inference and
the storage plan chose, read into a BufferLayout by tegula/buffer_layout.py) or, for a
T.Fragment or a swizzle kind on its own, from Python.

Shared-memory banks: 32 banks of 4 bytes, bank = (byte address / 4) mod 32. An access is
served 128 bytes per wavefront: a warp's 16-byte accesses in 4 phases of 8 threads, 8-byte
ones in 2 phases of 16, 4-byte ones in one phase of 32. Within a phase, threads reading
the same 4-byte word share it, but distinct words in one bank are served one after
another: a phase whose busiest bank holds w distinct words costs w wavefronts (a w-way
conflict, w - 1 more than one).

Worked example: a 64 x 64 float16 tile stored plain, and the "rows" access (thread t reads
the 16 bytes at column 0 of row t, as ldmatrix reads 8 rows at one 16-byte column): each
row is 128 bytes, so rows 0..7 of a phase start at addresses 0, 128, ..., 896, all in banks
0..3: 8 distinct words in each of those banks, an 8-way conflict, 7 extra wavefronts a
phase, 28 over the warp's 4 phases. Swizzled, row r's chunk 0 is stored at chunk r % 8:
the 8 rows of a phase cover all 32 banks once, no conflict.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..buffer_layout import BufferLayout, dtype_bytes

BANKS = 32
BANK_BYTES = 4
WAVEFRONT_BYTES = 128  # what shared memory serves at once: 32 banks x 4 bytes
WARP = 32
WARPGROUP = 128
STORAGES = ("plain", "swizzled", "panelled")
ACCESSES = ("rows", "contiguous")


def grid_of(shape) -> tuple[int, int]:
    """The rows x columns a buffer is drawn as: leading dimensions flattened into rows; a
    1-D buffer of n elements as one row when n <= 32, else in rows of the largest power
    of two up to 32 dividing n (cell (r, c) is element r * cols + c): (128,) is 4 x 32."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 1:
        n = shape[0]
        cols = n if n <= WARP else next(w for w in (32, 16, 8, 4, 2, 1) if n % w == 0)
        return n // cols, cols
    return int(np.prod(shape[:-1])), shape[-1]


def from_fragment(fragment, name: str = "fragment", dtype: str = "float32") -> BufferLayout:
    """A T.Fragment (tegula/layout.py) as a BufferLayout."""
    holders = [sorted(h) for h in fragment.table]
    return BufferLayout(name=name, scope="fragment", dtype=dtype, shape=tuple(fragment.shape),
                        threads=fragment.threads, registers=fragment.slots,
                        description=repr(fragment), holders=holders)


def from_storage(storage: str, shape, dtype: str, name: str | None = None) -> BufferLayout:
    """A rows x cols shared tile of `dtype` stored as `storage` ("swizzled", the layout
    T.layout.make_swizzled_layout asks for; "panelled", a wgmma operand's; "plain"),
    addressed as the generated code would address it."""
    from .. import env

    if storage not in STORAGES:
        raise ValueError(f"plot_layout: layout kind must be one of {STORAGES}, got {storage!r}")
    shape = tuple(int(d) for d in shape)
    if len(shape) != 2 or min(shape) <= 0:
        raise ValueError(f"plot_layout: a {storage} layout needs a 2-D shape (rows, cols), got {shape!r}")
    offsets = env.native().shared_offsets(shape[0], shape[1], dtype_bytes(dtype), storage)
    return BufferLayout(name=name or f"{storage}_{dtype}_{shape[0]}x{shape[1]}", scope="shared", dtype=str(dtype),
                        shape=shape, storage=storage, stored_shape=shape, offsets=list(offsets))


# ---- what a picture shows --------------------------------------------------------------

@dataclass
class LayoutPicture:
    """What plot_layout drew: the buffer's layout as arrays over the drawn grid (rows x
    cols: the buffer's leading dimensions flattened; see grid_of), and where the PNG went.
    `window` is the part of the grid drawn ((row0, row1), (col0, col1)); `pixel_of(r, c)`
    is the (x, y) pixel of cell (r, c)'s centre in the written PNG; `figure` and `axes`
    are the matplotlib objects drawn (the grid's cells are the axes' data units)."""

    name: str
    dtype: str
    shape: tuple
    grid: tuple
    path: str | None = field(default=None, init=False)
    window: tuple | None = field(default=None, init=False)
    title: str = field(default="", init=False)
    figure: object = field(default=None, init=False, repr=False)
    axes: object = field(default=None, init=False, repr=False)
    _pixels: tuple | None = field(default=None, init=False, repr=False)

    def pixel_of(self, row: int, col: int) -> tuple[float, float]:
        if self._pixels is None:
            raise RuntimeError("pixel_of: nothing was drawn (plot_layout with path=None and draw=False)")
        x0, y0, dx, dy = self._pixels
        return x0 + (col + 0.5) * dx, y0 + (row + 0.5) * dy


@dataclass
class FragmentPicture(LayoutPicture):
    """A register layout. `holders[e]`: every (thread, register) holding element e (row-
    major), threads ascending; over the grid: `thread` the first holder, `register` its
    register, `copies` how many threads hold the element (> 1: replicated)."""

    threads: int = 0
    registers: int = 0
    description: str = ""
    holders: list = field(default_factory=list, repr=False)
    thread: np.ndarray = field(default=None, repr=False)
    register: np.ndarray = field(default=None, repr=False)
    copies: np.ndarray = field(default=None, repr=False)

    @classmethod
    def of(cls, layout: BufferLayout) -> FragmentPicture:
        rows, cols = grid_of(layout.shape)
        first = [h[0] if h else (-1, -1) for h in layout.holders]
        pic = cls(name=layout.name, dtype=layout.dtype, shape=layout.shape, grid=(rows, cols),
                  threads=layout.threads, registers=layout.registers, description=layout.description,
                  holders=[list(h) for h in layout.holders])
        pic.thread = np.array([t for t, _ in first], dtype=np.int64).reshape(rows, cols)
        pic.register = np.array([s for _, s in first], dtype=np.int64).reshape(rows, cols)
        pic.copies = np.array([len(h) for h in layout.holders], dtype=np.int64).reshape(rows, cols)
        return pic

    def holders_of(self, *index) -> list:
        """The (thread, register) pairs holding the element at `index` (buffer indices)."""
        flat = int(np.ravel_multi_index(index, self.shape))
        return self.holders[flat]


@dataclass
class SharedPicture(LayoutPicture):
    """A shared-memory layout and one warp's access to it. Over the grid: `offset` (elements
    from the buffer's start), `address` (bytes: the buffer's base in the kernel's shared
    memory + offset x element size), `bank`. `access[t]` lists the cells thread t reads;
    `conflict` marks cells whose bank holds more than one distinct 4-byte word in the same
    phase; `conflict_ways` is the worst phase's busiest bank (1: conflict-free) and
    `conflicts` the wavefronts the access takes beyond one a phase, over all phases."""

    storage: str = "plain"
    elem_bytes: int = 2
    base: int = 0
    offset: np.ndarray = field(default=None, repr=False)
    address: np.ndarray = field(default=None, repr=False)
    bank: np.ndarray = field(default=None, repr=False)
    access_name: str = ""
    vector_bytes: int = 16
    access: list = field(default_factory=list, repr=False)
    conflict: np.ndarray = field(default=None, repr=False)
    conflict_ways: int = 1
    conflicts: int = 0

    @classmethod
    def of(cls, layout: BufferLayout, access="rows", vector_bytes: int = 16, start=(0, 0)) -> SharedPicture:
        rows, cols = grid_of(layout.shape)
        e = layout.elem_bytes
        pic = cls(name=layout.name, dtype=layout.dtype, shape=layout.shape, grid=(rows, cols),
                  storage=layout.storage, elem_bytes=e, base=layout.base)
        pic.offset = np.array(layout.offsets, dtype=np.int64).reshape(rows, cols)
        pic.address = layout.base + pic.offset * e
        pic.bank = (pic.address // BANK_BYTES) % BANKS
        pic.vector_bytes = vector_bytes
        pic.access_name = access if isinstance(access, str) else "custom"
        pic.access = warp_access(access, (rows, cols), e, vector_bytes, start)
        pic.conflict, pic.conflict_ways, pic.conflicts = bank_conflicts(pic.address, pic.access, e, vector_bytes)
        return pic


def warp_access(access, grid, elem_bytes: int, vector_bytes: int = 16, start=(0, 0)) -> list:
    """The cells each of a warp's 32 threads reads, one vector of `vector_bytes` each:

    "rows": thread t reads row start_row + t at columns start_col.. (one row a thread, as
        ldmatrix reads 8 rows at one 16-byte column a phase, and as a copy whose threads
        each own a row does); a tile of fewer rows continues at the next vector's columns.
    "contiguous": thread t reads the t-th vector in row-major order from `start` (a
        vectorised copy's walk over a tile).
    a list of 32 (row, col) pairs: thread t reads the vector starting there.
    Threads whose vector would leave the tile read nothing."""
    rows, cols = grid
    per = max(1, vector_bytes // elem_bytes)  # elements in one thread's vector
    r0, c0 = (int(v) for v in start)
    if isinstance(access, str):
        if access not in ACCESSES:
            raise ValueError(f"plot_layout: access must be one of {ACCESSES} or a list of (row, col) per thread, "
                             f"got {access!r}")
        starts = []
        for t in range(WARP):
            if access == "rows":
                span = max(1, min(WARP, rows - r0))
                starts.append((r0 + t % span, c0 + (t // span) * per))
            else:
                flat = r0 * cols + c0 + t * per
                starts.append((flat // cols, flat % cols))
    else:
        starts = [tuple(int(v) for v in s) for s in access]
        if len(starts) > WARP:
            raise ValueError(f"plot_layout: a custom access gives at most {WARP} (row, col) starts, got {len(starts)}")
    out = []
    for r, c in starts:
        inside = 0 <= r < rows and 0 <= c and c + per <= cols
        out.append([(r, c + i) for i in range(per)] if inside else [])
    return out


def bank_conflicts(address: np.ndarray, access: list, elem_bytes: int, vector_bytes: int = 16):
    """(conflict mask over the grid, worst ways, extra wavefronts) of `access` (warp_access)
    on the byte addresses `address`. Threads are served in phases of 128 / vector_bytes."""
    per_phase = max(1, WAVEFRONT_BYTES // max(vector_bytes, BANK_BYTES))
    mask = np.zeros(address.shape, dtype=bool)
    worst, extra = 1, 0
    for p in range(0, len(access), per_phase):
        words = {}  # bank -> {word: [cells]}
        for cells in access[p:p + per_phase]:
            for r, c in cells:
                a = int(address[r, c])
                for w in range(a // BANK_BYTES, (a + elem_bytes - 1) // BANK_BYTES + 1):
                    words.setdefault(w % BANKS, {}).setdefault(w, []).append((r, c))
        ways = max((len(ws) for ws in words.values()), default=1)
        worst = max(worst, ways)
        extra += ways - 1
        for ws in words.values():
            if len(ws) > 1:
                for cells in ws.values():
                    for r, c in cells:
                        mask[r, c] = True
    return mask, worst, extra


def is_compiled_kernel(obj) -> bool:
    """A compiled kernel (tegula.jit / tegula.compile): what has its buffers' layouts."""
    return callable(getattr(obj, "layout_of", None)) and callable(getattr(obj, "layouts", None))
