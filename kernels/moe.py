"""Mixture-of-experts routing around the grouped GEMM: sort the routed tokens by expert,
gather their rows, and combine the experts' outputs back into token order.

    align = moe_align_block_size(topk_ids, E, block_size)     # the order, padded per expert
    xs = moe_permute(x, align.sorted_token_ids, top_k)        # (max_padded, H) rows by expert
    h = grouped_gemm(xs, w13, align.expert_offsets, trans_w=True)
    ys = grouped_gemm(silu(h[:, :I]) * h[:, I:], w2, align.expert_offsets, trans_w=True)
    out = moe_combine(ys, topk_weights, align.token_positions)

`moe_align_block_size` has vLLM's semantics (the layout its fused MoE kernels read) plus
two outputs the kernels here use: the per-expert padded offsets (grouped_gemm's offsets)
and the inverse permutation (where each routed (token, slot) landed; moe_combine's index).

The alignment is one program of three kernels (one call, no host synchronisation):
1. one block per chunk of the flat ids counts its ids per expert (shared-memory atomics)
   into Counts (E, chunks), and fills its share of sorted_token_ids with the padding entry;
2. one block turns the counts into each chunk's first slot per expert (a scan over the
   chunks, staged in shared memory) and the experts' padded offsets (a scan over the
   experts);
3. one block per chunk writes its share of expert_ids (a bisection of the offsets) and
   places its ids, a block-wide tile at a time: an id's slot is its
   expert's next slot for this chunk, plus the ids of that expert in earlier warps of the
   tile (per-warp counts, scanned over the warps), plus those in earlier lanes of its warp
   (a 32-step comparison in shared memory). So the order within an expert is the order of
   the flat index t * k + j: stable, and the same on every run.
Ids outside [0, E) are dropped: counted nowhere, placed nowhere, their position -1 (vLLM's
expert-parallel convention for experts of another rank), and moe_combine skips them.
"""
import functools
from typing import NamedTuple

import torch

import tegula
import tegula.language as T

from . import _index_checks as index_checks
from ._common import (check_chunks, check_devices, check_rank, check_tensor, chunk_loop, describe, dtype_name,
                      elem_bytes, launchable, plan_rows)
from .expert_gemm import MAX_EXPERTS, inclusive_scan, last_at_most, scan_passes

ALIGN_THREADS = 256      # ids a tile of kernels 1 and 3 places (one per thread), 8 warps
SCAN_THREADS = 512       # kernel 2, one block
STAGED_COUNTS = 16384    # int32 counts kernel 2 stages in shared memory (64 KiB, any sm_80+): E x chunks
MAX_CHUNKS = 256         # blocks of kernels 1 and 3 at most
ID_DTYPES = (torch.int32, torch.int64)


