"""Multi-head latent attention (DeepSeek-V2/V3), one decode step.

    out[b, h] = softmax(q[b, h] · C[b, :len_b]ᵀ · scale) C[b, :len_b, :512]

Every query head attends to one latent KV head of width 576: its first 512 columns (the
"nope" part) are also the value, its last 64 the rotary ("rope") part. q (B, h_q, 576);
the cache C is contiguous (B, S_max, 576) or paged: pages (num_pages, 64, 576) and a block
table (B, max_pages) naming each sequence's pages in order, as FlashMLA takes them.

The program has two kernels, launched in order by one call:
1. block (64 query heads, split, sequence) runs the online softmax over its share of the
   key blocks. The output accumulator is 64 x 512: too large for one warpgroup's
   registers, so its columns are split over two warpgroups (policy FullCol on both
   gemms). The score gemm then leaves each warpgroup half of the 64 x 64 scores, while the
   value gemm needs all of them in each: the engine derives that exchange through shared
   memory from the two layouts (layout inference, `T.copy(acc_s, acc_s_cast)`). With 16
   or 32 query heads (a tensor-parallel shard) the block is 16 or 32 rows over four warps.
2. block (head, sequence) combines the splits by their log-sum-exps.
The splits' partial outputs live in `T.alloc_global` workspaces the runtime allocates.
"""
import functools
import math

import torch

import tegula
import tegula.language as T

from . import _index_checks as index_checks
from ._attention import check_num_split, check_operand, check_sm_scale, online_softmax
from ._common import check_devices, describe, dtype_name, launchable, sm_count
from .flash_attention import FAST_MATH

LOG2E = 1.4426950408889634
DIM, PE_DIM, PAGE = 512, 64, 64


