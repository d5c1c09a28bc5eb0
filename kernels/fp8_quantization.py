"""Activation quantization to 8-bit floats with float32 scales, per token or per group of
columns (DeepSeek-V3's and DeepGEMM's 1 x 128 activation groups), and the same fused
behind an RMSNorm.

The convention, one formula everywhere (`quantize_fp8_reference` is it in torch):

    amax  = max |x| over the token's row (per token) or over one group of `group_size`
            columns of it (per group), in float32
    scale = max(amax, AMAX_FLOOR) / fp8_max          fp8_max: 448 (e4m3fn), 57344 (e5m2)
            with scale_ue8m0, rounded up to a power of two (DeepGEMM's UE8M0 scales)
    q     = saturate(x / scale), rounded to nearest even       x ≈ q * scale

AMAX_FLOOR = 1e-4, as DeepSeek's reference casts use, so a row of zeros gives the scale
1e-4 / fp8_max and q = 0, never 0/0. NaN propagates as the formula does in torch: a NaN
makes its row's (group's) amax and scale NaN, so the whole row (group) of q is NaN. An
inf makes the scale inf: the finite values of that row quantize to 0 and the inf to NaN
(inf / inf). Saturation only clips the float32 rounding of x / scale (at most one float32
ulp past fp8_max): the formula never leaves the range otherwise. With scale_ue8m0 the kernel
multiplies by 1 / scale, which for a power of two is x / scale to the bit.

The kernels: one pass over x. A block holds `blk_m` rows (or row segments) in registers
(`_common.plan_rows`), reduces |x| with warp shuffles, and writes q in 16-byte vectors
(16 fp8 values a thread where the row allows it) and one float32 scale per row or group.
Per-group quantization of a K that is a multiple of the group size runs the per-token
kernel on x viewed as (M·K/group, group): each "row" is one group, so a block moves 32
whole groups of one contiguous stretch of memory. A ragged last group (K not a multiple of
the group size) takes a 2-D grid, one block per (rows, group) tile; the copies mask the
columns past K. Rows too long for registers (per token, K > 16384 for 16-bit inputs) are
walked in chunks: the first pass finds amax, the second re-reads the row (from L2).
`kernel_for(..., tile=(rows, elements))` replaces a plan's block shape (`apply_tile`): the
knob the benchmark sweeps (`--tile`), e.g. 64 groups a block with 32 elements (four
16-byte loads) a thread; every tile computes the same bits.

The formula divides by fp8_max as a tensor: torch's CUDA division by a Python number
multiplies by its reciprocal, one float32 ulp off the correctly rounded quotient the
kernels compute for some amax, which then moves q across fp8 rounding boundaries.

The fused RMSNorm (`rms_norm_quantize_fp8`) quantizes y = x / sqrt(mean(x²) + eps) · w
computed in float32 and never rounded to x's dtype (the float32 pipeline
`quantize_fp8(F.rms_norm(x.float(), (K,), w.float(), eps))`); y never goes to memory. An
unfused bfloat16 pipeline would round y to bfloat16 first (a relative change of at most
2^-9, far below e4m3's 2^-4 step, but it can move a value across a rounding boundary of
the fp8 grid). Per group, the row is held as a (rows, groups, group) fragment: the sum of
squares runs over the whole row, amax over each group.
"""
import functools
import math

import torch

import tegula
import tegula.language as T

from ._common import (FLOAT_DTYPES, RowPlan, as_rows, check_chunks, check_devices, check_eps, check_hidden,
                      check_tensor, chunk_loop, describe, dtype_name, elem_bytes, launchable, plan_rows)

FP8_DTYPES = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
AMAX_FLOOR = 1e-4
# Float32 registers a thread keeps live per element: the input in its dtype, the float32
# value, and the 8-bit result (a quarter).
REGISTERS_PER_ELEMENT = 2.5
# A ragged group tile (2-D grid) and a fused per-group row: 16 elements a thread (two
# 16-byte loads of 16-bit input, one 16-byte store of fp8), up to 512 threads a row chunk.
GROUP_PER_THREAD = 16
GROUP_ROW_THREADS = 512
MIN_BLOCK_THREADS = 256


def _scale(amax, top, ue8m0):
    """The scale of an amax (float32 expression): max(amax, AMAX_FLOOR) / top, with ue8m0
    rounded up to a power of two by adding 2^23 - 1 to the bits and clearing the mantissa
    (exact for every positive normal float; inf and NaN are left as they are)."""
    s = T.max(amax, AMAX_FLOOR) / top
    if ue8m0:
        up = T.reinterpret((T.reinterpret(s, "uint32") + 0x7FFFFF) & 0xFF800000, "float32")
        s = T.if_then_else(T.isfinite(s), up, s)
    return s