def max_chunks(E):
    """Chunks (blocks of kernels 1 and 3) for E experts: as many as kernel 2 can stage,
    at most MAX_CHUNKS. E = 8 -> 256; E = 64 -> 256; E = 256 -> 64; E = 1024 -> 16."""
    return max(1, min(MAX_CHUNKS, STAGED_COUNTS // E))


def align_chunks(n, E):
    """The chunk count for n flat ids: one tile of ALIGN_THREADS ids a chunk, until
    max_chunks(E); past that each chunk walks several tiles. n = 8192 (4096 tokens, top 2),
    E = 8 -> 32 chunks of one tile; n = 524288, E = 8 -> 256 chunks of 8 tiles."""
    return max(1, min(-(-n // ALIGN_THREADS), max_chunks(E)))


def moe_align_program(E, block_size, ids_dtype="int32", threads=ALIGN_THREADS, scan_threads=SCAN_THREADS):
    """TopK (n,) ids -> SortedIds (p,), ExpertIds (q,), NumPost (1,), Offsets (E + 1,),
    Positions (n,); Counts (E, c) is the scratch between the kernels (c chunks, each of
    ceil(ceil(n / threads) / c) tiles, c <= max_chunks(E)). n, p, q and c are dynamic:
    p = n + E (block_size - 1) and q = ceil(p / block_size) are what the entry point
    allocates."""
    if not 1 <= E <= MAX_EXPERTS:
        raise ValueError(f"moe_align_program: E must be in [1, {MAX_EXPERTS}], got {E}")
    if threads % 32 != 0:
        raise ValueError(f"moe_align_program: threads must be a multiple of 32 (whole warps), got {threads}")
    n = T.dynamic("n")
    p = T.dynamic("p")
    q = T.dynamic("q")
    c = T.dynamic("c")
    warps = threads // 32
    staged = max_chunks(E)
    passes = scan_passes(E + 1)
    sums = len(passes) % 2
    B = block_size

    @T.prim_func
    def moe_align(TopK: T.Tensor((n,), ids_dtype), Counts: T.Tensor((E, c), T.int32),
                  SortedIds: T.Tensor((p,), T.int32), ExpertIds: T.Tensor((q,), T.int32),
                  NumPost: T.Tensor((1,), T.int32), Offsets: T.Tensor((E + 1,), T.int32),
                  Positions: T.Tensor((n,), T.int32)):
        # 1. Counts[:, bx] = the ids of each expert in chunk bx; every slot starts as padding.
        with T.Kernel(c, threads=threads) as bx:
            hist = T.alloc_shared((E,), T.int32)
            tx = T.get_thread_binding()
            tiles = T.ceildiv(T.ceildiv(n, threads), c)
            for e in T.Parallel(E):
                hist[e] = 0
            T.sync_threads()
            for s in T.serial(tiles):
                i = (bx * tiles + s) * threads + tx
                if i < n:
                    if TopK[i] >= 0 and TopK[i] < E:
                        T.atomic_add(hist[T.cast(TopK[i], T.int32)], 1)
            for r in T.serial(T.ceildiv(T.ceildiv(p, c), threads)):
                if T.ceildiv(p, c) * bx + r * threads + tx < p:
                    SortedIds[T.ceildiv(p, c) * bx + r * threads + tx] = n
            T.sync_threads()
            for e in T.Parallel(E):
                Counts[e, bx] = hist[e]

        # 2. Counts[e, j] becomes the slots of expert e that chunks before j take; Offsets.
        with T.Kernel(1, threads=scan_threads) as bx:
            chunk = T.alloc_shared((E, staged), T.int32)
            padded = T.alloc_shared((2, E + 1), T.int32)
            run = T.alloc_var(T.int32)
            tx = T.get_thread_binding()
            for e, j in T.Parallel(E, staged):
                chunk[e, j] = T.if_then_else(j < c, Counts[e, T.min(j, c - 1)], 0)
            T.sync_threads()
            # Unrolled over every staged column (those past c hold 0), so the shared loads
            # are issued ahead of the running sum.
            for e0 in T.serial(T.ceildiv(E, scan_threads)):
                e = e0 * scan_threads + tx
                if e < E:
                    run = 0
                    for j in T.unroll(staged):
                        v = chunk[e, j]
                        chunk[e, j] = run
                        run = run + v
                    padded[0, e + 1] = T.ceildiv(run, B) * B
            if tx == 0:
                padded[0, 0] = 0
            T.sync_threads()
            for e, j in T.Parallel(E, staged):
                if j < c:
                    Counts[e, j] = chunk[e, j]
            inclusive_scan(padded, E + 1, passes)
            T.sync_threads()
            for e in T.Parallel(E + 1):
                Offsets[e] = padded[sums, e]
            if tx == 0:
                NumPost[0] = padded[sums, E]

        # 3. Each id to its slot, a tile of `threads` ids at a time; chunk bx also writes
        # its share of ExpertIds.
        with T.Kernel(c, threads=threads) as bx:
            next_slot = T.alloc_shared((E,), T.int32)
            offsets = T.alloc_shared((1, E + 1), T.int32)
            ids = T.alloc_shared((threads,), T.int32)
            warp_slots = T.alloc_shared((warps, E), T.int32)
            expert = T.alloc_var(T.int32)
            rank = T.alloc_var(T.int32)
            run = T.alloc_var(T.int32)
            tx = T.get_thread_binding()
            lane = tx % 32
            warp = tx // 32
            tiles = T.ceildiv(T.ceildiv(n, threads), c)
            for e in T.Parallel(E + 1):
                offsets[0, e] = Offsets[e]
            for e in T.Parallel(E):
                next_slot[e] = Offsets[e] + Counts[e, bx]
            T.sync_threads()
            for r in T.serial(T.ceildiv(T.ceildiv(q, c), threads)):
                b = T.ceildiv(q, c) * bx + r * threads + tx
                if b < q and b < T.ceildiv(q, c) * (bx + 1):
                    if b * B < offsets[0, E]:
                        ExpertIds[b] = last_at_most(offsets, 0, E + 1, b * B)
                    else:
                        ExpertIds[b] = -1
            for s in T.serial(tiles):
                i = (bx * tiles + s) * threads + tx
                expert = E
                if i < n:
                    if TopK[i] >= 0 and TopK[i] < E:
                        expert = T.cast(TopK[i], T.int32)
                ids[tx] = expert
                for w, e in T.Parallel(warps, E):
                    warp_slots[w, e] = 0
                T.sync_threads()
                rank = 0
                for j in T.unroll(32):
                    if j < lane and ids[warp * 32 + j] == expert:
                        rank = rank + 1
                if expert < E:
                    T.atomic_add(warp_slots[warp, expert], 1)
                T.sync_threads()
                # Per-warp counts -> each warp's first slot, and the experts' next slots.
                for e0 in T.serial(T.ceildiv(E, threads)):
                    e = e0 * threads + tx
                    if e < E:
                        run = next_slot[e]
                        for w in T.unroll(warps):
                            v = warp_slots[w, e]
                            warp_slots[w, e] = run
                            run = run + v
                        next_slot[e] = run
                T.sync_threads()
                if expert < E:
                    SortedIds[warp_slots[warp, expert] + rank] = i
                    Positions[i] = warp_slots[warp, expert] + rank
                elif i < n:
                    Positions[i] = -1
                T.sync_threads()

    return moe_align


moe_align_kernel = tegula.jit(moe_align_program)


def moe_permute_program(H, k, dtype, blk_m, threads, n_pad, chunks=1):
    """X (t, H), SortedIds (p,) -> Y (p, H): row r of Y is row SortedIds[r] // k of X, or
    zeros where SortedIds[r] is not in [0, t k) (vLLM's padding entry t k). Rows of Y are
    gathered blk_m to a block in 16-byte vectors; the copies mask the zero rows."""
    check_chunks("moe_permute_program", H, n_pad, chunks)
    t = T.dynamic("t")
    p = T.dynamic("p")

    @T.prim_func
    def moe_permute(X: T.Tensor((t, H), dtype), SortedIds: T.Tensor((p,), T.int32), Y: T.Tensor((p, H), dtype)):
        with T.Kernel(T.ceildiv(p, blk_m), threads=threads) as bx:
            x = T.alloc_fragment((blk_m, n_pad), dtype)
            for ch in chunk_loop(chunks):
                for i, j in T.Parallel(blk_m, n_pad):
                    x[i, j] = X[source_row(SortedIds, bx * blk_m + i, p, t, k), ch * n_pad + j]
                T.copy(x, Y[bx * blk_m, ch * n_pad])

    return moe_permute


@T.macro
def source_row(SortedIds, r, p, t, k):
    """The row of X that row r of the permuted matrix holds, or -1 (a padding entry, or a
    row past p): an index the loads mask. The entry is read in place three times rather
    than bound to a name: a name bound in a T.macro ends with the macro, and the value
    returned here is used after it (the engine stops with an IR verification error)."""
    return T.if_then_else(r < p and SortedIds[T.min(r, p - 1)] >= 0 and SortedIds[T.min(r, p - 1)] < t * k,
                          SortedIds[T.min(r, p - 1)] // k, -1)


@T.macro
def token_weight(Weights, Positions, row, j, t):
    """The float32 weight of slot j of token `row` (clamped to t - 1; rows past t are never
    stored), 0 where the slot's position is -1 (a dropped id)."""
    return T.if_then_else(Positions[T.min(row, t - 1), j] >= 0, T.cast(Weights[T.min(row, t - 1), j], "float32"), 0.0)


def moe_combine_program(H, k, dtype, weight_dtype, blk_m, threads, n_pad, chunks=1):
    """Y (r, H), Weights (t, k), Positions (t, k) int32 -> Out (t, H):
    out[i] = sum_j Weights[i, j] * Y[Positions[i, j]] in float32, j in order, rounded once;
    a position of -1 (a dropped id) adds nothing. blk_m tokens a block; each of a token's k
    rows of Y is gathered in 16-byte vectors."""
    check_chunks("moe_combine_program", H, n_pad, chunks)
    t = T.dynamic("t")
    r = T.dynamic("r")

    @T.prim_func
    def moe_combine(Y: T.Tensor((r, H), dtype), Weights: T.Tensor((t, k), weight_dtype),
                    Positions: T.Tensor((t, k), T.int32), Out: T.Tensor((t, H), dtype)):
        with T.Kernel(T.ceildiv(t, blk_m), threads=threads) as bx:
            acc = T.alloc_fragment((blk_m, n_pad), "float32")
            y = T.alloc_fragment((blk_m, n_pad), dtype)
            for ch in chunk_loop(chunks):
                # The slots are unrolled while parsing. The gather goes through a fragment of
                # Y's dtype and comes first, so that the layouts are chosen for 16-byte loads
                # of Y (a float32 accumulator laid out first would take 4 elements a load).
                for j in tuple(range(k)):
                    if blk_m == 1:
                        T.copy(Y[Positions[T.min(bx, t - 1), j], ch * n_pad], y)
                    else:
                        for i, c in T.Parallel(blk_m, n_pad):
                            y[i, c] = Y[Positions[T.min(bx * blk_m + i, t - 1), j], ch * n_pad + c]
                    for i, c in T.Parallel(blk_m, n_pad):
                        term = token_weight(Weights, Positions, bx * blk_m + i, j, t) * T.cast(y[i, c], "float32")
                        if j == 0:
                            acc[i, c] = term
                        else:
                            acc[i, c] += term
                for i, c in T.Parallel(blk_m, n_pad):
                    y[i, c] = T.cast(acc[i, c], dtype)
                T.copy(y, Out[bx * blk_m, ch * n_pad])

    return moe_combine


moe_permute_kernel = tegula.jit(out_idx=[-1])(moe_permute_program)
moe_combine_kernel = tegula.jit(out_idx=[-1])(moe_combine_program)


@functools.lru_cache(maxsize=None)
def align_kernel_for(E: int, block_size: int, ids_dtype: torch.dtype):
    """kernel(topk_ids_flat, counts, sorted_ids, expert_ids, num_post, offsets, positions):
    one kernel for every token count."""
    return moe_align_kernel(E, block_size, ids_dtype=str(ids_dtype).replace("torch.", ""))


@functools.lru_cache(maxsize=None)
def permute_kernel_for(H: int, k: int, dtype: torch.dtype):
    plan = plan_rows(H, elem_bytes(dtype))
    return moe_permute_kernel(H, k, dtype_name(dtype), plan.blk_m, plan.threads, plan.n_pad, plan.chunks)


@functools.lru_cache(maxsize=None)
def combine_kernel_for(H: int, k: int, dtype: torch.dtype, weight_dtype: torch.dtype):
    plan = plan_rows(H, elem_bytes(dtype))
    return moe_combine_kernel(H, k, dtype_name(dtype), dtype_name(weight_dtype), plan.blk_m, plan.threads,
                              plan.n_pad, plan.chunks)


class MoeAlignment(NamedTuple):
    """moe_align_block_size's result; the first three are vLLM's."""
    sorted_token_ids: torch.Tensor        # (T k + E (block_size - 1),) int32: flat ids t k + j, by expert
    expert_ids: torch.Tensor              # (ceil(len(sorted_token_ids) / block_size),) int32, -1 past the last
    num_tokens_post_padded: torch.Tensor  # (1,) int32: the padded total, expert_offsets[E]
    expert_offsets: torch.Tensor          # (E + 1,) int32: expert e's slots are [offsets[e], offsets[e + 1])
    token_positions: torch.Tensor         # topk_ids' shape, int32: the slot of each (t, j), -1 if dropped


def _check_int(op, name, value, lo, hi, what):
    if isinstance(value, torch.SymInt):
        return  # a size torch.compile traces symbolically: the eager call checks the value it gets
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{op}: {name} must be an int in [{lo}, {hi}] ({what}), got {value!r}")


def _empty_alignment(topk_ids, E, block_size, n):
    """The alignment of no routed id (T = 0 or k = 0): every slot padding, no block used."""
    slots = n + E * (block_size - 1)
    dev = topk_ids.device
    return MoeAlignment(torch.full((slots,), n, dtype=torch.int32, device=dev),
                        torch.full((-(-slots // block_size),), -1, dtype=torch.int32, device=dev),
                        torch.zeros(1, dtype=torch.int32, device=dev),
                        torch.zeros(E + 1, dtype=torch.int32, device=dev),
                        torch.empty(topk_ids.shape, dtype=torch.int32, device=dev))


def check_moe_align_args(op, topk_ids, num_experts, block_size) -> None:
    """The arguments of moe_align_block_size (its operator's fake checks them too)."""
    if not isinstance(topk_ids, torch.Tensor):
        raise TypeError(f"{op}: topk_ids must be a torch.Tensor (T, k) of expert ids, got {describe(topk_ids)}")
    if topk_ids.dtype not in ID_DTYPES:
        raise ValueError(f"{op}: topk_ids must be an int32 or int64 tensor, got {describe(topk_ids)}")
    check_rank(op, "topk_ids", topk_ids, 2, "T, k")
    _check_int(op, "num_experts", num_experts, 1, MAX_EXPERTS, "the experts ids may name")
    _check_int(op, "block_size", block_size, 1, 1024, "the row tile of the expert GEMMs")
    check_devices(op, ("topk_ids", topk_ids))
    slots = topk_ids.numel() + num_experts * (block_size - 1)
    if slots >= 2 ** 31:
        raise ValueError(f"{op}: T k + num_experts (block_size - 1) = {slots} slots do not fit int32 indices, "
                         f"got {describe(topk_ids)}")


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_size: int,
                         check_indices: bool | None = None) -> MoeAlignment:
    """The routed (token, slot) pairs sorted by expert, each expert's run padded to a
    multiple of block_size, as vLLM's moe_align_block_size lays them out, in one call
    without host synchronisation.

    topk_ids: (T, k) int32 or int64 on a CUDA device, the experts each token is routed to.
    Returns a MoeAlignment (a named tuple): sorted_token_ids (T k + E (block_size - 1),)
    int32 holding flat indices t k + j grouped by expert, in increasing order within an
    expert (stable, the same on every run), padding entries = T k; expert_ids, the expert of
    each block of block_size slots (-1 for blocks past num_tokens_post_padded);
    num_tokens_post_padded (1,); expert_offsets (E + 1,), the padded offsets grouped_gemm
    takes; token_positions (T, k), the slot of each (t, j), moe_combine's index. Ids
    outside [0, num_experts) are dropped (position -1); with check_indices=True (or
    TEGULA_CHECK_INDICES=1) an id other than those and -1 is an error naming it
    (kernels/_index_checks.py)."""
    op = "moe_align_block_size"
    check_moe_align_args(op, topk_ids, num_experts, block_size)
    if index_checks.wanted(op, check_indices, topk_ids):
        index_checks.check_range(op, "topk_ids", topk_ids, 0, num_experts, f"the ids of {num_experts} experts",
                                 allowed=(-1,))
    n = topk_ids.numel()
    slots = n + num_experts * (block_size - 1)
    if n == 0:
        return _empty_alignment(topk_ids, num_experts, block_size, n)
    dev = topk_ids.device
    chunks = align_chunks(n, num_experts)
    counts = torch.empty((num_experts, chunks), dtype=torch.int32, device=dev)
    sorted_ids = torch.empty(slots, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(-(-slots // block_size), dtype=torch.int32, device=dev)
    num_post = torch.empty(1, dtype=torch.int32, device=dev)
    offsets = torch.empty(num_experts + 1, dtype=torch.int32, device=dev)
    positions = torch.empty(topk_ids.shape, dtype=torch.int32, device=dev)
    kernel = align_kernel_for(num_experts, block_size, topk_ids.dtype)
    kernel(launchable(topk_ids).view(n), counts, sorted_ids, expert_ids, num_post, offsets, positions.view(n))
    return MoeAlignment(sorted_ids, expert_ids, num_post, offsets, positions)


def check_moe_permute_args(op, x, sorted_token_ids, top_k) -> None:
    """The arguments of moe_permute (its operator's fake checks them too)."""
    check_tensor(op, "x", x)
    if not isinstance(sorted_token_ids, torch.Tensor):
        raise TypeError(f"{op}: sorted_token_ids must be a torch.Tensor (int32 flat ids), "
                        f"got {describe(sorted_token_ids)}")
    if sorted_token_ids.dtype != torch.int32:
        raise ValueError(f"{op}: sorted_token_ids must be an int32 tensor, got {describe(sorted_token_ids)}")
    check_rank(op, "x", x, 2, "T, H")
    check_rank(op, "sorted_token_ids", sorted_token_ids, 1, "slots")
    _check_int(op, "top_k", top_k, 1, 1 << 16, "the experts a token is routed to")
    check_devices(op, ("x", x), ("sorted_token_ids", sorted_token_ids))
    if x.shape[0] * top_k >= 2 ** 31:
        raise ValueError(f"{op}: T top_k = {x.shape[0] * top_k} flat ids do not fit int32, got {describe(x)}")


def moe_permute(x: torch.Tensor, sorted_token_ids: torch.Tensor, top_k: int,
                check_indices: bool | None = None) -> torch.Tensor:
    """The token-sorted activation grouped_gemm reads: (len(sorted_token_ids), H), row r =
    x[sorted_token_ids[r] // top_k], or zeros where sorted_token_ids[r] is a padding entry
    (not in [0, T top_k)).

    x: (T, H) CUDA float16/bfloat16/float32. sorted_token_ids: 1-D int32 on x's device (as
    moe_align_block_size gives it). top_k: the slots a token is routed to. Rows are copied
    in 16-byte vectors. With check_indices=True (or TEGULA_CHECK_INDICES=1) an id outside
    [0, T top_k] (T top_k: the padding entry) is an error naming it (kernels/_index_checks.py)."""
    op = "moe_permute"
    check_moe_permute_args(op, x, sorted_token_ids, top_k)
    (T_, H), P = x.shape, sorted_token_ids.shape[0]
    if index_checks.wanted(op, check_indices, sorted_token_ids):
        index_checks.check_range(op, "sorted_token_ids", sorted_token_ids, 0, T_ * top_k + 1,
                                 f"flat ids t top_k + j of the {T_} tokens of x, or {T_ * top_k} for padding")
    if P == 0 or H == 0:
        return x.new_empty((P, H))
    if T_ == 0:
        return x.new_zeros((P, H))
    return permute_kernel_for(H, top_k, x.dtype)(launchable(x), launchable(sorted_token_ids))


def check_moe_combine_args(op, y, topk_weights, token_positions) -> None:
    """The arguments of moe_combine (its operator's fake checks them too)."""
    check_tensor(op, "y", y)
    check_tensor(op, "topk_weights", topk_weights)
    if topk_weights.dtype not in (torch.float32, y.dtype):
        raise ValueError(f"{op}: topk_weights must be a float32 tensor or one of y's dtype, "
                         f"got {describe(topk_weights)}")
    if not isinstance(token_positions, torch.Tensor):
        raise TypeError(f"{op}: token_positions must be a torch.Tensor (T, k) int32, got {describe(token_positions)}")
    if token_positions.dtype != torch.int32:
        raise ValueError(f"{op}: token_positions must be an int32 tensor, got {describe(token_positions)}")
    check_rank(op, "y", y, 2, "R, H")
    check_rank(op, "topk_weights", topk_weights, 2, "T, k")
    if token_positions.shape != topk_weights.shape:
        raise ValueError(f"{op}: token_positions must have the shape {tuple(topk_weights.shape)} of topk_weights, "
                         f"got {describe(token_positions)}")
    check_devices(op, ("y", y), ("topk_weights", topk_weights), ("token_positions", token_positions))


def moe_combine(y: torch.Tensor, topk_weights: torch.Tensor, token_positions: torch.Tensor,
                check_indices: bool | None = None) -> torch.Tensor:
    """out (T, H), out[t] = sum_j topk_weights[t, j] * y[token_positions[t, j]]: the experts'
    outputs, held in sorted (padded) order, weighted back into token order. One kernel; the
    sum is taken in float32 over j in order and rounded once.

    y: (R, H) CUDA float16/bfloat16/float32 (grouped_gemm's output). topk_weights: (T, k),
    float32 or y's dtype. token_positions: (T, k) int32 (moe_align_block_size's), -1 for a
    slot that adds nothing (a dropped id); any other position outside [0, R) reads zeros,
    unless check_indices=True (or TEGULA_CHECK_INDICES=1) makes it an error naming the entry
    (kernels/_index_checks.py). NaN and inf in a gathered row or a weight propagate as in
    torch."""
    op = "moe_combine"
    check_moe_combine_args(op, y, topk_weights, token_positions)
    (R, H), (T_, k) = y.shape, topk_weights.shape
    if index_checks.wanted(op, check_indices, token_positions):
        index_checks.check_range(op, "token_positions", token_positions, 0, R, f"the {R} rows of y",
                                 allowed=(-1,))
    if T_ == 0 or H == 0:
        return y.new_empty((T_, H))
    if k == 0 or R == 0:
        return y.new_zeros((T_, H))
    kernel = combine_kernel_for(H, k, y.dtype, topk_weights.dtype)
    return kernel(launchable(y), launchable(topk_weights), launchable(token_positions))
