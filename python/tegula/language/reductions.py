"""T.reduce_sum / max / min / abssum / absmax / bitand / bitor / bitxor and T.reduce: one
`reduce` tile op (src/ops/reduce.cc) from `buffer` into `out`, `buffer`'s shape without
the reduced dimension.

Either side may be a fragment or a shared-memory buffer (or a region of one), TileLang's
meaning: the op stages a shared side through a fragment it allocates, so a shared `out`
ends up holding the result once for every element, a fragment `out` in every thread that
holds a copy of the element."""
from __future__ import annotations

import numbers

from ..frontend.builder import intrinsic
from ..frontend.dtypes import is_int
from ..frontend.errors import ArgError
from ..frontend.values import region_of
from .tileops import _describe, _emit, _flag, _region

KINDS = ("sum", "abssum", "max", "absmax", "min", "bitand", "bitor", "bitxor")
_BITWISE = ("bitand", "bitor", "bitxor")
_SCOPES = ("fragment", "shared")


def _spanned(region) -> list | None:
    """The extents of a region other than 1, or None where one is not a constant."""
    out = []
    for extent in region.extents:
        if not isinstance(extent, numbers.Integral):
            return None
        if extent != 1:
            out.append(int(extent))
    return out


def _check_shape(name: str, src, dst, dim: int) -> None:
    # The result is the source without `dim`: (M, N) along 1 gives (M,), a 1-D source one
    # element. Only extents other than 1 are compared, so (M, 1) and (1, M) serve too.
    src_ext = list(src.extents)
    if not all(isinstance(e, numbers.Integral) for e in src_ext):
        return
    want = [int(e) for d, e in enumerate(src_ext) if d != dim and e != 1]
    got = _spanned(dst)
    if got is not None and got != want:
        want_text = ", ".join(map(str, want)) or "1"
        got_text = ", ".join(str(e) for e in dst.extents)
        raise ArgError("out", f"{name}: 'out' must have the shape of '{src.buffer.name}' without dimension {dim}, "
                       f"({want_text}), got ({got_text})")


def _side(value, name: str, arg: str):
    native = _region(value, name, arg)
    region = region_of(value)
    if region.buffer.scope not in _SCOPES:
        raise ArgError(arg, f"{name}: '{arg}' must be a fragment or a shared-memory buffer, '{region.buffer.name}' "
                       f"is {region.buffer.scope}")
    return native, region


def _emit_reduce(name: str, kind: str, buffer, out, dim, clear, batch, nan_propagate, annotations) -> None:
    src, src_region = _side(buffer, name, "buffer")
    dst, dst_region = _side(out, name, "out")
    rank = len(src[1])
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or not -rank <= dim < rank:
        raise ArgError("dim", f"{name}: dim must be an int in {-rank}..{rank - 1} for a {rank}-d "
                       f"buffer, got {dim!r}")
    # batch is TileLang's number of results per cross-thread combine, a speed knob: the
    # results are the same for every batch.
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1:
        raise ArgError("batch", f"{name}: batch must be an int >= 1, got {_describe(batch)}")
    if annotations is not None and not isinstance(annotations, dict):
        raise ArgError("annotations", f"{name}: annotations must be a dict, got {_describe(annotations)}")
    if nan_propagate is None and annotations:
        nan_propagate = annotations.get("nan_propagate")
    if kind in _BITWISE:
        for region, arg in ((src_region, "buffer"), (dst_region, "out")):
            if not (is_int(region.buffer.dtype) or region.buffer.dtype == "bool"):
                raise ArgError(arg, f"{name}: reduce_{kind} takes integer or bool buffers, '{region.buffer.name}' is "
                               f"{region.buffer.dtype}")
    attrs = {"kind": kind, "dim": int(dim) % rank, "clear": _flag(clear, name, "clear")}
    if nan_propagate is not None:
        if kind not in ("max", "min", "absmax"):
            raise ArgError("nan_propagate", f"{name}: nan_propagate applies to max, min and absmax only")
        attrs["nan_propagate"] = _flag(nan_propagate, name, "nan_propagate")
    _check_shape(name, src_region, dst_region, int(dim) % rank)
    _emit(name, "reduce", [src, dst], [], attrs)


def _reduce(kind: str):
    name = f"T.reduce_{kind}"

    @intrinsic(name)
    def reduce(buffer, out, dim=-1, clear=True, batch=1, nan_propagate=None, annotations=None):
        """T.reduce_<kind>(buffer, out, dim=-1, clear=True): reduces `buffer` (a fragment or
        shared memory) along `dim` into `out` (either too), `buffer`'s shape without that
        dimension; with clear=False the result is combined with what `out` holds. For max,
        min and absmax, nan_propagate=False drops NaN (TileLang's default); True or left out
        propagates it."""
        _emit_reduce(name, kind, buffer, out, dim, clear, batch, nan_propagate, annotations)

    if kind not in ("max", "min", "absmax"):  # NaN is no question for a sum: no nan_propagate
        plain = reduce

        @intrinsic(name)
        def reduce(buffer, out, dim=-1, clear=True, batch=1, annotations=None):
            _emit_reduce(name, kind, buffer, out, dim, clear, batch, None, annotations)

        reduce.__doc__ = plain.__doc__.split(" For max, min")[0]
    reduce.__name__ = reduce.__qualname__ = f"reduce_{kind}"
    return reduce


(reduce_max, reduce_min, reduce_sum, reduce_abssum, reduce_absmax, reduce_bitand, reduce_bitor,
 reduce_bitxor) = (_reduce(k) for k in ("max", "min", "sum", "abssum", "absmax", "bitand", "bitor", "bitxor"))


@intrinsic("T.reduce")
def reduce(buffer, out, reduce_type, dim, clear, batch=1, annotations=None):
    """T.reduce(buffer, out, reduce_type, dim, clear): T.reduce_<reduce_type>(buffer, out,
    dim, clear), reduce_type one of sum, abssum, max, absmax, min, bitand, bitor, bitxor."""
    if reduce_type not in KINDS:
        raise ArgError("reduce_type", f"T.reduce: reduce_type must be one of {', '.join(KINDS)}, got "
                       f"{_describe(reduce_type)}")
    _emit_reduce("T.reduce", reduce_type, buffer, out, dim, clear, batch, None, annotations)
