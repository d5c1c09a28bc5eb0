"""Grouped GEMM: the GEMMs of a mixture of experts, of different M, in one call.

    c[offsets[e]:offsets[e + 1]] = a[offsets[e]:offsets[e + 1]] @ w[e]     for every expert e

a (M, K) holds the tokens sorted by expert (rows of expert e are a[offsets[e]:offsets[e+1]]),
w (E, K, N), or with trans_w (E, N, K): each expert's nn.Linear weight, read transposed in
place as matmul_program's trans_b operand. offsets (E + 1,) int32 lives on the GPU and is
never read by the host: the row counts are data, so the grid is an upper bound of the tiles,

    sum_e ceil(cnt_e / block_M) <= ceil(M / block_M) + E     (and <= M: a tile holds a row),

and the program's first kernel turns offsets into a tile map, one entry per tile
(expert, first row, end of the expert's rows), written for tiles past the last as (0, 0, 0).
The second kernel is the GEMM: block (n tile, tile) reads its entry, streams its rows of a
and its expert's panel of w through shared memory into T.gemm (wgmma on sm_90a, mma.sync
elsewhere, as kernels/gemm.py), and stores only the rows of its expert (the rows of the tile
past them belong to the next expert, whose block writes them). A tile past the last runs no
k step and stores nothing.

Why a tile map rather than each block walking the offsets itself: on sm_90a the engine
gives a T.Pipelined loop bulk tensor copies and a producer warpgroup only when the copies'
indices read nothing but global memory and the loop is a direct statement of the kernel
body. A walk leaves the expert and row in registers (a T.alloc_var, or a name bound to a
load, which becomes a let around the loop); an index that is a load of the tile map,
`A[TileMap[by, 1], k * block_K]`, is what the producer thread can compute itself. The walk
costs one tiny launch; the GEMM keeps the pipeline that kernels/gemm.py's tuned tiles assume.
The cp.async path (mma.sync) needs the opposite, a copy index that is not itself a load,
so there the entry is bound to names first (`index_by_map`).

Rows of a outside every expert (offsets[0] > 0, offsets[E] < M: the padded tail of
moe_align_block_size's order) give rows of c that are left unwritten. Offsets are clamped
to [0, M] in the kernel, so that offsets breaking the contract (decreasing, out of range)
give unspecified values but never a write outside c.
"""
import functools

import torch

import tegula
import tegula.language as T

from . import _index_checks as index_checks
from ._common import check_devices, check_rank, check_tensor, describe, dtype_name, launchable, wgmma_gpu
from .gemm import HALF_DTYPES, MMA_SYNC, default_config, operand_layout

MAP_THREADS = 256    # tiles the tile-map kernel places per block
MAX_EXPERTS = 1024   # the tile map's scan runs over the experts in one block


def scan_passes(n):
    """(step, source row) of each pass of a Hillis-Steele prefix sum over n entries kept in
    the two rows of a (2, n) buffer: n = 9 -> ((1, 0), (2, 1), (4, 0), (8, 1)), whose sums
    end in row len(passes) % 2."""
    passes, step = [], 1
    while step < n:
        passes.append((step, len(passes) % 2))
        step *= 2
    return tuple(passes)


@T.macro
def inclusive_scan(buf, n, passes):
    """buf (2, n) int32 in shared memory, row 0 holding the values: leaves their inclusive
    prefix sums in row len(passes) % 2 (one T.Parallel loop a pass; the engine places the
    barriers between them)."""
    for step, src in passes:
        for i in T.Parallel(n):
            buf[1 - src, i] = buf[src, i] + T.if_then_else(i >= step, buf[src, T.max(i - step, 0)], 0)


@T.macro
def last_at_most(sums, row, n, value):
    """The largest i in [0, n) with sums[row, i] <= value (sums non-decreasing, sums[row, 0]
    <= value), by bisection: ceil(log2(n)) steps of one thread."""
    lo = T.alloc_var(T.int32, init=0)
    hi = T.alloc_var(T.int32, init=n - 1)
    for _ in T.serial(max(1, (n - 1).bit_length())):
        mid = (lo + hi + 1) // 2
        if sums[row, mid] <= value:
            lo = mid
        else:
            hi = mid - 1
    return lo


