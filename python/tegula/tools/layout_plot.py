"""`plot_layout`: a picture of a register (fragment) layout or a shared-memory layout.

    import tegula.tools as tools
    pic = tools.plot_layout(kernel, "acc.png", buffer="acc_s")   # a compiled kernel's buffer
    pic = kernel.plot_layout("acc_s", "acc.png")                  # the same
    pic = tools.plot_layout(T.Fragment((16, 16), forward_thread_fn=f), "frag.png")
    pic = tools.plot_layout("swizzled", "sw.png", shape=(64, 64), dtype="float16")

A fragment is drawn as a grid of its elements (leading dimensions flattened into rows),
each cell coloured by the thread holding it (`thread_color`: the same colour for a
thread in every picture) and labelled T<thread> / R<register>; thick lines outline each
warp's cells and thicker ones each warpgroup's; an element several threads hold shows the
first thread and the count (T4x8) and a corner mark.

A shared buffer is drawn as a grid of its elements, each cell labelled with its offset
(elements from the buffer's start) and coloured by its bank; one warp's access (see
layout_data.warp_access: by default "rows", thread t reading 16 bytes of row t, the way
ldmatrix reads operand tiles) is outlined, and cells whose bank serves more than one
distinct word in the same phase are hatched red, the worst conflict in the title.

The function returns the data it drew (FragmentPicture / SharedPicture, layout_data.py)
and writes a PNG when given a path. matplotlib (Agg, no pyplot) is imported only here.

TileLang's `plot_layout(layout, save_directory=, name=)` spelling is accepted too: it writes
<save_directory>/<name>.png.
"""
from __future__ import annotations

import colorsys
import os

import numpy as np

from ..jit import _LAYOUT_PLOT
from .layout_data import (BANKS, STORAGES, WARP, WARPGROUP, BufferLayout, FragmentPicture, SharedPicture,
                          from_fragment, from_storage, is_compiled_kernel)

FULL_LABELS = 1024   # cells up to which every cell gets its full label
SHORT_LABELS = 4096  # ... and up to which a short one (thread / offset only)
MAX_SIDE = 256       # rows or columns drawn at most; a larger buffer shows its first MAX_SIDE
_GOLDEN = 0.6180339887498949


def thread_color(thread: int) -> tuple[float, float, float]:
    """The RGB (0..1) colour of `thread` in every fragment picture: hues a golden-ratio
    step apart, so neighbouring threads differ strongly, and saturation and value varied
    by warp, so that the 128 threads of a warpgroup all differ (by at least 6 levels of
    255 in some channel); pale enough for black text."""
    if thread < 0:
        return (0.85, 0.85, 0.85)
    warp = thread // WARP
    return colorsys.hsv_to_rgb((thread * _GOLDEN) % 1.0, 0.35 + 0.15 * (warp % 3), 0.97 - 0.06 * (warp % 2))


def bank_color(bank: int) -> tuple[float, float, float]:
    """The RGB (0..1) colour of shared-memory bank `bank` (0..31)."""
    return colorsys.hsv_to_rgb((bank % BANKS) / BANKS, 0.42, 0.97)


def _layout_of(obj, buffer, kernel_index, shape, dtype, name) -> BufferLayout:
    """What plot_layout was given, as a BufferLayout."""
    from ..layout import Fragment, Layout

    if isinstance(obj, BufferLayout):
        return obj
    if is_compiled_kernel(obj):
        if buffer is None:
            names = ", ".join(obj.layouts(kernel_index or 0))
            raise ValueError(f"plot_layout: give buffer=<name> to draw a buffer of kernel {obj!r}; "
                             f"its buffers: {names}")
        return obj.layout_of(buffer, kernel_index)
    if isinstance(obj, Fragment):
        return from_fragment(obj, name or "T.Fragment", dtype or "float32")
    if isinstance(obj, Layout):  # T.layout.make_swizzled_layout(buf)
        buf = obj.buffer
        return from_storage(obj.kind, shape or buf.shape, dtype or str(buf.dtype), name or buf.name)
    if isinstance(obj, str) and obj in STORAGES:
        if shape is None:
            raise ValueError(f"plot_layout: the layout kind {obj!r} needs shape=(rows, cols) (and dtype=)")
        return from_storage(obj, shape, dtype or "float16", name)
    raise TypeError(f"plot_layout: expected a T.Fragment, a compiled kernel with buffer=<name>, a BufferLayout "
                    f"(kernel.layout_of(name)) or a layout kind {STORAGES}, got {type(obj).__name__} {obj!r}")


