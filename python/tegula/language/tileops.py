"""Tile operations: each emits one `_C.ir.tile_op` (docs/internals.md lists ops and attrs),
but for T.copy with a local buffer on one side, which emits every thread's own loops.

A tile op argument names a region: a bare buffer is all of it, `A[i:j, :]` a slice, and a
corner `A[by * bM, k * bK]` a region of extent 1 per dimension whose extents the copy op
takes from the other side.
"""
from __future__ import annotations

import numbers

from .. import layout as layout_module
from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.errors import ArgError
from ..frontend.values import (BufferValue, LoadValue, PrimExpr, RegionValue, VarBuffer, call, cast_value, ir,
                               is_number, region_of, store, to_expr)
from .reducers import ReducerBuffer, clear_reducer
from .types import GemmWarpPolicy


def _emit(fn: str, op: str, regions: list, args: list = (), attrs: dict | None = None) -> None:
    stmt = ir().tile_op(op, regions, list(args), attrs or {})
    builder.current(fn).emit(stmt)


def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}"


def _region(value, fn: str, arg: str):
    region = region_of(value)
    if region is None:
        raise ArgError(arg, f"{fn}: '{arg}' must be a buffer, a buffer region (A[i:j, :]) or an "
                       f"element (A[i, j]), got {_describe(value)}")
    _not_reducer(region.buffer, fn, arg)
    return region.native()


def _not_reducer(buffer, fn: str, arg: str) -> None:
    if isinstance(buffer, ReducerBuffer) and not buffer.readable:
        raise ArgError(arg, f"{fn}: illegal use of reducer '{buffer.name}': it holds each thread's partial until "
                       f"T.finalize_reducer (T.reducer_init opens it, T.reducer_update adds to it)")


def _opens_reducer(value) -> bool:
    """T.clear / T.fill of a whole reducer: TileLang's first form opens it."""
    return isinstance(value, ReducerBuffer)


def _scalar_for(value, buffer: BufferValue, fn: str, arg: str):
    if isinstance(value, VarBuffer):
        value = value.load()
    if not (isinstance(value, PrimExpr) or is_number(value)):
        raise ArgError(arg, f"{fn}: '{arg}' must be a number or a scalar expression, got {_describe(value)}")
    return cast_value(value, buffer.dtype).expr


def _flag(value, fn: str, arg: str) -> int:
    if not isinstance(value, (bool, numbers.Integral)):
        raise ArgError(arg, f"{fn}: '{arg}' must be True or False, got {_describe(value)}")
    return int(bool(value))


def _buffer_of(value, fn: str, arg: str) -> BufferValue:
    region = region_of(value)
    if region is None:
        raise ArgError(arg, f"{fn}: '{arg}' must be a buffer or a buffer region, got {_describe(value)}")
    _not_reducer(region.buffer, fn, arg)
    return region.buffer


@intrinsic("T.copy")
def copy(src, dst, coalesced_width=None, disable_tma=False, eviction_policy=None, annotations=None):
    """Copies region `src` to region `dst` (same extents, dimensions of 1 aside), between any
    of global, shared, fragment and local memory, converting the dtype; accesses past a
    global tensor's edge are masked."""
    # coalesced_width, disable_tma, eviction_policy and the annotations (such as
    # {"prefer_instruction": "tma"}) are TileLang hints; Tegula's copy lowering picks vector
    # width and engine itself (the bulk copy engine wherever it can), so they are accepted
    # and ignored.
    if annotations is not None and not isinstance(annotations, dict):
        raise ArgError("annotations", f"T.copy: annotations must be a dict of hints such as "
                       f"{{'prefer_instruction': 'tma'}}, got {_describe(annotations)}")
    regions = [_region(src, "T.copy", "src"), _region(dst, "T.copy", "dst")]
    if "local" in (region_of(src).buffer.scope, region_of(dst).buffer.scope):
        _thread_copy(region_of(src), region_of(dst))
        return
    _emit("T.copy", "copy", regions)