@T.macro
def grouped_tile(A, W, C, A_shared, B_shared, C_local, C_shared, expert, row0, row_end, bx, K, block_M, block_N,
                 block_K, num_stages, trans_w, stage_c):
    """C[row0:row_end, bx * block_N:][:block_M] = A[row0:][:block_M] @ W[expert] (its
    block_N columns): no k step where row0 >= row_end (a tile past the last). stage_c: a
    whole tile goes through the shared tile C_shared (as gemm.matmul_program's)."""
    for k in T.Pipelined(T.if_then_else(row0 < row_end, T.ceildiv(K, block_K), 0), num_stages=num_stages):
        T.copy(A[row0, k * block_K], A_shared)
        if trans_w:
            T.copy(W[expert, bx * block_N, k * block_K], B_shared)
        else:
            T.copy(W[expert, k * block_K, bx * block_N], B_shared)
        T.gemm(A_shared, B_shared, C_local, transpose_B=trans_w)
    # A tile wholly inside its expert stores as matmul does (vector stores, masked only at
    # M); the expert's last tile stores its own rows one by one.
    if row0 + block_M <= row_end:
        if stage_c:
            T.copy(C_local, C_shared)
            T.copy(C_shared, C[row0, bx * block_N])
        else:
            T.copy(C_local, C[row0, bx * block_N])
    else:
        for i, j in T.Parallel(block_M, block_N):
            if row0 + i < row_end:
                C[row0 + i, bx * block_N + j] = C_local[i, j]


