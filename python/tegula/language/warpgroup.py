"""`T.ws` / `T.WarpSpecialize`: code that only some warp groups of the block run
(TileLang's tilelang.language warpgroup frame).

    with T.Kernel(grid, threads=256) as bx:
        with T.ws(1):                 # warp group 1: threads [128, 256)
            ...                        # producer
        with T.ws(0):                 # warp group 0: threads [0, 128)
            ...                        # consumer

A warp group is 128 consecutive threads of the block; `T.ws(0, 1)` names the union of
its groups. The scope is the branch TileLang makes of it, `if 128 <= tx < 256:` on the
block's thread index, so tile code inside (T.copy, T.gemm, T.Parallel, ...) is divided
among the scope's threads as under any thread guard (transform/scope_thread_guards.cc).
Tegula takes the groups as one contiguous range of the block's threads: a union with a
gap, or a group past the block's threads, is an error at the argument.
"""
from __future__ import annotations

import numbers

from ..frontend import builder
from ..frontend.builder import intrinsic
from ..frontend.errors import ArgError
from ..frontend.requests import WarpSpecializeSpec
from ..frontend.values import PrimExpr

WARP_GROUP_SIZE = 128  # threads of a warp group on every NVIDIA GPU that has them


def _group_index(value, position: int, fn: str) -> int:
    if isinstance(value, PrimExpr) and value.expr.const is not None and "int" in str(value.expr.dtype):
        value = int(value.expr.const)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ArgError(position, f"{fn}: a warp group index must be a constant int >= 0, got {value!r}")
    return int(value)


@intrinsic("T.WarpSpecialize")
def WarpSpecialize(*warp_group_idx):  # noqa: N802 - TileLang's name
    """`with T.ws(g, ...):` runs its body in warp groups g, ... of the block only (128
    threads each, g * 128 <= tx < (g + 1) * 128); the groups must make one contiguous
    range of the block's threads."""
    fn = "T.ws"
    frame = builder.current(fn).require_kernel(fn)
    if not warp_group_idx:
        raise ArgError(None, f"{fn}: name at least one warp group, e.g. T.ws(0) for threads [0, "
                             f"{WARP_GROUP_SIZE})")
    groups = [_group_index(g, i, fn) for i, g in enumerate(warp_group_idx)]
    count = -(-frame.threads // WARP_GROUP_SIZE)  # the last group may be partial
    for position, g in enumerate(groups):
        if g >= count:
            raise ArgError(position, f"{fn}: warp group {g} is threads [{g * WARP_GROUP_SIZE}, "
                                     f"{(g + 1) * WARP_GROUP_SIZE}), past the block's {frame.threads} threads "
                                     f"(warp groups 0..{count - 1})")
    distinct = sorted(set(groups))
    if distinct[-1] - distinct[0] + 1 != len(distinct):
        missing = sorted(set(range(distinct[0], distinct[-1] + 1)) - set(distinct))
        raise ArgError(None, f"{fn}{tuple(groups) if len(groups) > 1 else '(' + str(groups[0]) + ')'}: the warp "
                             f"groups must be one contiguous range of threads, but group(s) {missing} between them "
                             "are left out: write one T.ws scope per contiguous range")
    lo = distinct[0] * WARP_GROUP_SIZE
    hi = min((distinct[-1] + 1) * WARP_GROUP_SIZE, frame.threads)
    return WarpSpecializeSpec(tuple(groups), lo, hi, frame.threads)


ws = WarpSpecialize  # TileLang's short name