def quantize_fp8_program(N, dtype, fp8_dtype, group, scale_ue8m0, blk_m, threads, n_pad, chunks=1):
    """X (M, N) → Q (M, N) fp8_dtype, S (M, G) float32, G = ceil(N / group). The grid is
    (ceil(M / blk_m), G): block (bx, by) quantizes rows bx·blk_m.. over the columns of group
    by. Per token, group = N and the fragment is n_pad >= N wide (chunks > 1: N walked in
    chunks of n_pad columns); with G > 1 the fragment is exactly one group (n_pad = group,
    one chunk). Columns past N load as 0 (no effect on amax) and are not stored."""
    check_chunks("quantize_fp8_program", min(N, group), n_pad, chunks)
    groups = -(-N // group)
    if groups > 1 and (n_pad != group or chunks != 1):
        raise ValueError(f"quantize_fp8_program: with {groups} groups a fragment is one group of {group} "
                         f"columns, got n_pad={n_pad}, chunks={chunks}")
    M = T.dynamic("m")
    top = FP8_MAX[fp8_dtype]

    @T.prim_func
    def quantize_fp8_rows(
        X: T.Tensor((M, N), dtype),
        Q: T.Tensor((M, N), fp8_dtype),
        S: T.Tensor((M, groups), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, blk_m), groups, threads=threads) as (bx, by):
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            a = T.alloc_fragment((blk_m, n_pad), "float32")
            amax = T.alloc_fragment((blk_m,), "float32")
            s = T.alloc_fragment((blk_m,), "float32")
            q = T.alloc_fragment((blk_m, n_pad), fp8_dtype)
            col0 = by * group
            if chunks > 1:
                T.clear(amax)
            for c in chunk_loop(chunks):
                T.copy(X[bx * blk_m, col0 + c * n_pad], x)
                for i, j in T.Parallel(blk_m, n_pad):
                    a[i, j] = T.cast(x[i, j], "float32")
                T.reduce_absmax(a, amax, dim=1, clear=chunks == 1)
            for i in T.Parallel(blk_m):
                s[i] = _scale(amax[i], top, scale_ue8m0)
            for c in chunk_loop(chunks):
                if chunks > 1:
                    T.copy(X[bx * blk_m, col0 + c * n_pad], x)
                    for i, j in T.Parallel(blk_m, n_pad):
                        a[i, j] = T.cast(x[i, j], "float32")
                for i, j in T.Parallel(blk_m, n_pad):
                    if scale_ue8m0:
                        q[i, j] = T.cast(a[i, j] * (1.0 / s[i]), fp8_dtype)
                    else:
                        q[i, j] = T.cast(a[i, j] / s[i], fp8_dtype)
                T.copy(q, Q[bx * blk_m, col0 + c * n_pad])
            for i in T.Parallel(blk_m):
                S[bx * blk_m + i, by] = s[i]

    return quantize_fp8_rows


def _rms_norm_quantize_token_program(N, dtype, w_dtype, fp8_dtype, scale_ue8m0, eps, blk_m, threads, n_pad,
                                     chunks):
    """Per token: X (M, N), W (N,) → Q (M, N), S (M, 1). One chunk: the row stays in
    registers. Several (one row a block): a pass for the sum of squares, one for amax of
    the normalised row, one that recomputes it and writes q."""
    M = T.dynamic("m")
    top = FP8_MAX[fp8_dtype]
    inv_n = 1.0 / N

    @T.prim_func
    def rms_norm_quantize_fp8_rows(
        X: T.Tensor((M, N), dtype),
        W: T.Tensor((N,), w_dtype),
        Q: T.Tensor((M, N), fp8_dtype),
        S: T.Tensor((M, 1), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            v = T.alloc_fragment((blk_m, n_pad), "float32")
            ss = T.alloc_fragment((blk_m,), "float32")
            amax = T.alloc_fragment((blk_m,), "float32")
            s = T.alloc_fragment((blk_m,), "float32")
            q = T.alloc_fragment((blk_m, n_pad), fp8_dtype)
            # The weight a row at a time, laid out as x (each thread its row's elements): a
            # fragment shared by the rows would be replicated, and its loads not vectorized.
            w = T.alloc_fragment((blk_m, n_pad), w_dtype)
            if chunks > 1:
                T.clear(ss)
                T.clear(amax)
            for c in chunk_loop(chunks):
                T.copy(X[bx * blk_m, c * n_pad], x)
                if chunks == 1:
                    # The weight's loads go out with x's, not after the sum of squares.
                    for i, j in T.Parallel(blk_m, n_pad):
                        w[i, j] = T.if_then_else(j < N, W[j], T.cast(0, w_dtype))
                for i, j in T.Parallel(blk_m, n_pad):
                    v[i, j] = T.cast(x[i, j], "float32") * T.cast(x[i, j], "float32")
                T.reduce_sum(v, ss, dim=1, clear=chunks == 1)
            for c in chunk_loop(chunks):
                if chunks > 1:
                    T.copy(X[bx * blk_m, c * n_pad], x)
                    for i, j in T.Parallel(blk_m, n_pad):
                        w[i, j] = T.if_then_else(c * n_pad + j < N, W[c * n_pad + j], T.cast(0, w_dtype))
                # Padding columns: x = 0 gives v = 0, no effect on amax.
                for i, j in T.Parallel(blk_m, n_pad):
                    v[i, j] = T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps) * T.cast(w[i, j], "float32")
                T.reduce_absmax(v, amax, dim=1, clear=chunks == 1)
            for i in T.Parallel(blk_m):
                s[i] = _scale(amax[i], top, scale_ue8m0)
            for c in chunk_loop(chunks):
                if chunks > 1:
                    T.copy(X[bx * blk_m, c * n_pad], x)
                    for i, j in T.Parallel(blk_m, n_pad):
                        w[i, j] = T.if_then_else(c * n_pad + j < N, W[c * n_pad + j], T.cast(0, w_dtype))
                    for i, j in T.Parallel(blk_m, n_pad):
                        v[i, j] = T.cast(x[i, j], "float32") * T.rsqrt(ss[i] * inv_n + eps) * T.cast(w[i, j], "float32")
                for i, j in T.Parallel(blk_m, n_pad):
                    if scale_ue8m0:
                        q[i, j] = T.cast(v[i, j] * (1.0 / s[i]), fp8_dtype)
                    else:
                        q[i, j] = T.cast(v[i, j] / s[i], fp8_dtype)
                T.copy(q, Q[bx * blk_m, c * n_pad])
            for i in T.Parallel(blk_m):
                S[bx * blk_m + i, 0] = s[i]

    return rms_norm_quantize_fp8_rows


def _rms_norm_quantize_group_program(N, dtype, w_dtype, fp8_dtype, group, scale_ue8m0, eps, blk_m, threads,
                                     n_pad, chunks):
    """Per group (group divides N, G = N / group): X (M, G, group), W (G, group) →
    Q (M, G, group), S (M, G): x viewed three-dimensionally, a chunk of n_pad / group whole
    groups of a row in a (blk_m, groups, group) fragment. The sum of squares adds each
    group's partial sum through shared memory (the partials are held by several threads
    each); amax is a reduction within each group. Several chunks: the second pass
    re-reads the row, computing amax and q chunk by chunk (a group lies in one chunk)."""
    M = T.dynamic("m")
    top = FP8_MAX[fp8_dtype]
    inv_n = 1.0 / N
    G = N // group
    gc = n_pad // group

    @T.prim_func
    def rms_norm_quantize_fp8_groups(
        X: T.Tensor((M, G, group), dtype),
        W: T.Tensor((G, group), w_dtype),
        Q: T.Tensor((M, G, group), fp8_dtype),
        S: T.Tensor((M, G), "float32"),
    ):
        with T.Kernel(T.ceildiv(M, blk_m), threads=threads) as bx:
            x = T.alloc_fragment((blk_m, gc, group), dtype)
            v = T.alloc_fragment((blk_m, gc, group), "float32")
            part = T.alloc_fragment((blk_m, gc), "float32")
            part_shared = T.alloc_shared((blk_m, gc), "float32")
            ss = T.alloc_fragment((blk_m,), "float32")
            amax = T.alloc_fragment((blk_m, gc), "float32")
            q = T.alloc_fragment((blk_m, gc, group), fp8_dtype)
            w = T.alloc_fragment((blk_m, gc, group), w_dtype)  # laid out as x (see the token program)
            if chunks > 1:
                T.clear(ss)
            for c in chunk_loop(chunks):
                T.copy(X[bx * blk_m, c * gc, 0], x)
                if chunks == 1:
                    # The weight's loads go out with x's, not after the sum of squares.
                    for i, g, j in T.Parallel(blk_m, gc, group):
                        w[i, g, j] = W[g, j]
                for i, g, j in T.Parallel(blk_m, gc, group):
                    v[i, g, j] = T.cast(x[i, g, j], "float32") * T.cast(x[i, g, j], "float32")
                T.reduce_sum(v, part, dim=2)
                T.copy(part, part_shared)
                T.reduce_sum(part_shared, ss, dim=1, clear=chunks == 1)
            for c in chunk_loop(chunks):
                if chunks > 1:
                    T.copy(X[bx * blk_m, c * gc, 0], x)
                    for i, g, j in T.Parallel(blk_m, gc, group):
                        w[i, g, j] = W[c * gc + g, j]
                for i, g, j in T.Parallel(blk_m, gc, group):
                    v[i, g, j] = (T.cast(x[i, g, j], "float32") * T.rsqrt(ss[i] * inv_n + eps)
                                  * T.cast(w[i, g, j], "float32"))
                T.reduce_absmax(v, amax, dim=2)
                for i, g in T.Parallel(blk_m, gc):
                    amax[i, g] = _scale(amax[i, g], top, scale_ue8m0)
                for i, g, j in T.Parallel(blk_m, gc, group):
                    if scale_ue8m0:
                        q[i, g, j] = T.cast(v[i, g, j] * (1.0 / amax[i, g]), fp8_dtype)
                    else:
                        q[i, g, j] = T.cast(v[i, g, j] / amax[i, g], fp8_dtype)
                T.copy(q, Q[bx * blk_m, c * gc, 0])
                T.copy(amax, S[bx * blk_m, c * gc])

    return rms_norm_quantize_fp8_groups


def rms_norm_quantize_fp8_program(N, dtype, w_dtype, fp8_dtype, group, scale_ue8m0, eps, blk_m, threads, n_pad,
                                  chunks=1):
    """The fused RMSNorm + quantization for rows of N: per token when group == N (2-D
    tensors, the row plan of plan_rows), per group otherwise (group divides N; 3-D views,
    the plan of `plan_norm_groups`)."""
    if group == N:
        check_chunks("rms_norm_quantize_fp8_program", N, n_pad, chunks)
        return _rms_norm_quantize_token_program(N, dtype, w_dtype, fp8_dtype, scale_ue8m0, eps, blk_m, threads,
                                                n_pad, chunks)
    if N % group or n_pad % group or n_pad * chunks < N:
        raise ValueError(f"rms_norm_quantize_fp8_program: group={group} must divide N={N} and n_pad={n_pad}, "
                         f"and {chunks} chunk(s) of n_pad must cover N; take the tiling from plan_norm_groups")
    return _rms_norm_quantize_group_program(N, dtype, w_dtype, fp8_dtype, group, scale_ue8m0, eps, blk_m,
                                            threads, n_pad, chunks)


# TileLang's forms (return Q and S), and the forms the entry points call with their outputs.
quantize_fp8_kernel = tegula.jit(out_idx=[1, 2])(quantize_fp8_program)
rms_norm_quantize_fp8_kernel = tegula.jit(out_idx=[2, 3])(rms_norm_quantize_fp8_program)
_quantize_into = tegula.jit(quantize_fp8_program)
_rms_norm_quantize_into = tegula.jit(rms_norm_quantize_fp8_program)


def plan_group_tile(group: int) -> RowPlan:
    """A ragged-group tile of the 2-D grid: one group (a power of two of at least 16) a
    row, GROUP_PER_THREAD elements a thread, rows stacked to MIN_BLOCK_THREADS threads."""
    per_row = group // GROUP_PER_THREAD
    blk_m = max(1, MIN_BLOCK_THREADS // per_row)
    return RowPlan(blk_m, blk_m * per_row, group, per_row, GROUP_PER_THREAD)


def plan_quantize(n: int, group: int, elem: int) -> RowPlan:
    """Per token (group >= n): plan_rows at this kernel's registers. Per group with a
    ragged last group: plan_group_tile. (A group dividing n is planned as rows of group.)"""
    if group >= n:
        return plan_rows(n, elem, registers_per_element=REGISTERS_PER_ELEMENT)
    return plan_group_tile(group)


def plan_norm_groups(n: int, group: int) -> RowPlan:
    """The fused per-group plan: per_thread = the largest of 16, 8, 4, 2, 1 dividing the
    group, group / per_thread threads a group, as many whole groups a chunk as fit
    GROUP_ROW_THREADS threads (n = 7168, group 128: 56 groups of 8 threads, 448 threads,
    one chunk); one chunk: rows stacked until the block has MIN_BLOCK_THREADS threads and
    a multiple of 32. threads_per_row is the threads of one row chunk."""
    per_thread = math.gcd(group, GROUP_PER_THREAD)
    per_group = group // per_thread
    if per_group > GROUP_ROW_THREADS:
        raise ValueError(f"plan_norm_groups: a group of {group} needs {per_group} threads, more than "
                         f"{GROUP_ROW_THREADS}")
    groups = n // group
    gc = min(groups, GROUP_ROW_THREADS // per_group)
    chunks = -(-groups // gc)
    per_row = gc * per_group
    blk_m = 1
    if chunks == 1:
        while blk_m * per_row < MIN_BLOCK_THREADS:
            blk_m *= 2
    while (blk_m * per_row) % 32:
        blk_m *= 2
    return RowPlan(blk_m, blk_m * per_row, gc * group, per_row, per_thread, chunks)


def apply_tile(plan: RowPlan, tile, group: int | None = None) -> RowPlan:
    """plan with its tiling replaced by tile = (rows a block, elements a thread), the knob
    the benchmark sweeps (`--tile`). The fragment width (n_pad, chunks) stays the plan's;
    the threads follow: rows x n_pad / elements (per group, `group` given: elements divide
    the group, and the threads of a row are its groups x group / elements). More elements a
    thread means more 16-byte loads issued before any use; more rows a block, fewer and
    larger blocks. A row spanning several threads in a multi-row block needs a power of two
    of them (the layout puts whole rows on aligned thread groups)."""
    if tile is None:
        return plan
    rows, per_thread = tile
    width = group if group is not None else plan.n_pad
    if rows < 1 or per_thread < 1 or width % per_thread:
        raise ValueError(f"apply_tile: tile {rows}x{per_thread} needs positive rows and elements dividing "
                         f"{width}")
    per_row = plan.n_pad // per_thread if group is None else (plan.n_pad // group) * (group // per_thread)
    threads = rows * per_row
    if threads % 32 or threads > 1024 or (rows > 1 and per_row & (per_row - 1)):
        raise ValueError(f"apply_tile: tile {rows}x{per_thread} gives {threads} threads ({per_row} a row); a block "
                         f"needs a multiple of 32 up to 1024, and several rows a power of two of threads a row")
    return RowPlan(rows, threads, plan.n_pad, per_row, per_thread, plan.chunks)


# Per token, rows of TOKEN_TILE_MIN_N to TOKEN_TILE_MAX_N run one row a block with
# TOKEN_TILE's 32 elements a thread (four 16-byte loads in flight per thread before the
# reduction): on an H200 this beat the register-bounded row plan at every benchmarked size
# (4096 x 4096 bfloat16: 0.0194 ms against 0.0497; 16384 x 4096: 0.0551 against 0.0605).
# Wider rows (7168, padded to 8192) would be faster still but spill 16 bytes a thread.
TOKEN_TILE, TOKEN_TILE_MIN_N, TOKEN_TILE_MAX_N = (1, 32), 2048, 4096


def _token_tile(plan: RowPlan) -> RowPlan:
    try:
        tiled = apply_tile(plan, TOKEN_TILE)
    except ValueError:   # a width whose threads would not make whole warps
        return plan
    # 96 threads (a row padded to 3072) would leave a third idle: a row's lanes are a power of two.
    return tiled if tiled.threads & (tiled.threads - 1) == 0 else plan


def exact_row_plan(n: int, per_thread: int) -> RowPlan | None:
    """One row a block of n / per_thread threads and no padding (n = 7168: 448 threads x 16
    or 224 x 32), where that is whole warps of whole 16-byte vectors; None otherwise. A
    power-of-two plan pads such rows (7168 to 8192): an eighth of the threads then load
    nothing and the block is larger than it needs to be."""
    threads = n // per_thread if n % per_thread == 0 else 0
    if not threads or threads % 32 or threads > 1024 or per_thread % 8:
        return None
    return RowPlan(1, threads, n, threads, per_thread)


# An unpadded one-row plan replaces a padded one (exact_row_plan) up to this many elements a
# thread, with a power of two of threads, so that every thread of the row's lanes holds
# data: 7168 = 128 threads x 56 elements (seven 16-byte loads a thread), on an H200 0.093
# ms against 0.153 for the plan padded to 8192 (16384 x 7168 bfloat16 per token, 94 % of a
# same-size copy against 57 %).
EXACT_MAX_PER_THREAD = 64


def _unpadded(plan: RowPlan, n: int, elem: int) -> RowPlan:
    """plan, or where it pads a one-chunk row, the exact one-row plan with the fewest
    elements a thread whose threads are a power of two (32 to 1024)."""
    if plan.n_pad == n or plan.chunks != 1:
        return plan
    vector = 16 // elem
    for per_thread in range(vector, EXACT_MAX_PER_THREAD + 1, vector):
        exact = exact_row_plan(n, per_thread)
        if exact is not None and exact.threads & (exact.threads - 1) == 0:
            return exact
    return plan


def _tile_plan(plan: RowPlan, n: int, tile, group: int | None) -> RowPlan:
    """apply_tile, except that a one-row tile of a per-token row that has an exact plan
    (exact_row_plan) takes it: the fragment is then n wide, not the plan's padded width."""
    if tile is not None and group is None and tile[0] == 1:
        exact = exact_row_plan(n, tile[1])
        if exact is not None:
            return exact
    return apply_tile(plan, tile, group)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, fp8_dtype: str = "float8_e4m3fn", group: int | None = None,
               scale_ue8m0: bool = False, eps: float | None = None, w_dtype: torch.dtype | None = None,
               tile: tuple | None = None):
    """The jit kernel for rows of n elements (`group` None: per token).
    eps None: quantize, kernel(x2d, q2d, s2d) with s2d (M, ceil(n / group)).
    eps given: the fused RMSNorm, kernel(x, w, q, s): per token x, q (M, n), w (n,), s (M, 1);
    per group (group divides n) x, q (M, n / group, group), w (n / group, group), s (M, n / group).
    tile: None (the plan's), or (rows a block, elements a thread) applied by `apply_tile`."""
    group = n if group is None or group >= n else group
    if eps is None:
        p = plan_quantize(n, group, elem_bytes(dtype))
        if tile is None and group >= n and TOKEN_TILE_MIN_N <= p.n_pad <= TOKEN_TILE_MAX_N:
            p = _token_tile(p)
        if tile is None and group >= n:
            p = _unpadded(p, n, elem_bytes(dtype))
        p = _tile_plan(p, n, tile, None if group >= n else group)
        return _quantize_into(n, dtype_name(dtype), fp8_dtype, group, bool(scale_ue8m0), p.blk_m, p.threads,
                              p.n_pad, p.chunks)
    if group == n:
        p = plan_rows(n, elem_bytes(dtype), registers_per_element=REGISTERS_PER_ELEMENT)
        if tile is None:
            p = _unpadded(p, n, elem_bytes(dtype))
        p = _tile_plan(p, n, tile, None)
    else:
        p = apply_tile(plan_norm_groups(n, group), tile, group)
    return _rms_norm_quantize_into(n, dtype_name(dtype), dtype_name(w_dtype or dtype), fp8_dtype, group,
                                   bool(scale_ue8m0), float(eps), p.blk_m, p.threads, p.n_pad, p.chunks)


# ---- argument checks, shapes, entry points ----------------------------------------------

def _check_fp8_dtype(op, dtype) -> str:
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).replace("torch.", "")
    if not isinstance(dtype, str) or dtype not in FP8_DTYPES:
        raise ValueError(f"{op}: dtype must be one of {', '.join(map(repr, FP8_DTYPES))}, got {dtype!r}")
    return dtype


def _check_bool(op, name, value) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")


def _check_group_size(op, group_size, k: int, ragged_ok: bool):
    """group_size: None (per token) or a positive int. One that does not divide k (a ragged
    last group) must, for quantize_fp8, be a power of two from 16 to 16384; the fused norm
    takes only group sizes dividing k (or at least k)."""
    if group_size is None:
        return
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"{op}: group_size must be None or an int, got {group_size!r}")
    if group_size < 1:
        raise ValueError(f"{op}: group_size must be positive, got {group_size}")
    if group_size >= k or k % group_size == 0:
        return
    if not ragged_ok:
        raise ValueError(f"{op}: group_size must divide the last dimension of x ({k}), got {group_size}")
    if group_size < 16 or group_size > 16384 or group_size & (group_size - 1):
        raise ValueError(f"{op}: group_size {group_size} does not divide the last dimension of x ({k}); a ragged "
                         f"last group needs a power of two from 16 to 16384 as group_size")


def _check_x(op, x) -> int:
    check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    k = x.shape[-1]
    check_hidden(op, "x", k)
    return k


def check_quantize_fp8_args(op, x, group_size=None, dtype="float8_e4m3fn", scale_ue8m0=False) -> str:
    """The arguments of quantize_fp8 (its operator's fake checks them too); returns the fp8
    dtype's name."""
    k = _check_x(op, x)
    _check_group_size(op, group_size, k, ragged_ok=True)
    dtype = _check_fp8_dtype(op, dtype)
    _check_bool(op, "scale_ue8m0", scale_ue8m0)
    check_devices(op, ("x", x))
    return dtype


def check_rms_norm_quantize_fp8_args(op, x, weight, eps=1e-6, group_size=None, dtype="float8_e4m3fn",
                                     scale_ue8m0=False):
    """The arguments of rms_norm_quantize_fp8; returns (eps, the fp8 dtype's name)."""
    k = _check_x(op, x)
    check_tensor(op, "weight", weight, dtypes=FLOAT_DTYPES)
    if tuple(weight.shape) != (k,):
        raise ValueError(f"{op}: weight must have shape ({k},) (the last dimension of x), got {describe(weight)}")
    eps = check_eps(op, eps)
    _check_group_size(op, group_size, k, ragged_ok=False)
    if group_size is not None and group_size < k and group_size // math.gcd(group_size, GROUP_PER_THREAD) \
            > GROUP_ROW_THREADS:
        raise ValueError(f"{op}: group_size {group_size} is too large for the fused norm (at most "
                         f"{GROUP_ROW_THREADS * GROUP_PER_THREAD}, or at least the last dimension of x)")
    dtype = _check_fp8_dtype(op, dtype)
    _check_bool(op, "scale_ue8m0", scale_ue8m0)
    check_devices(op, ("x", x), ("weight", weight))
    return eps, dtype


def scales_shape(shape, group_size):
    """(..., 1) per token, (..., ceil(K / group_size)) per group."""
    k = shape[-1]
    groups = 1 if group_size is None else -(-k // group_size)
    return (*shape[:-1], groups)


def _empty_outputs(x, group_size, dtype):
    q = torch.empty(x.shape, dtype=FP8_DTYPES[dtype], device=x.device)
    s = torch.empty(scales_shape(x.shape, group_size), dtype=torch.float32, device=x.device)
    return q, s


def quantize_fp8_fake(x, group_size=None, dtype="float8_e4m3fn", scale_ue8m0=False):
    """quantize_fp8's outputs from shapes alone (for the operator's tracing)."""
    dtype = check_quantize_fp8_args("quantize_fp8", x, group_size, dtype, scale_ue8m0)
    return _empty_outputs(x, group_size, dtype)


def rms_norm_quantize_fp8_fake(x, weight, eps=1e-6, group_size=None, dtype="float8_e4m3fn", scale_ue8m0=False):
    """rms_norm_quantize_fp8's outputs from shapes alone."""
    _, dtype = check_rms_norm_quantize_fp8_args("rms_norm_quantize_fp8", x, weight, eps, group_size, dtype,
                                                scale_ue8m0)
    return _empty_outputs(x, group_size, dtype)


def quantize_fp8(x: torch.Tensor, group_size: int | None = None, dtype: str = "float8_e4m3fn",
                 scale_ue8m0: bool = False):
    """(q, scales): x quantized to `dtype` with float32 scales, x ≈ q · scales (broadcast
    per token, or repeated over each group's columns). See the module note for the formula.

    x: CUDA float16/bfloat16/float32 (..., K), any K >= 1, any layout (strided or
    misaligned views are read through a copy). group_size None: per token, scales
    (..., 1). An int: per group of group_size columns (128: DeepGEMM's activations),
    scales (..., ceil(K / group_size)); a group_size not dividing K leaves a ragged last
    group (then a power of two from 16 to 16384). dtype: "float8_e4m3fn" (max 448) or
    "float8_e5m2" (max 57344). scale_ue8m0: scales rounded up to powers of two.
    q: x's shape, contiguous; scales contiguous.
    """
    op = "quantize_fp8"
    dtype = check_quantize_fp8_args(op, x, group_size, dtype, scale_ue8m0)
    q, s = _empty_outputs(x, group_size, dtype)
    for kernel, args in quantize_fp8_launches(op, launchable(x), q, s, group_size, dtype, scale_ue8m0):
        kernel(*args)
    return q, s


def quantize_fp8_launches(op, x, q, s, group_size, dtype, scale_ue8m0, tile=None):
    """[(kernel, arguments)] that quantize_fp8 runs for a launchable x into q and s (none
    for an empty x): what the entry point calls, the CPU tests simulate and the benchmark
    times. tile: None (the plan's) or (rows a block, elements a thread), see apply_tile;
    per group with a dividing K, a "row" is one group."""
    if x.numel() == 0:
        return []
    k = x.shape[-1]
    x2 = as_rows(op, x)
    if group_size is None or group_size >= k:
        kernel = kernel_for(k, x.dtype, dtype, None, scale_ue8m0, tile=tile)
        return [(kernel, (x2, q.view(x2.shape), s.view(-1, 1)))]
    if k % group_size == 0:
        rows = x2.view(-1, group_size)
        kernel = kernel_for(group_size, x.dtype, dtype, None, scale_ue8m0, tile=tile)
        return [(kernel, (rows, q.view(rows.shape), s.view(-1, 1)))]
    kernel = kernel_for(k, x.dtype, dtype, group_size, scale_ue8m0, tile=tile)
    return [(kernel, (x2, q.view(x2.shape), s.view(x2.shape[0], -1)))]


def rms_norm_quantize_fp8(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, group_size: int | None = None,
                          dtype: str = "float8_e4m3fn", scale_ue8m0: bool = False):
    """(q, scales) of quantize_fp8(F.rms_norm(x.float(), (K,), weight.float(), eps)) in
    one pass: the normalised row is kept in float32 registers, never rounded to x's dtype
    nor written. weight: (K,) float16/bfloat16/float32 (any of them, on x's device).
    group_size: None, or one dividing K (or at least K: one group, as per token, scales
    (..., 1)), at most 8192. The other arguments and the outputs as in quantize_fp8. NaN
    and inf follow F.rms_norm: a NaN makes its whole normalised row NaN (so all its scales
    and q); an inf normalises to NaN (inf · 0) and the rest of its row to 0, so the inf's
    group (per token: the row) has a NaN scale and NaN q, the other groups 0."""
    op = "rms_norm_quantize_fp8"
    eps, dtype = check_rms_norm_quantize_fp8_args(op, x, weight, eps, group_size, dtype, scale_ue8m0)
    q, s = _empty_outputs(x, group_size, dtype)
    for kernel, args in rms_norm_quantize_fp8_launches(op, launchable(x), launchable(weight), q, s, eps, group_size,
                                                       dtype, scale_ue8m0):
        kernel(*args)
    return q, s


def rms_norm_quantize_fp8_launches(op, x, weight, q, s, eps, group_size, dtype, scale_ue8m0, tile=None):
    """[(kernel, arguments)] of rms_norm_quantize_fp8 (see quantize_fp8_launches)."""
    if x.numel() == 0:
        return []
    k = x.shape[-1]
    x2 = as_rows(op, x)
    if group_size is None or group_size >= k:
        kernel = kernel_for(k, x.dtype, dtype, None, scale_ue8m0, eps, weight.dtype, tile)
        return [(kernel, (x2, weight, q.view(x2.shape), s.view(-1, 1)))]
    x3 = x2.view(x2.shape[0], -1, group_size)
    kernel = kernel_for(k, x.dtype, dtype, group_size, scale_ue8m0, eps, weight.dtype, tile)
    return [(kernel, (x3, weight.view(-1, group_size), q.view(x3.shape), s.view(x2.shape[0], -1)))]


# ---- the torch formula ------------------------------------------------------------------

def round_scale_ue8m0(s: torch.Tensor) -> torch.Tensor:
    """Positive float32 scales rounded up to a power of two, bit-exactly as the kernels do
    (add 2^23 - 1 to the bits, clear the mantissa); inf and NaN stay."""
    up = ((s.view(torch.int32) + 0x7FFFFF) & -0x800000).view(torch.float32)
    return torch.where(torch.isfinite(s), up, s)


def quantize_fp8_reference(x: torch.Tensor, group_size: int | None = None, dtype: str = "float8_e4m3fn",
                           scale_ue8m0: bool = False):
    """The module's formula in torch, in float32 on x's device: what the kernels give bit
    for bit (q's NaNs up to their sign bit)."""
    top = FP8_MAX[dtype]
    xf = x.float()
    k = xf.shape[-1]
    group = k if group_size is None or group_size >= k else group_size
    groups = -(-k // group)
    xg = torch.nn.functional.pad(xf, (0, groups * group - k)).unflatten(-1, (groups, group))
    # Divided by a tensor, not by the Python number: torch's CUDA division by a CPU scalar
    # multiplies by its reciprocal (1 / 448 is not a float32 number, so a scale can come out
    # one ulp off the quotient the kernels round correctly); a tensor divisor divides.
    s = xg.abs().amax(-1, keepdim=True).clamp(min=AMAX_FLOOR) / torch.full((), top, device=xf.device)
    if scale_ue8m0:
        s = round_scale_ue8m0(s)
    q = (xg / s).clamp(-top, top).to(FP8_DTYPES[dtype])
    return q.flatten(-2)[..., :k], s.squeeze(-1)


def rms_norm_quantize_fp8_reference(x, weight, eps=1e-6, group_size=None, dtype="float8_e4m3fn",
                                    scale_ue8m0=False):
    """quantize_fp8_reference of F.rms_norm in float32 (the fused kernel's definition)."""
    y = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps)
    return quantize_fp8_reference(y, group_size, dtype, scale_ue8m0)