def grouped_gemm_program(E, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128,
                         dtype="float16", accum_dtype="float32", trans_w=False, panel_size=8, index_by_map=True,
                         stage_c=False):
    """A (M, K) with M dynamic, W (E, K, N) or with trans_w (E, N, K), Offsets (E + 1,) int32
    -> C (M, N). Kernel 1 writes the tile map TileMap (M, 3) (see the module note); kernel 2
    is the GEMM over ceil(N / block_N) x min(ceil(M / block_M) + E, M) blocks.

    index_by_map: the copies index A and W by loads of the tile map in place (what sm_90a's
    producer warpgroup needs); False binds the entry to names first, which the cp.async path
    needs (a copy whose index is itself a load of memory is not made cp.async, so it would
    not be pipelined). `kernel_for` picks the form for the instruction path."""
    if not 1 <= E <= MAX_EXPERTS:
        raise ValueError(f"grouped_gemm_program: E must be in [1, {MAX_EXPERTS}], got {E}")
    M = T.dynamic("m")
    # operand_layout for the weight's tile (the rows of A are a runtime range, so A's
    # layout is always (M, K) in (block_M, block_K) tiles; block_M stands for M here).
    _, (b_shape, b_tile) = operand_layout(block_M, N, K, block_M, block_N, block_K, trans_b=trans_w,
                                          op="grouped_gemm_program")
    passes = scan_passes(E + 1)
    sums = len(passes) % 2

    @T.prim_func
    def grouped_gemm(A: T.Tensor((M, K), dtype), W: T.Tensor((E,) + b_shape, dtype),
                     Offsets: T.Tensor((E + 1,), T.int32), C: T.Tensor((M, N), dtype)):
        TileMap = T.alloc_global((M, 3), T.int32)
        with T.Kernel(T.ceildiv(T.min(T.ceildiv(M, block_M) + E, M), MAP_THREADS), threads=MAP_THREADS) as bx:
            # Row 0: the tiles of expert e - 1 at e (0 at 0); the scan leaves in row `sums` the
            # tiles before expert e, so tile t belongs to the last e with first[sums, e] <= t.
            first = T.alloc_shared((2, E + 1), T.int32)
            for e in T.Parallel(E + 1):
                if e == 0:
                    first[0, e] = 0
                else:
                    start = T.min(T.max(Offsets[e - 1], 0), M)
                    first[0, e] = T.ceildiv(T.min(T.max(Offsets[e], start), M) - start, block_M)
            inclusive_scan(first, E + 1, passes)
            tile = bx * MAP_THREADS + T.get_thread_binding()
            if tile < M:
                e = last_at_most(first, sums, E + 1, tile)
                if e < E:
                    start = T.min(T.max(Offsets[e], 0), M)
                    TileMap[tile, 0] = e
                    TileMap[tile, 1] = start + (tile - first[sums, e]) * block_M
                    TileMap[tile, 2] = T.min(T.max(Offsets[e + 1], start), M)
                else:
                    TileMap[tile, 0] = 0
                    TileMap[tile, 1] = 0
                    TileMap[tile, 2] = 0

        with T.Kernel(T.ceildiv(N, block_N), T.min(T.ceildiv(M, block_M) + E, M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared(b_tile, dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            C_shared = None
            if stage_c:
                C_shared = T.alloc_shared((block_M, block_N), dtype)
            T.use_swizzle(panel_size=panel_size)
            T.clear(C_local)
            if index_by_map:
                grouped_tile(A, W, C, A_shared, B_shared, C_local, C_shared, TileMap[by, 0], TileMap[by, 1],
                             TileMap[by, 2], bx, K, block_M, block_N, block_K, num_stages, trans_w, stage_c)
            else:
                expert = TileMap[by, 0]
                row0 = TileMap[by, 1]
                row_end = TileMap[by, 2]
                grouped_tile(A, W, C, A_shared, B_shared, C_local, C_shared, expert, row0, row_end, bx, K, block_M,
                             block_N, block_K, num_stages, trans_w, stage_c)

    return grouped_gemm


_JITS = {mma: tegula.jit(out_idx=[-1], pass_configs=MMA_SYNC if mma else {})(grouped_gemm_program)
         for mma in (False, True)}
grouped_gemm_kernel = _JITS[False]
# The same program held to mma.sync on sm_90a too (for comparing the two paths).
grouped_gemm_kernel_mma_sync = _JITS[True]

# Tiles the benchmark's --sweep times (block_M, block_N, block_K, num_stages, threads).
SWEEP_TILES = [(128, 256, 64, 4, 256), (128, 256, 64, 3, 256), (128, 128, 64, 4, 128), (128, 128, 64, 3, 128),
               (64, 256, 64, 4, 128), (64, 128, 64, 4, 128), (256, 128, 64, 4, 256)]


def grouped_config(M, N, K, E, wgmma=None):
    """The tile for M routed rows over E experts: kernels/gemm.py's `default_config` for
    the whole output (128 x 256 x 64 on wgmma for large outputs, 128 x 128 x 64 on
    mma.sync), except when the experts average 64 rows or fewer (decode: a few tokens an
    expert), where a 64-row tile wastes less of each expert's last tile and every block
    streams its expert's weight panel, 4 stages deep. Examples (wgmma): Mixtral prefill,
    8192 rows x 8 experts, up (N 14336) and down (N 4096) -> 128 x 256; 64 rows x 8 experts
    -> 64 x 128."""
    wgmma = wgmma_gpu() if wgmma is None else wgmma
    if M <= 64 * E:
        return dict(block_M=64, block_N=128, block_K=64, num_stages=4, threads=128, panel_size=8)
    cfg = default_config(max(M, 65), N, K, wgmma=wgmma)
    # The wide tile's epilogue through shared memory (H200, Mixtral up / down, 8192 rows:
    # 0.92 / 0.97x the cuBLAS loop storing from registers with four stages, 0.95 / 0.99x
    # so); one block a tile (the tile map is the grid), so not persistent.
    cfg.pop("blocks", None)
    cfg.setdefault("panel_size", 8)
    return cfg


@functools.lru_cache(maxsize=None)
def kernel_for(E, N, K, dtype: torch.dtype, trans_w=False, mma_sync=False, **config):
    """The grouped GEMM kernel for E experts of (K -> N) in `dtype`, with the tile given in
    config (default: `grouped_config`'s for many rows an expert). mma_sync holds T.gemm to
    mma.sync even on sm_90a. The copies index by the tile map in place on the wgmma path
    (sm_90a's bulk tensor copies) and through names elsewhere (cp.async), unless config
    says index_by_map. One kernel serves every M (M is dynamic)."""
    cfg = dict(config) or grouped_config(1 << 20, N, K, E, wgmma=False if mma_sync else None)
    cfg.setdefault("index_by_map", wgmma_gpu() and not mma_sync)
    return _JITS[bool(mma_sync)](E, N, K, dtype=dtype_name(dtype), trans_w=bool(trans_w), **cfg)


def check_grouped_gemm_args(op, a, w, offsets, trans_w):
    """The arguments of grouped_gemm, in the entry points' order (its operator's fake
    checks them too); returns (M, K, N, E)."""
    check_tensor(op, "a", a, dtypes=HALF_DTYPES)
    check_tensor(op, "w", w, dtypes=HALF_DTYPES, like=a, like_name="a")
    if not isinstance(offsets, torch.Tensor):
        raise TypeError(f"{op}: offsets must be a torch.Tensor (int32, E + 1 row offsets), got {describe(offsets)}")
    if offsets.dtype != torch.int32:
        raise ValueError(f"{op}: offsets must be an int32 tensor of E + 1 row offsets, got {describe(offsets)}")
    if not isinstance(trans_w, bool):
        raise TypeError(f"{op}: trans_w must be a bool (whether w is stored (E, N, K)), got {trans_w!r}")
    check_rank(op, "a", a, 2, "M, K")
    check_rank(op, "w", w, 3, "E, N, K" if trans_w else "E, K, N")
    M, K = a.shape
    E = w.shape[0]
    w_k = w.shape[2] if trans_w else w.shape[1]
    if w_k != K:
        layout = f"({E}, N, {K})" if trans_w else f"({E}, {K}, N)"
        raise ValueError(f"{op}: w must have shape {layout} (its K matching the columns of a), got {describe(w)}")
    if E > MAX_EXPERTS:
        raise ValueError(f"{op}: w must hold at most {MAX_EXPERTS} experts, got {describe(w)}")
    if tuple(offsets.shape) != (E + 1,):
        raise ValueError(f"{op}: offsets must have shape ({E + 1},) (E + 1 row offsets for the {E} experts of w), "
                         f"got {describe(offsets)}")
    check_devices(op, ("a", a), ("w", w), ("offsets", offsets))
    N = w.shape[1] if trans_w else w.shape[2]
    return M, K, N, E


def grouped_gemm(a: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, *, trans_w: bool = False,
                 check_indices: bool | None = None) -> torch.Tensor:
    """c (M, N) with c[offsets[e]:offsets[e+1]] = a[offsets[e]:offsets[e+1]] @ w[e], for
    every expert e, in one launch and without reading offsets on the host.

    a: (M, K), CUDA float16/bfloat16, rows sorted by expert. w: (E, K, N) in a's dtype, or
    with trans_w=True (E, N, K) (each expert an nn.Linear weight, read in place). offsets:
    (E + 1,) int32 on a's device, non-decreasing, offsets[0] >= 0, offsets[E] <= M; rows
    outside [offsets[0], offsets[E]) are left unwritten (torch.empty's contents), and an
    empty expert costs nothing. Strided or misaligned views are copied first. fp32
    accumulation; NaN and inf propagate as in torch. K = 0 gives zeros. Offsets that break
    their contract give rows no expert writes; check_indices=True (or TEGULA_CHECK_INDICES=1)
    makes them an error naming the first bad entry (kernels/_index_checks.py)."""
    op = "grouped_gemm"
    M, K, N, E = check_grouped_gemm_args(op, a, w, offsets, trans_w)
    if index_checks.wanted(op, check_indices, offsets):
        index_checks.check_offsets(op, offsets, M)
    if M == 0 or N == 0 or E == 0:    # no expert: every row is outside the experts
        return a.new_empty((M, N))
    if K == 0:
        return a.new_zeros((M, N))
    kernel = kernel_for(E, N, K, a.dtype, trans_w, **grouped_config(M, N, K, E))
    return kernel(launchable(a), launchable(w), launchable(offsets))