def _widen(corner: list, other: list) -> list:
    """A corner region's extents given the other side's, trailing dimensions aligned (the
    rule of src/ops/region.cc, widen)."""
    out = list(corner)
    if len(other) <= len(out):
        out[len(out) - len(other):] = other
        return out
    spanned = [e for e in other if not (isinstance(e, numbers.Integral) and e == 1)]
    if len(spanned) > len(out):
        raise ArgError(None, f"T.copy: a region of rank {len(out)} cannot take the other side's {len(spanned)} "
                       "spanned dimensions")
    out[len(out) - len(spanned):] = spanned
    return out


def _in_bounds(buffer: BufferValue, indices: list):
    """The condition that indices lie inside a global buffer, or None where they must."""
    cond = None
    for index, extent in zip(indices, buffer.shape):
        if isinstance(index, numbers.Integral) and isinstance(extent, numbers.Integral):
            continue  # constant indices were checked against constant shapes already
        c = index < extent
        cond = c if cond is None else cond & c
    return cond


def _thread_copy(src: RegionValue, dst: RegionValue) -> None:
    """T.copy with a local buffer on one side: a local buffer is each thread's own, so every
    thread copies the whole region (TileLang's meaning), in unrolled loops; accesses past a
    global tensor's edge are masked as in any T.copy."""
    fn = "T.copy"
    for arg, region in (("src", src), ("dst", dst)):
        if region.buffer.scope == "fragment":
            raise ArgError(arg, f"{fn}: a copy between a local buffer and a fragment ('{region.buffer.name}') is "
                           "not supported: a local buffer is every thread's own, a fragment is spread over threads")
    ones = (lambda ext: all(isinstance(e, numbers.Integral) and e == 1 for e in ext))
    s_ext, d_ext = list(src.extents), list(dst.extents)
    if ones(s_ext) and not ones(d_ext):
        s_ext = _widen(s_ext, d_ext)
    if ones(d_ext) and not ones(s_ext):
        d_ext = _widen(d_ext, s_ext)
    for arg, region, ext in (("src", src, s_ext), ("dst", dst, d_ext)):
        if not all(isinstance(e, numbers.Integral) for e in ext):
            raise ArgError(arg, f"{fn}: region extents must be constants (got a symbolic extent in "
                           f"'{region.buffer.name}')")
    s_dims = [d for d, e in enumerate(s_ext) if e != 1]
    d_dims = [d for d, e in enumerate(d_ext) if e != 1]
    spans = [s_ext[d] for d in s_dims]
    if spans != [d_ext[d] for d in d_dims]:
        raise ArgError(None, f"{fn}: the source region of '{src.buffer.name}' spans {tuple(spans)} but the "
                       f"destination region of '{dst.buffer.name}' spans {tuple(d_ext[d] for d in d_dims)}")
    loop_vars = [PrimExpr.var(f"c{k}") for k in range(len(spans))]
    src_idx, dst_idx = list(src.mins), list(dst.mins)
    for var, sd, dd in zip(loop_vars, s_dims, d_dims):
        src_idx[sd] = src_idx[sd] + var
        dst_idx[dd] = dst_idx[dd] + var
    value = LoadValue(src.buffer, src_idx)
    if src.buffer.scope == "global" and (cond := _in_bounds(src.buffer, src_idx)) is not None:
        value = PrimExpr(ir().select(cond.expr, value.expr, cast_value(0, src.buffer.dtype).expr), True, value.dyn)
    stmt = store(dst.buffer, dst_idx, value)
    if dst.buffer.scope == "global" and (cond := _in_bounds(dst.buffer, dst_idx)) is not None:
        stmt = ir().if_(cond.expr, stmt, None)
    for var, extent in reversed(list(zip(loop_vars, spans))):
        stmt = ir().for_(var.expr, ir().int_imm(0, "int32"), ir().int_imm(extent, "int32"), "unrolled", stmt)
    builder.current(fn).emit(stmt)