def plot_layout(layout, path: str | None = None, *, buffer: str | None = None, kernel_index: int | None = None,
                shape=None, dtype: str | None = None, name: str | None = None, access="rows",
                vector_bytes: int = 16, access_start=(0, 0), labels: bool | None = None, window=None,
                dpi: int = 100, title: str | None = None, draw: bool = True, save_directory: str | None = None):
    """Draws `layout` and returns what was drawn (FragmentPicture or SharedPicture).

    layout: a T.Fragment; a compiled JITKernel with `buffer=` (kernel_index picks among a
        prim_func's kernels; default: the first that has the buffer); a BufferLayout
        (kernel.layout_of(name)); or a shared layout kind, "swizzled" (what
        T.layout.make_swizzled_layout asks for), "panelled" (a wgmma operand's) or
        "plain", with shape=(rows, cols) and dtype=.
    path: where to write the PNG (None: nothing is written; a directory: <name>.png in it).
    access, vector_bytes, access_start: the warp access whose bank conflicts a shared
        picture shows ("rows", "contiguous" or 32 (row, col) starts; see warp_access).
    labels: text in the cells (default: when the drawn grid is small enough to read).
    window: ((row0, row1), (col0, col1)) of the grid to draw (default: all, up to 256 a side).
    draw: False returns the data without building a figure.
    save_directory (with name): TileLang's spelling; writes <save_directory>/<name>.png.
    """
    data = _layout_of(layout, buffer, kernel_index, shape, dtype, name)
    if data.scope == "fragment":
        pic = FragmentPicture.of(data)
    else:
        pic = SharedPicture.of(data, access, vector_bytes, access_start)
    if save_directory is not None:
        os.makedirs(save_directory, exist_ok=True)
        path = os.path.join(save_directory, f"{name or 'layout'}.png")
    elif path is not None and os.path.isdir(path):
        path = os.path.join(path, f"{name or data.name}.png")
    if draw or path:
        _draw(pic, path, labels, window, dpi, title)
    return pic


# ---- drawing -----------------------------------------------------------------------------

def _window(grid, window):
    rows, cols = grid
    if window is None:
        return (0, min(rows, MAX_SIDE)), (0, min(cols, MAX_SIDE))
    (r0, r1), (c0, c1) = window
    if not (0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= cols):
        raise ValueError(f"plot_layout: window {window!r} is not inside the {rows} x {cols} grid")
    return (int(r0), int(r1)), (int(c0), int(c1))


def _figure(rows, cols, labels, dpi, bottom_in, title):
    """A figure whose axes hold rows x cols square cells under `title` (wrapped to the
    figure's width), and the axes."""
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cell = 0.62 if labels == "full" else 0.34 if labels == "short" else min(0.25, 14.0 / max(rows, cols))
    width, height = cols * cell, rows * cell
    fig_w = max(width + 1.0, 8.0)
    chars = int(fig_w * 12)  # 9-point text: about 12 characters an inch
    lines = [w for line in title.split("\n") for w in textwrap.wrap(line, chars) or [""]]
    top = 0.35 + 0.17 * len(lines)
    fig_h = height + top + bottom_in
    fig = Figure(figsize=(fig_w, fig_h), dpi=dpi)
    FigureCanvasAgg(fig)
    fig.text(0.15 / fig_w, 1 - 0.15 / fig_h, "\n".join(lines), ha="left", va="top", fontsize=9)
    x0 = (fig_w - width) / 2
    ax = fig.add_axes((x0 / fig_w, bottom_in / fig_h, width / fig_w, height / fig_h))
    return fig, ax


def _label_mode(cells, labels):
    if labels is False:
        return None
    if labels is True:
        return "full" if cells <= SHORT_LABELS else "short"
    return "full" if cells <= FULL_LABELS else "short" if cells <= SHORT_LABELS else None


def _boundaries(ids, r0, c0):
    """Line segments (in data coordinates) between neighbouring cells of different ids,
    and around the drawn region."""
    rows, cols = ids.shape
    segs = []
    for r, c in zip(*np.nonzero(ids[:, 1:] != ids[:, :-1])):
        segs.append(((c0 + c + 1, r0 + r), (c0 + c + 1, r0 + r + 1)))
    for r, c in zip(*np.nonzero(ids[1:, :] != ids[:-1, :])):
        segs.append(((c0 + c, r0 + r + 1), (c0 + c + 1, r0 + r + 1)))
    return segs