def block_heads(heads):
    return 64 if heads > 32 else 16 * -(-heads // 16)


def mla_decode_program(batch, heads, kv_rows, num_split, paged=False, table_width=0, dtype="float16",
                       sm_scale=None, block_N=PAGE, num_stages=2):
    """kv_rows: S_max (contiguous cache) or the number of pages (paged)."""
    accum = "float32"
    width = DIM + PE_DIM
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(width)) * LOG2E
    # 64 query heads a block, on wgmma (its smallest M) over two warpgroups; a tensor-
    # parallel shard of 16 or 32 heads takes a 16- or 32-row block on mma.sync over four
    # warps instead, so that no tensor-core work is spent on padding rows.
    block_H = block_heads(heads)
    threads = 256 if block_H == 64 else 128
    head_blocks = -(-heads // block_H)
    kv_shape = (kv_rows, PAGE, width) if paged else (batch, kv_rows, width)
    max_len = table_width * PAGE if paged else kv_rows

    @T.prim_func
    def mla_decode(Q: T.Tensor((batch, heads, width), dtype), KV: T.Tensor(kv_shape, dtype),
                   block_table: T.Tensor((batch, max(table_width, 1)), T.int32),
                   seqlens: T.Tensor((batch,), T.int32), Output: T.Tensor((batch, heads, DIM), dtype),
                   Lse: T.Tensor((batch, heads), accum)):
        O_part = T.alloc_global((batch, heads, num_split, DIM), accum)
        L_part = T.alloc_global((batch, heads, num_split), accum)
        with T.Kernel(head_blocks, num_split, batch, threads=threads) as (hb, bs, bz):
            Q_shared = T.alloc_shared((block_H, DIM), dtype)
            Q_pe_shared = T.alloc_shared((block_H, PE_DIM), dtype)
            KV_shared = T.alloc_shared((block_N, DIM), dtype)
            K_pe_shared = T.alloc_shared((block_N, PE_DIM), dtype)
            acc_s = T.alloc_fragment((block_H, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_H, block_N), dtype)
            acc_o = T.alloc_fragment((block_H, DIM), accum)
            scores_max = T.alloc_fragment((block_H,), accum)
            scores_max_prev = T.alloc_fragment((block_H,), accum)
            scores_scale = T.alloc_fragment((block_H,), accum)
            scores_sum = T.alloc_fragment((block_H,), accum)
            logsum = T.alloc_fragment((block_H,), accum)
            seqlen = T.min(seqlens[bz], max_len)
            blocks = T.ceildiv(seqlen, block_N)
            per_split = T.ceildiv(blocks, num_split)
            first = bs * per_split
            T.copy(Q[bz, hb * block_H:(hb + 1) * block_H, 0:DIM], Q_shared)
            T.copy(Q[bz, hb * block_H:(hb + 1) * block_H, DIM:width], Q_pe_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -1e30)
            for kb in T.Pipelined(T.max(0, T.min(per_split, blocks - first)), num_stages=num_stages):
                k0 = (first + kb) * block_N
                if paged:
                    page = block_table[bz, first + kb]
                    T.copy(KV[page, 0:PAGE, 0:DIM], KV_shared)
                    T.copy(KV[page, 0:PAGE, DIM:width], K_pe_shared)
                else:
                    T.copy(KV[bz, k0:k0 + block_N, 0:DIM], KV_shared)
                    T.copy(KV[bz, k0:k0 + block_N, DIM:width], K_pe_shared)
                if k0 + block_N > seqlen:  # rows past the end may hold anything, NaN included
                    for i, j in T.Parallel(block_N, DIM):
                        KV_shared[i, j] = T.if_then_else(k0 + i < seqlen, KV_shared[i, j], 0)
                T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol,
                       clear_accum=True)
                T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.if_then_else(k0 + j < seqlen, acc_s[i, j], -T.infinity(accum))
                online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum,
                               logsum, scale, block_H, block_N, DIM)
                T.gemm(acc_s_cast, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)
            # An empty split leaves 0 and a log-sum-exp of -inf (weight 0 in the combine).
            for i, j in T.Parallel(block_H, DIM):
                if hb * block_H + i < heads:
                    O_part[bz, hb * block_H + i, bs, j] = T.if_then_else(logsum[i] == 0, 0, acc_o[i, j] / logsum[i])
            for i in T.Parallel(block_H):
                if hb * block_H + i < heads:
                    L_part[bz, hb * block_H + i, bs] = T.if_then_else(
                        logsum[i] == 0, -T.infinity(accum), T.log2(logsum[i]) + scores_max[i] * scale)

        # One warp per (head, sequence, 128 output columns): many small blocks, each split's
        # weight computed once, the loops over the splits unrolled so that their loads are
        # in flight together.
        with T.Kernel(heads, batch, DIM // 128, threads=32) as (bh, bz, bc):
            o = T.alloc_fragment((128,), accum)
            lse_max = T.alloc_var(accum)
            total = T.alloc_var(accum)
            lse_max = -T.infinity(accum)
            for s in T.unroll(num_split):
                lse_max = T.max(lse_max, L_part[bz, bh, s])
            total = 0.0
            for s in T.unroll(num_split):
                total += T.exp2(L_part[bz, bh, s] - lse_max)
            T.clear(o)
            # A sequence of length 0 has every split at -inf: output 0, log-sum-exp -inf.
            if lse_max != -T.infinity(accum):
                inv_total = 1.0 / total
                for s in T.unroll(num_split):
                    weight = T.exp2(L_part[bz, bh, s] - lse_max) * inv_total
                    for j in T.Parallel(128):
                        o[j] += O_part[bz, bh, s, bc * 128 + j] * weight
            T.copy(o, Output[bz, bh, bc * 128:(bc + 1) * 128])
            if bc == 0:
                Lse[bz, bh] = T.if_then_else(lse_max == -T.infinity(accum), lse_max,
                                             (T.log2(total) + lse_max) * (1 / LOG2E))

    return mla_decode


mla_decode_kernel = tegula.jit(out_idx=[4, 5], pass_configs=FAST_MATH)(mla_decode_program)


def default_num_split(batch, heads, max_len, sms=132):
    """Enough blocks for two waves of the machine (a few sequences of a tensor-parallel
    shard are memory-bound: every SM must stream), at least two key blocks a split."""
    blocks = batch * -(-heads // block_heads(heads))
    want = -(-2 * sms // blocks)
    return max(1, min(128, want, -(-max_len // (2 * PAGE))))


@functools.lru_cache(maxsize=None)
def kernel_for(batch, heads, kv_rows, num_split, paged, table_width, dtype, sm_scale):
    return mla_decode_kernel(batch, heads, kv_rows, num_split, paged=paged, table_width=table_width, dtype=dtype,
                             sm_scale=sm_scale)


@functools.lru_cache(maxsize=64)
def _no_table(batch, device):
    """The block-table argument of the contiguous program, which never reads it."""
    return torch.zeros((batch, 1), dtype=torch.int32, device=device)


def check_mla_decode_args(op, q, kv_cache, cache_seqlens, block_table, sm_scale, num_split):
    """The arguments of mla_decode (its operator's fake checks them too); returns
    (B, H, capacity): capacity the tokens a sequence can hold, max_pages x 64 when paged,
    else S_max."""
    check_operand(op, "q", q, 3, "B, h_q, 576")
    B, H, W = q.shape
    if W != DIM + PE_DIM:
        raise ValueError(f"{op}: q must be (B, h_q, {DIM + PE_DIM}) (512 latent + 64 rope), got {describe(q)}")
    paged = block_table is not None
    check_operand(op, "kv_cache", kv_cache, 3, "num_pages, 64, 576" if paged else "B, S_max, 576")
    if kv_cache.dtype != q.dtype:
        raise ValueError(f"{op}: kv_cache must have q's dtype {dtype_name(q.dtype)}, got {describe(kv_cache)}")
    if paged:
        if kv_cache.shape[1] != PAGE or kv_cache.shape[2] != W:
            raise ValueError(f"{op}: a paged kv_cache must be (num_pages, {PAGE}, {W}), got {describe(kv_cache)}")
        if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 \
                or block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError(f"{op}: block_table must be an int32 tensor of shape ({B}, max_pages), "
                             f"got {describe(block_table)}")
    elif kv_cache.shape[0] != B or kv_cache.shape[2] != W:
        raise ValueError(f"{op}: kv_cache must be ({B}, S_max, {W}) to match q, got {describe(kv_cache)}")
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32 \
            or tuple(cache_seqlens.shape) != (B,):
        raise ValueError(f"{op}: cache_seqlens must be an int32 tensor of shape ({B},), got {describe(cache_seqlens)}")
    check_sm_scale(op, sm_scale)
    check_num_split(op, num_split)
    named = [("q", q), ("kv_cache", kv_cache), ("cache_seqlens", cache_seqlens)]
    check_devices(op, *(named + ([("block_table", block_table)] if paged else [])))
    return B, H, block_table.shape[1] * PAGE if paged else kv_cache.shape[1]


def mla_decode(q, kv_cache, cache_seqlens, block_table=None, sm_scale=None, num_split=None, return_lse=False,
               check_indices=None):
    """One decode step of multi-head latent attention.

    q (B, h_q, 576) float16 or bfloat16; kv_cache in q's dtype, either contiguous
    (B, S_max, 576) or, with `block_table` (B, max_pages) int32, pages (num_pages, 64, 576);
    cache_seqlens int32 (B,). Keys at and past len_b are ignored whatever the cache holds
    there (lengths past the cache count as its end; a length of 0 gives zeros and a
    log-sum-exp of -inf). A block-table entry outside [0, num_pages) reads zeros.
    check_indices=True (or TEGULA_CHECK_INDICES=1) makes a length outside [0, capacity] or
    a page a sequence reads outside [0, num_pages) an error naming the entry (see
    kernels/_index_checks.py). sm_scale defaults to 1/sqrt(576). Returns out (B, h_q, 512) in q's
    dtype and, with return_lse, the natural log-sum-exp of the scaled scores (B, h_q)
    float32.
    """
    op = "mla_decode"
    B, H, max_len = check_mla_decode_args(op, q, kv_cache, cache_seqlens, block_table, sm_scale, num_split)
    paged = block_table is not None
    table_width = block_table.shape[1] if paged else 0
    if index_checks.wanted(op, check_indices, cache_seqlens, block_table):
        index_checks.check_lengths(op, "cache_seqlens", cache_seqlens, max_len,
                                   f"block_table's {table_width} pages of {PAGE} tokens" if paged
                                   else f"S_max = {max_len}, the length of kv_cache")
        if paged:
            index_checks.check_block_table(op, block_table, cache_seqlens, PAGE, kv_cache.shape[0])
    if B * H == 0 or max_len == 0 or kv_cache.shape[0] == 0:
        out = torch.zeros((B, H, DIM), dtype=q.dtype, device=q.device)
        lse = torch.full((B, H), -math.inf, dtype=torch.float32, device=q.device)
        return (out, lse) if return_lse else out
    if num_split is None:
        num_split = default_num_split(B, H, max_len, sms=sm_count(q.device))
    kernel = kernel_for(B, H, kv_cache.shape[0] if paged else kv_cache.shape[1], num_split, paged, table_width,
                        dtype_name(q.dtype), None if sm_scale is None else float(sm_scale))
    table = launchable(block_table) if paged else _no_table(B, q.device)
    out, lse = kernel(launchable(q), launchable(kv_cache), table, launchable(cache_seqlens))
    return (out, lse) if return_lse else out