@intrinsic("T.transpose")
def transpose(src, dst):
    """dst[j, i] = src[i, j] for a 2-D region `src` and `dst` of the transposed extents
    (shared, fragment or global; the dtype converted): a T.Parallel loop over dst."""
    fn = "T.transpose"
    s, d = (region_of(v) for v in (src, dst))
    for arg, value, region in (("src", src, s), ("dst", dst, d)):
        if region is None:
            raise ArgError(arg, f"{fn}: '{arg}' must be a buffer or a buffer region, got {_describe(value)}")
        _not_reducer(region.buffer, fn, arg)
        if region.buffer.scope == "local":
            raise ArgError(arg, f"{fn}: '{region.buffer.name}' is a local buffer, every thread's own: transpose "
                           "shared or fragment tiles")
        if len(region.extents) != 2 or not all(isinstance(e, numbers.Integral) for e in region.extents):
            raise ArgError(arg, f"{fn}: '{arg}' must be a 2-D region of constant extents, got {region!r}")
    if list(d.extents) != list(reversed(s.extents)):
        raise ArgError("dst", f"{fn}: dst must have src's extents reversed, {tuple(reversed(s.extents))}; got "
                       f"{tuple(d.extents)} for src {tuple(s.extents)}")
    b = builder.current(fn)
    i, j = (PrimExpr.var(b.unique_name(n)) for n in ("transpose_i", "transpose_j"))
    stmt = store(d.buffer, [d.mins[0] + i, d.mins[1] + j], LoadValue(s.buffer, [s.mins[0] + j, s.mins[1] + i]))
    for var, extent in ((j, d.extents[1]), (i, d.extents[0])):
        stmt = ir().for_(var.expr, ir().int_imm(0, "int32"), ir().int_imm(extent, "int32"), "parallel", stmt)
    b.emit(stmt)


@intrinsic("T.fill")
def fill(buffer, value):
    """Sets every element of a region to `value`, converted to the buffer's dtype. On a
    T.alloc_reducer, every thread's partials (TileLang's first form: language/reducers.py)."""
    if _opens_reducer(buffer):
        return clear_reducer(buffer, value, "T.fill")
    target = _buffer_of(buffer, "T.fill", "buffer")
    _emit("T.fill", "fill", [_region(buffer, "T.fill", "buffer")], [_scalar_for(value, target, "T.fill", "value")])