def _axes_common(ax, rows, cols, r0, c0, lines, flat_rows=0):
    """Limits, ticks (every row and column of small grids) and, for small grids, white
    lines between cells. flat_rows: label rows with their first element's index (a 1-D
    buffer drawn in rows of flat_rows elements)."""
    ax.set_xlim(c0, c0 + cols)
    ax.set_ylim(r0 + rows, r0)
    xs, ys = range(0, cols, max(1, cols // 16)), range(0, rows, max(1, rows // 16))
    ax.set_xticks([c0 + c + 0.5 for c in xs], [str(c0 + c) for c in xs], fontsize=7)
    ax.set_yticks([r0 + r + 0.5 for r in ys], [str((r0 + r) * (flat_rows or 1)) for r in ys], fontsize=7)
    ax.tick_params(length=0)
    if lines and max(rows, cols) <= 64:
        from matplotlib.collections import LineCollection

        grid = [((c0 + c, r0), (c0 + c, r0 + rows)) for c in range(cols + 1)]
        grid += [((c0, r0 + r), (c0 + cols, r0 + r)) for r in range(rows + 1)]
        ax.add_collection(LineCollection(grid, colors="white", linewidths=0.5))


def _finish(pic, fig, ax, path, r0, c0, rows, cols, title, dpi):
    pic.title = title
    pic.figure, pic.axes = fig, ax
    pic.window = ((r0, r0 + rows), (c0, c0 + cols))
    fig.canvas.draw()
    height = fig.get_figheight() * dpi
    (xa, ya), (xb, yb) = ax.transData.transform([(c0, r0), (c0 + 1, r0 + 1)])
    # Pixel rows of the PNG count down from the top; cell (r, c) of the grid is at
    # column c - c0, row r - r0 of the drawn window.
    dx, dy = xb - xa, (height - yb) - (height - ya)
    pic._pixels = (xa - c0 * dx, (height - ya) - r0 * dy, dx, dy)
    if path:
        fig.savefig(path, dpi=dpi)
        pic.path = str(path)


def _shown(pic, r0, r1, c0, c1) -> str:
    """What part of the buffer the grid shows, when that needs saying."""
    out = ""
    if len(pic.shape) == 1 and pic.grid[0] > 1:
        out = f" (drawn in rows of {pic.grid[1]})"
    if (r1 - r0, c1 - c0) != tuple(pic.grid):
        out += f"; showing rows {r0}-{r1 - 1}, columns {c0}-{c1 - 1}"
    return out


def _draw(pic, path, labels, window, dpi, title):
    if isinstance(pic, FragmentPicture):
        _draw_fragment(pic, path, labels, window, dpi, title)
    else:
        _draw_shared(pic, path, labels, window, dpi, title)


def _draw_fragment(pic: FragmentPicture, path, labels, window, dpi, title):
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    (r0, r1), (c0, c1) = _window(pic.grid, window)
    rows, cols = r1 - r0, c1 - c0
    thread = pic.thread[r0:r1, c0:c1]
    copies = pic.copies[r0:r1, c0:c1]
    mode = _label_mode(rows * cols, labels)
    most = int(pic.copies.max()) if pic.copies.size else 0
    title = title or (f"{pic.name}: fragment {pic.dtype}{list(pic.shape)} over {pic.threads} threads x "
                      f"{pic.registers} registers{_shown(pic, r0, r1, c0, c1)}\n"
                      "colour: thread; label: T<thread> R<register>"
                      + (f"; replicated up to {most} copies" if most > 1 else "") + f"\n{pic.description}")
    fig, ax = _figure(rows, cols, mode, dpi, 0.9, title)
    palette = {t: thread_color(int(t)) for t in np.unique(thread)}
    image = np.array([[palette[t] for t in row] for row in thread])
    ax.imshow(image, extent=(c0, c1, r1, r0), interpolation="nearest", aspect="auto")
    _axes_common(ax, rows, cols, r0, c0, lines=True, flat_rows=pic.grid[1] if len(pic.shape) == 1 else 0)
    warp_lines = _boundaries(np.where(thread < 0, -1, thread // WARP), r0, c0)
    group_lines = _boundaries(np.where(thread < 0, -1, thread // WARPGROUP), r0, c0)
    ax.add_collection(LineCollection(warp_lines, colors="black", linewidths=1.4))
    ax.add_collection(LineCollection(group_lines, colors="black", linewidths=3.2))
    for side in ax.spines.values():
        side.set_linewidth(3.2)
    replicated = np.argwhere(copies > 1)
    if len(replicated):
        ax.scatter(c0 + replicated[:, 1] + 0.85, r0 + replicated[:, 0] + 0.15, marker="v", s=12 if mode else 4,
                   color="black", linewidths=0)
    if mode:
        size = 7 if mode == "full" else 5.5
        for r in range(rows):
            for c in range(cols):
                t, n, s = int(thread[r, c]), int(copies[r, c]), int(pic.register[r0 + r, c0 + c])
                head = f"T{t}" + (f"x{n}" if n > 1 else "")
                text = f"{head}\nR{s}" if mode == "full" else (head if n > 1 else str(t))
                ax.text(c0 + c + 0.5, r0 + r + 0.5, text, ha="center", va="center", fontsize=size)
    handles = [Line2D([], [], color="black", lw=1.4, label=f"warp ({WARP} threads)"),
               Line2D([], [], color="black", lw=3.2, label=f"warpgroup ({WARPGROUP} threads)"),
               Line2D([], [], color="black", marker="v", lw=0, label="replicated: T<first> x <copies>")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, frameon=False)
    _finish(pic, fig, ax, path, r0, c0, rows, cols, title, dpi)


def _draw_shared(pic: SharedPicture, path, labels, window, dpi, title):
    from matplotlib.patches import Rectangle

    (r0, r1), (c0, c1) = _window(pic.grid, window)
    rows, cols = r1 - r0, c1 - c0
    mode = _label_mode(rows * cols, labels)
    verdict = ("conflict-free" if pic.conflict_ways == 1 else
               f"{pic.conflict_ways}-way bank conflict, {pic.conflicts} extra wavefronts (red)")
    title = title or (f"{pic.name}: shared {pic.dtype}{list(pic.shape)}, {pic.storage}"
                      f"{_shown(pic, r0, r1, c0, c1)}\nlabel: element offset; colour: bank; outlined: warp "
                      f"access '{pic.access_name}' ({pic.vector_bytes} B a thread): {verdict}")
    fig, ax = _figure(rows, cols, mode, dpi, 1.2, title)
    bank = pic.bank[r0:r1, c0:c1]
    image = np.array([[bank_color(int(b)) for b in row] for row in bank])
    ax.imshow(image, extent=(c0, c1, r1, r0), interpolation="nearest", aspect="auto")
    _axes_common(ax, rows, cols, r0, c0, lines=True, flat_rows=pic.grid[1] if len(pic.shape) == 1 else 0)
    for t, cells in enumerate(pic.access):
        if not cells:
            continue
        (r, c), last = cells[0], cells[-1][1]
        if not (r0 <= r < r1 and c0 <= c and last < c1):
            continue
        bad = any(pic.conflict[rr, cc] for rr, cc in cells)
        ax.add_patch(Rectangle((c, r), last - c + 1, 1, fill=False, lw=2.2 if bad else 1.6,
                               edgecolor="red" if bad else "black", hatch="///" if bad else None))
        if mode:
            ax.text(c + 0.08, r + 0.12, f"t{t}", ha="left", va="top", fontsize=5, color="black")
    if mode:
        size = 7 if mode == "full" else 5.5
        for r in range(rows):
            for c in range(cols):
                ax.text(c0 + c + 0.5, r0 + r + 0.55, str(int(pic.offset[r0 + r, c0 + c])), ha="center",
                        va="center", fontsize=size)
    key = fig.add_axes((0.1, 0.25 / fig.get_figheight(), 0.8, 0.25 / fig.get_figheight()))
    key.imshow(np.array([[bank_color(b) for b in range(BANKS)]]), aspect="auto", extent=(0, BANKS, 1, 0))
    key.set_yticks([])
    key.set_xticks([b + 0.5 for b in range(0, BANKS, 4)], [str(b) for b in range(0, BANKS, 4)], fontsize=7)
    key.set_title("bank = (byte address / 4) mod 32", fontsize=8)
    _finish(pic, fig, ax, path, r0, c0, rows, cols, title, dpi)


_LAYOUT_PLOT.append(plot_layout)  # JITKernel.plot_layout draws with it
