"""T.cumsum: the inclusive prefix sum of a shared or fragment tile along one dimension.

The tile op (src/ops/cumsum.cc) scans shared memory; a fragment side is staged through a
shared scratch tile with T.copy, as TileLang does (its language/scan_op.py)."""
from __future__ import annotations

import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.errors import ArgError
from ..frontend.values import BufferValue, region_of
from .tileops import _describe, _emit, _flag, _not_reducer, copy

_SCOPES = ("shared", "fragment")


def _scan_region(value, fn: str, arg: str):
    region = region_of(value)
    if region is None:
        raise ArgError(arg, f"{fn}: '{arg}' must be a shared or fragment buffer or a region of one (A[i:j, :]), "
                       f"got {_describe(value)}")
    _not_reducer(region.buffer, fn, arg)
    if region.buffer.scope not in _SCOPES:
        raise ArgError(arg, f"{fn}: '{arg}' must be a shared or fragment buffer, '{region.buffer.name}' is "
                       f"{region.buffer.scope}")
    if not all(isinstance(e, numbers.Integral) for e in region.extents):
        raise ArgError(arg, f"{fn}: the region of '{region.buffer.name}' must have constant extents, got "
                       f"{region!r}")
    return region


@intrinsic("T.cumsum")
def cumsum(src, dst=None, dim=0, reverse=False):
    """dst = the inclusive prefix sum of `src` along `dim` (a suffix sum with reverse=True),
    in place when dst is left out. src and dst are shared or fragment tiles (or regions of
    one) of the same extents; the running sum is kept in dst's dtype."""
    fn = "T.cumsum"
    s = _scan_region(src, fn, "src")
    d = s if dst is None else _scan_region(dst, fn, "dst")
    rank = len(s.extents)
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -rank <= dim < rank:
        raise ArgError("dim", f"{fn}: dim must be an int in {-rank}..{rank - 1} for a {rank}-d region, got {dim!r}",
                       kind=ValueError)
    if [int(e) for e in d.extents] != [int(e) for e in s.extents]:
        raise ArgError("dst", f"{fn}: dst must have the extents of src, {tuple(s.extents)}; got {tuple(d.extents)}",
                       kind=ValueError)
    attrs = {"dim": int(dim) % rank, "reverse": _flag(reverse, fn, "reverse")}
    if s.buffer.scope == "shared" and d.buffer.scope == "shared":
        _emit(fn, "cumsum", [s.native(), d.native()], [], attrs)
        return
    # A fragment side goes through a shared scratch tile of dst's dtype.
    scratch = builder.current(fn).allocate("cumsum_scratch", "shared", d.buffer.dtype,
                                           tuple(int(e) for e in s.extents), BufferValue)
    scan_in, scan_out = s, d
    if s.buffer.scope != "shared":
        copy(s, scratch)
        scan_in = scratch.full_region()
    if d.buffer.scope != "shared":
        scan_out = scratch.full_region()
    _emit(fn, "cumsum", [scan_in.native(), scan_out.native()], [], attrs)
    if d.buffer.scope != "shared":
        copy(scratch, d)