@intrinsic("T.im2col")
def im2col(img, col, nhw_step, c_step, kernel, stride, dilation, pad, eviction_policy=None, annotations=None):
    """The input tile of a 2-D convolution computed as a GEMM: `col` (block_M, block_K)
    gets rows nhw_step * block_M.. of the (N*OH*OW, KH*KW*C) matrix of the NHWC image
    `img`, columns c_step * block_K.. (taps in (kh, kw, c) order); padding reads 0.
    kernel, stride, dilation and pad are Python ints (a square kernel)."""
    image, tile = _buffer_of(img, "T.im2col", "img"), _buffer_of(col, "T.im2col", "col")
    if image.scope != "global" or len(image.shape) != 4:
        raise ArgError("img", f"T.im2col: img must be a 4-D global tensor (N, H, W, C), got {image!r}")
    if tile.scope not in ("shared", "fragment") or len(tile.shape) != 2:
        raise ArgError("col", f"T.im2col: col must be a 2-D shared or fragment tile, got {tile!r}")
    attrs = {}
    for name, value, least in (("kernel", kernel, 1), ("stride", stride, 1), ("dilation", dilation, 1), ("pad", pad, 0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
            raise ArgError(name, f"T.im2col: {name} must be a Python int >= {least}, got {value!r}")
        attrs[name] = int(value)
    steps = []
    for name, value in (("nhw_step", nhw_step), ("c_step", c_step)):
        if isinstance(value, VarBuffer):
            value = value.load()
        ok = isinstance(value, PrimExpr) and value.expr.dtype.startswith(("int", "uint"))
        if not ok and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise ArgError(name, f"T.im2col: {name} must be an integer (a block index), got {_describe(value)}")
        steps.append(to_expr(value, "int32"))
    _emit("T.im2col", "im2col", [_region(img, "T.im2col", "img"), _region(col, "T.im2col", "col")], steps, attrs)


c2d_im2col = im2col  # TileLang's older name


@intrinsic("T.clear")
def clear(buffer):
    """T.fill(buffer, 0)."""
    if _opens_reducer(buffer):
        return clear_reducer(buffer, 0, "T.clear")
    target = _buffer_of(buffer, "T.clear", "buffer")
    _emit("T.clear", "fill", [_region(buffer, "T.clear", "buffer")], [_scalar_for(0, target, "T.clear", "buffer")])


def _policy(value) -> str:
    if isinstance(value, GemmWarpPolicy):
        return value.value
    if isinstance(value, str) and value in GemmWarpPolicy.__members__:
        return value
    names = ", ".join(f"T.GemmWarpPolicy.{n}" for n in GemmWarpPolicy.__members__)
    raise ArgError("policy", f"T.gemm: policy must be one of {names}, got {value!r}")


def _clear_condition(value, fn: str):
    """clear_accum as (constant flag, run-time condition or None): True / False, or a
    kernel value tested at run time (`clear_accum=(k == 0)`), a bool or an int (non-zero
    clears)."""
    if isinstance(value, VarBuffer):
        value = value.load()
    if isinstance(value, PrimExpr):
        dtype = str(value.expr.dtype)
        if dtype != "bool" and not (dtype.startswith("int") or dtype.startswith("uint")):
            raise ArgError("clear_accum", f"{fn}: 'clear_accum' must be True, False or a bool (or int) condition, "
                                          f"got a {dtype} value {value}")
        if value.expr.const is not None:
            return int(bool(value.expr.const)), None
        return 0, (value if dtype == "bool" else value != 0)
    if not isinstance(value, (bool, numbers.Integral)):
        raise ArgError("clear_accum", f"{fn}: 'clear_accum' must be True, False or a kernel condition such as "
                                      f"(k == 0), got {_describe(value)}")
    return int(bool(value)), None


@intrinsic("T.gemm")
def gemm(A, B, C, transpose_A=False, transpose_B=False, policy=GemmWarpPolicy.Square,  # noqa: N803
         clear_accum=False, k_pack=1, wg_wait=0):
    """C += A @ B on tensor cores (transposes as asked; C starts from zero with
    clear_accum=True, or where a run-time condition such as clear_accum=(k == 0) holds):
    wgmma on sm_90a, ldmatrix + mma.sync elsewhere."""
    # wg_wait is TileLang's manual wgmma wait depth; Tegula's lowering places the waits.
    if isinstance(k_pack, bool) or k_pack not in (1, 2):
        raise ArgError("k_pack", f"T.gemm: k_pack must be 1 or 2, got {k_pack!r}")
    regions = [_region(A, "T.gemm", "A"), _region(B, "T.gemm", "B"), _region(C, "T.gemm", "C")]
    clear, clear_if = _clear_condition(clear_accum, "T.gemm")
    attrs = {
        "transpose_A": _flag(transpose_A, "T.gemm", "transpose_A"),
        "transpose_B": _flag(transpose_B, "T.gemm", "transpose_B"),
        "clear_accum": clear,
        "policy": _policy(policy),
        "k_pack": int(k_pack),
    }
    # A run-time clear_accum is the op's argument (ops/gemm.cc expands it).
    _emit("T.gemm", "gemm", regions, [] if clear_if is None else [clear_if.expr], attrs)


@intrinsic("T.gemm_sp")
def gemm_sp(A_sparse, E, B, C, transpose_A=False, transpose_E=False, transpose_B=False,  # noqa: N803
            policy=GemmWarpPolicy.Square, clear_accum=False, wg_wait=0, annotations=None):
    """C += A @ B where A is 2:4 sparse along K, given as its kept elements A_sparse (M x K/2)
    and their positions E (M x K/F, F the bits of E's integers; the layout
    tegula.cuda.intrinsics.sparse_layout names): mma.sp on the sparse tensor cores.
    A_sparse is a shared tile or a fragment, E and B shared tiles."""
    # wg_wait is TileLang's wgmma.sp wait depth: Tegula runs T.gemm_sp on mma.sp, which waits.
    fn = "T.gemm_sp"
    if isinstance(wg_wait, bool) or not isinstance(wg_wait, numbers.Integral):
        raise ArgError("wg_wait", f"{fn}: wg_wait must be an int, got {_describe(wg_wait)}")
    if annotations is not None and not isinstance(annotations, dict):
        raise ArgError("annotations", f"{fn}: annotations must be a dict, got {_describe(annotations)}")
    names = ("A_sparse", "E", "B", "C")
    regions = [_region(v, fn, n) for v, n in zip((A_sparse, E, B, C), names)]
    for value, name, scopes in ((A_sparse, "A_sparse", ("shared", "fragment")), (E, "E", ("shared",)),
                                (B, "B", ("shared",))):
        buf = _buffer_of(value, fn, name)
        if buf.scope not in scopes:
            where = "a shared tile (T.alloc_shared)" + (" or a fragment" if len(scopes) > 1 else "")
            raise ArgError(name, f"{fn}: '{name}' must be {where}, got {buf.scope} '{buf.name}'")
    attrs = {
        "transpose_A": _flag(transpose_A, fn, "transpose_A"),
        "transpose_E": _flag(transpose_E, fn, "transpose_E"),
        "transpose_B": _flag(transpose_B, fn, "transpose_B"),
        "clear_accum": _flag(clear_accum, fn, "clear_accum"),
        "policy": _policy(policy),
    }
    _emit(fn, "gemm_sp", regions, [], attrs)


# TileLang's memory-order names and ids (the C++ std::memory_order order).
MEMORY_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 2, "release": 3, "acq_rel": 4, "seq_cst": 5}


@intrinsic("T.atomic_add")
def atomic_add(dst, value, memory_order=None, return_prev=False, use_tma=False, annotations=None):
    """dst += value atomically, for an element or elementwise for a region. With
    `memory_order`, each add has that order at gpu scope (`atom.<order>.gpu.add`; seq_cst
    is a `fence.sc.gpu` then an acquire add); without, it is relaxed. `use_tma` (TileLang's
    sm_90 bulk reduction) and `annotations` are hints Tegula's lowering does not need."""
    fn = "T.atomic_add"
    dst_region = _region(dst, fn, "dst")
    target = _buffer_of(dst, fn, "dst")
    attrs = {}
    if memory_order is not None:
        if not isinstance(memory_order, str) or memory_order not in MEMORY_ORDERS:
            names = ", ".join(repr(n) for n in MEMORY_ORDERS)
            raise ArgError("memory_order", f"{fn}: memory_order must be one of {names} (or None), "
                           f"got {memory_order!r}")
        attrs["memory_order"] = MEMORY_ORDERS[memory_order]
    _flag(use_tma, fn, "use_tma")
    if _flag(return_prev, fn, "return_prev"):
        return _atomic_add_prev(dst, value, target, attrs.get("memory_order"))
    if isinstance(value, (BufferValue, RegionValue)) and not isinstance(value, VarBuffer):
        _emit(fn, "atomic_add", [dst_region, _region(value, fn, "value")], [], attrs)
    else:
        # A scalar (an element load included): the op adds it to the one element of dst.
        _emit(fn, "atomic_add", [dst_region], [_scalar_for(value, target, fn, "value")], attrs)


def _atomic_add_lanes(lanes: int):
    name = f"T.atomic_addx{lanes}"

    @intrinsic(name)
    def fn(dst, value, return_prev=False, memory_order=None):
        """dst[0:n] += value[0:n] atomically, element by element: dst and value name the
        first of n consecutive elements along the last dimension (TileLang's pointer form)."""
        if _flag(return_prev, name, "return_prev"):
            raise ArgError("return_prev", f"{name}: return_prev=True is not supported; use T.atomic_add(..., "
                           "return_prev=True) on each element")
        if isinstance(dst, VarBuffer) or not isinstance(dst, LoadValue):
            raise ArgError("dst", f"{name}: dst must be an element (buf[i, j]), the first of {lanes}, got {_describe(dst)}")
        if isinstance(value, VarBuffer) or not isinstance(value, LoadValue):
            raise ArgError("value", f"{name}: value must be an element of a buffer (buf[i, j]), the first of {lanes}, "
                           f"got {_describe(value)}")
        for lane in range(lanes):
            d = LoadValue(dst.buffer, list(dst.indices[:-1]) + [dst.indices[-1] + lane])
            v = LoadValue(value.buffer, list(value.indices[:-1]) + [value.indices[-1] + lane])
            atomic_add(d, v, memory_order=memory_order)

    fn.__name__ = fn.__qualname__ = f"atomic_addx{lanes}"
    return fn


atomic_addx2, atomic_addx4 = _atomic_add_lanes(2), _atomic_add_lanes(4)


def _atomic_add_prev(dst, value, target: BufferValue, order):
    """T.atomic_add(dst, value, return_prev=True): the value dst held before the add, as an
    expression. The add is the call atomic_add(dst, value[, order]), whose result is the old
    value; it is stored into a fresh per-thread variable where the intrinsic is evaluated,
    and the expression reads that variable, so the add happens exactly once, in program
    order, however often (or whether) the result is used."""
    fn = "T.atomic_add"
    if isinstance(dst, VarBuffer) or not isinstance(dst, LoadValue):
        raise ArgError("dst", f"{fn}: with return_prev=True, dst must be one element (buf[i, j]), got {_describe(dst)}")
    if isinstance(value, (BufferValue, RegionValue)) and not isinstance(value, VarBuffer):
        raise ArgError("value", f"{fn}: with return_prev=True, value must be a scalar, got {_describe(value)}")
    args = [dst, PrimExpr(_scalar_for(value, target, fn, "value"))]
    if order is not None:
        args.append(order)
    b = builder.current(fn)
    prev = b.allocate(f"{target.name}_prev", "local", target.dtype, (1,), VarBuffer)
    b.emit(store(prev, [0], call("atomic_add", args, target.dtype)))
    return prev.load()


@intrinsic("T.annotate_layout")
def annotate_layout(layout_map):
    """Fixes buffers' layouts: {shared_buf: T.make_swizzled_layout(shared_buf)} or
    {fragment: T.Fragment(...)}."""
    if not isinstance(layout_map, dict):
        raise ArgError("layout_map", f"T.annotate_layout takes a dict {{buffer: layout}}, got {_describe(layout_map)}")
    for buffer, layout in layout_map.items():
        if not isinstance(buffer, BufferValue):
            raise ArgError("layout_map", f"T.annotate_layout: keys must be buffers, got {_describe(buffer)}")
        if isinstance(layout, layout_module.Fragment):
            _annotate_fragment(buffer, layout)
            continue
        if not isinstance(layout, layout_module.Layout):
            raise ArgError("layout_map", f"T.annotate_layout: the layout of {buffer.name} must come from "
                           f"T.Layout, T.layout.make_swizzled_layout or T.Fragment, got {_describe(layout)}")
        if layout.kind == "row_major":
            continue  # the default layout of a shared tile
        args = []
        if layout.kind == "map":
            if buffer.scope != "global":
                raise ArgError("layout_map", f"T.annotate_layout: a T.Layout places the elements of a global tensor; "
                               f"'{buffer.name}' is in {buffer.scope} memory, whose layout Tegula chooses "
                               f"(T.layout.make_swizzled_layout asks for the swizzle of a shared tile)")
            if len(layout.shape) != len(buffer.shape) or any(
                    not _same_dim(a, b) for a, b in zip(layout.shape, buffer.shape)):
                raise ArgError("layout_map", f"T.annotate_layout: the T.Layout for '{buffer.name}' has shape "
                               f"{list(layout.shape)}, the tensor {list(buffer.shape)}")
            variables, positions = layout.positions()
            args = variables + positions
        _emit("T.annotate_layout", "annotate_layout", [buffer.full_region().native()], args, {"layout": layout.kind})


@intrinsic("T.annotate_min_blocks_per_sm")
def annotate_min_blocks_per_sm(min_blocks):
    """The kernel asks ptxas to fit `min_blocks` blocks on an SM at once (the second
    argument of __launch_bounds__): registers are capped at 64K / (min_blocks * threads)
    a thread."""
    fn = "T.annotate_min_blocks_per_sm"
    if isinstance(min_blocks, bool) or not isinstance(min_blocks, numbers.Integral) or not 1 <= min_blocks <= 32:
        raise ArgError("min_blocks", f"{fn}: min_blocks must be an int in 1..32 (blocks on one SM), got "
                       f"{_describe(min_blocks)}")
    builder.current(fn).require_kernel(fn)
    _emit(fn, "annotate_min_blocks_per_sm", [], [], {"blocks": int(min_blocks)})


@intrinsic("T.annotate_safe_value")
def annotate_safe_value(safe_value_map):
    """{A: v}: a read of global tensor A past its edge gives v (converted to A's dtype)
    instead of 0, in the whole kernel: T.Parallel loops, T.copy, scalar code. Writes past
    the edge are skipped, as always."""
    fn = "T.annotate_safe_value"
    if not isinstance(safe_value_map, dict):
        raise ArgError("safe_value_map", f"{fn} takes a dict {{tensor: value}}, got {_describe(safe_value_map)}")
    for buffer, value in safe_value_map.items():
        if not isinstance(buffer, BufferValue) or buffer.scope != "global":
            raise ArgError("safe_value_map", f"{fn}: keys must be global tensors (the kernel's parameters), got "
                           f"{_describe(buffer)}")
        if isinstance(value, PrimExpr) and value.expr.const is not None:
            value = value.expr.const
        if not is_number(value):
            raise ArgError("safe_value_map", f"{fn}: the value for '{buffer.name}' must be a constant number, got "
                           f"{_describe(value)}")
        _emit(fn, "annotate_safe_value", [buffer.full_region().native()], [cast_value(value, buffer.dtype).expr])


def _same_dim(a, b) -> bool:
    """Two sizes that are the same number, or the same symbolic size."""
    if isinstance(a, PrimExpr) or isinstance(b, PrimExpr):
        return isinstance(a, PrimExpr) and isinstance(b, PrimExpr) and a.expr.same_as(b.expr)
    return a == b


def _annotate_fragment(buffer: BufferValue, layout) -> None:
    """A T.Fragment for a fragment fixes its layout (layout inference takes it as given); for
    a local buffer, which every thread holds whole, only its register numbering could
    change, so it must keep the elements apart and then means nothing more."""
    fn = "T.annotate_layout"
    if buffer.scope not in ("fragment", "local"):
        raise ArgError("layout_map", f"{fn}: T.Fragment is a register layout, for T.alloc_fragment or "
                       f"T.alloc_local buffers; '{buffer.name}' is in {buffer.scope} memory")
    if tuple(buffer.shape) != layout.shape:
        raise ArgError("layout_map", f"{fn}: the T.Fragment for '{buffer.name}' has shape {list(layout.shape)}, "
                       f"the buffer {list(buffer.shape)}")
    if buffer.scope == "local":
        register = {}
        for flat, holders in enumerate(layout.table):
            other = register.setdefault(holders[0][1], flat)
            if other != flat:
                raise ArgError("layout_map", f"{fn}: local buffer '{buffer.name}' is every thread's own, whole; the "
                               f"T.Fragment given maps its elements {layout.element(other)} and "
                               f"{layout.element(flat)} to the same register {holders[0][1]} (give a "
                               f"forward_index_fn that keeps them apart, or use T.alloc_fragment)")
        return
    threads = builder.current(fn).require_kernel(fn).threads
    if layout.threads > threads:
        flat = next(f for f, holders in enumerate(layout.table) if any(t >= threads for t, _ in holders))
        raise ArgError("layout_map", f"{fn}: the T.Fragment for '{buffer.name}' puts element "
                       f"{layout.element(flat)} in thread {max(t for t, _ in layout.table[flat])}, but the "
                       f"kernel has {threads} threads")
    _emit(fn, "annotate_layout", [buffer.full_region().native()], [],
          {"layout": "fragment", "table": layout.encode(), "registers": layout.slots})


@intrinsic("T.use_swizzle")
def use_swizzle(panel_size, order="row", enable=True):
    """Launches the blocks of a 2-D grid in panels of `panel_size` rows (or columns with
    order="col"), so that blocks running together share data in L2."""
    if isinstance(panel_size, bool) or not isinstance(panel_size, int) or panel_size <= 0:
        raise ArgError("panel_size", f"T.use_swizzle: panel_size must be a positive int, got {panel_size!r}")
    if order not in ("row", "col"):
        raise ArgError("order", f"T.use_swizzle: order must be 'row' or 'col', got {order!r}")
    if enable:
        _emit("T.use_swizzle", "use_swizzle", [], [], {"panel_size": panel_size, "order": order})


@intrinsic("T.annotate_pass_configs")
def annotate_pass_configs(configs):
    """Pass configs of the function (tilelang.PassConfigKey -> value), as if given to
    tilelang.compile / @tilelang.jit, which override them key by key. Written at the top
    of the function, outside the T.Kernel blocks; recorded in func.attrs."""
    if not isinstance(configs, dict):
        raise ArgError("configs", f"T.annotate_pass_configs: configs must be a dict of pass-config keys, got "
                       f"{type(configs).__name__}")
    target = builder.current("T.annotate_pass_configs")
    if target.blocks:
        raise ArgError(None, "T.annotate_pass_configs belongs at the top of the function, outside `with T.Kernel`")
    merged = dict(target.func_attrs.get("tilelang_pass_configs", {}))
    merged.update(configs)
    target.func_attrs["tilelang_pass_configs"] = merged


@intrinsic("T.annotate_compile_flags")
def annotate_compile_flags(flags):
    """Compiler flags of the function, as if given to tilelang.compile(compile_flags=...):
    `--use_fast_math` turns on fast math; NVRTC's other options are fixed by the target.
    Written at the top of the function; recorded in func.attrs."""
    if isinstance(flags, str):
        flags = [flags]
    if not isinstance(flags, (list, tuple)) or not all(isinstance(f, str) for f in flags):
        raise ArgError("flags", f"T.annotate_compile_flags: flags must be a list of strings, got {flags!r}")
    target = builder.current("T.annotate_compile_flags")
    if target.blocks:
        raise ArgError(None, "T.annotate_compile_flags belongs at the top of the function, outside `with T.Kernel`")
    known = list(target.func_attrs.get("tilelang_compile_flags", []))
    target.func_attrs["tilelang_compile_flags"] = known + list(flags)


@intrinsic("T.print")
def print(obj, msg=""):  # noqa: A001 - TileLang's name
    """Device printf of a scalar, or of every element of a buffer. The IR has no string
    expressions, so the message rides in the call's op name: "print:<msg>"."""
    op = f"print:{msg}" if msg else "print"
    target = builder.current("T.print")
    if isinstance(obj, VarBuffer):
        obj = obj.load()
    if isinstance(obj, PrimExpr) or is_number(obj):
        target.emit(ir().evaluate(call(op, [obj], "int32").expr))
        return
    if not isinstance(obj, BufferValue):
        raise ArgError("obj", f"T.print: 'obj' must be a scalar or a buffer, got {_describe(obj)}")
    # One loop per dimension; a fragment's elements live in many threads, so each
    # thread prints its own (a parallel loop), the others print from every thread.
    kind = "parallel" if obj.scope == "fragment" else "serial"
    loop_vars = [PrimExpr.var(f"{obj.name}_i{d}") for d in range(obj.ndim)]
    body = ir().evaluate(call(op, [LoadValue(obj, loop_vars)], "int32").expr)
    for var, extent in reversed(list(zip(loop_vars, obj.shape))):
        body = ir().for_(var.expr, ir().int_imm(0, "int32"), cast_value(extent, "int32").expr, kind, body)
    target.emit(body)


# Not a tile op, but also a statement: `T.evaluate(expr)` keeps an expression's effect.
@intrinsic("T.evaluate")
def evaluate(value):
    """Keeps an expression as a statement, for its effect."""
    if isinstance(value, PrimExpr):
        builder.current("T.evaluate").emit(ir().evaluate(value.expr))
