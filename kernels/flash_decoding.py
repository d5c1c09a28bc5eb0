"""Flash decoding: one new query token per sequence against a long KV cache.

    out[b, h] = softmax(q[b, h] · K[b, :len_b, h // G]ᵀ · scale) V[b, :len_b, h // G]

q (B, H, D); the caches (B, S_max, Hkv, D) with per-sequence lengths len_b (int32,
B); G = H / Hkv query heads share one KV head. With one query row per head there is too
little work per sequence to fill the GPU, so the keys are split `num_split` ways:

1. `decode_split`: block (split, kv head, batch) runs the online softmax of
   FlashAttention over its share of the keys for the G query heads of that KV head at
   once (they form the rows of one tensor-core tile, padded to 16), and writes a partial
   output and its base-2 log-sum-exp;
2. `decode_combine`: block (head, batch) rescales the partial outputs by their
   log-sum-exps and sums them.

Keys past a sequence's length are masked after the product and the matching value rows
are zeroed, so whatever the unused part of the cache holds (even NaN) never reaches the
output. The kernel reads each key and value once: it is bound by memory bandwidth.
"""
import functools
import math

import torch

import tegula
import tegula.language as T

from . import _index_checks as index_checks
from ._attention import (check_heads, check_like_q, check_num_split, check_operand, check_sm_scale,
                         online_softmax)
from ._common import check_devices, describe, dtype_name, launchable, sm_count
from .flash_attention import FAST_MATH

LOG2E = 1.4426950408889634


def decode_split_program(batch, heads, kv_heads, max_seqlen, dim, num_split, block_N=64, num_stages=2,
                         dtype="float16", sm_scale=None):
    accum = "float32"
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(dim)) * LOG2E
    group = heads // kv_heads
    block_H = 16 * -(-group // 16)             # the G query rows, padded to an mma tile
    threads = 32 * (block_H // 16)             # one warp per 16 rows

    @T.prim_func
    def decode_split(Q: T.Tensor((batch, heads, dim), dtype),
                     K: T.Tensor((batch, max_seqlen, kv_heads, dim), dtype),
                     V: T.Tensor((batch, max_seqlen, kv_heads, dim), dtype),
                     seqlens: T.Tensor((batch,), T.int32),
                     Out_part: T.Tensor((batch, heads, num_split, dim), accum),
                     Lse_part: T.Tensor((batch, heads, num_split), accum)):
        with T.Kernel(num_split, kv_heads, batch, threads=threads) as (bs, bh, bz):
            Q_shared = T.alloc_shared((block_H, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            acc_s = T.alloc_fragment((block_H, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_H, block_N), dtype)
            acc_o = T.alloc_fragment((block_H, dim), accum)
            scores_max = T.alloc_fragment((block_H,), accum)
            scores_max_prev = T.alloc_fragment((block_H,), accum)
            scores_scale = T.alloc_fragment((block_H,), accum)
            scores_sum = T.alloc_fragment((block_H,), accum)
            logsum = T.alloc_fragment((block_H,), accum)
            seqlen = T.min(seqlens[bz], max_seqlen)
            blocks = T.ceildiv(seqlen, block_N)
            per_split = T.ceildiv(blocks, num_split)
            first = bs * per_split
            T.copy(Q[bz, bh * group:bh * group + block_H, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -1e30)
            for kb in T.Pipelined(T.max(0, T.min(per_split, blocks - first)), num_stages=num_stages):
                k0 = (first + kb) * block_N
                T.copy(K[bz, k0:k0 + block_N, bh, :], K_shared)
                T.copy(V[bz, k0:k0 + block_N, bh, :], V_shared)
                if k0 + block_N > seqlen:
                    for i, j in T.Parallel(block_N, dim):
                        V_shared[i, j] = T.if_then_else(k0 + i < seqlen, V_shared[i, j], 0)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow,
                       clear_accum=True)
                for i, j in T.Parallel(block_H, block_N):
                    acc_s[i, j] = T.if_then_else(k0 + j < seqlen, acc_s[i, j], -T.infinity(accum))
                online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum,
                               logsum, scale, block_H, block_N, dim)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            # An empty split (more splits than key blocks) leaves 0 and a weight of 0; a NaN
            # denominator (NaN query, +inf score) leaves a NaN log-sum-exp, which the combine
            # spreads over the whole output, as torch's softmax would.
            for i in T.Parallel(block_H):
                scores_scale[i] = T.if_then_else(logsum[i] == 0, 0, 1 / logsum[i])
            for i, j in T.Parallel(block_H, dim):
                if i < group:
                    Out_part[bz, bh * group + i, bs, j] = acc_o[i, j] * scores_scale[i]
            for i in T.Parallel(block_H):
                if i < group:
                    Lse_part[bz, bh * group + i, bs] = T.if_then_else(
                        logsum[i] == 0, -T.infinity(accum), T.log2(logsum[i]) + scores_max[i] * scale)

    return decode_split


def decode_combine_program(batch, heads, dim, num_split, dtype="float16"):
    accum = "float32"

    @T.prim_func
    def decode_combine(Out_part: T.Tensor((batch, heads, num_split, dim), accum),
                       Lse_part: T.Tensor((batch, heads, num_split), accum),
                       Output: T.Tensor((batch, heads, dim), dtype)):
        with T.Kernel(heads, batch, threads=dim) as (bh, bz):
            o = T.alloc_fragment((dim,), accum)
            lse_max = T.alloc_var(accum)
            total = T.alloc_var(accum)
            lse_max = -T.infinity(accum)
            for s in T.serial(num_split):
                lse_max = T.max(lse_max, Lse_part[bz, bh, s])
            total = 0.0
            for s in T.serial(num_split):
                total += T.exp2(Lse_part[bz, bh, s] - lse_max)
            T.clear(o)
            # A sequence of length 0 has no key (every split at -inf): its output stays 0.
            # T.max keeps a NaN, so a NaN split makes lse_max, total and the output NaN.
            if lse_max != -T.infinity(accum):
                for s in T.serial(num_split):
                    for j in T.Parallel(dim):
                        o[j] += Out_part[bz, bh, s, j] * (T.exp2(Lse_part[bz, bh, s] - lse_max) / total)
            T.copy(o, Output[bz, bh, :])

    return decode_combine


decode_split_kernel = tegula.jit(out_idx=[4, 5], pass_configs=FAST_MATH)(decode_split_program)
decode_combine_kernel = tegula.jit(out_idx=[2])(decode_combine_program)


def default_num_split(batch, kv_heads, max_seqlen, block_N=64, sms=132):
    """Enough blocks for several waves of the machine, at least two key blocks a split."""
    blocks = batch * kv_heads
    want = -(-4 * sms // blocks)
    return max(1, min(16, want, -(-max_seqlen // (2 * block_N))))


@functools.lru_cache(maxsize=None)
def kernels_for(batch, heads, kv_heads, max_seqlen, dim, num_split, dtype, sm_scale, **config):
    split = decode_split_kernel(batch, heads, kv_heads, max_seqlen, dim, num_split, dtype=dtype, sm_scale=sm_scale,
                                **config)
    combine = decode_combine_kernel(batch, heads, dim, num_split, dtype=dtype)
    return split, combine


def check_flash_decode_args(op, q, k_cache, v_cache, cache_seqlens, sm_scale, num_split):
    """The arguments of flash_decode (its operator's fake checks them too); returns
    (B, H, D, S_max, Hkv)."""
    for name, t, nd, what in (("q", q, 3, "B, H, D"), ("k_cache", k_cache, 4, "B, S_max, Hkv, D"),
                              ("v_cache", v_cache, 4, "B, S_max, Hkv, D")):
        check_operand(op, name, t, nd, what)
        check_like_q(op, name, t, q)
    B, H, D = q.shape
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"{op}: v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {describe(v_cache)}")
    Bk, S, Hkv, Dk = k_cache.shape
    if Bk != B or Dk != D:
        raise ValueError(f"{op}: k_cache must be ({B}, S_max, Hkv, {D}) to match q, got {describe(k_cache)}")
    check_heads(op, H, Hkv, D, "k_cache, v_cache", "k_cache/v_cache")
    if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32 \
            or tuple(cache_seqlens.shape) != (B,):
        raise ValueError(f"{op}: cache_seqlens must be an int32 tensor of shape ({B},), "
                         f"got {describe(cache_seqlens)}")
    check_sm_scale(op, sm_scale)
    check_num_split(op, num_split)
    check_devices(op, ("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens))
    return B, H, D, S, Hkv


def flash_decode(q, k_cache, v_cache, cache_seqlens, sm_scale=None, num_split=None, check_indices=None, **config):
    """Attention of one query token per sequence over a KV cache.

    q (B, H, D); k_cache and v_cache (B, S_max, Hkv, D), CUDA float16 or bfloat16, H a
    multiple of Hkv; cache_seqlens int32 (B,): keys at and past len_b are ignored, whatever
    the cache holds there (lengths past S_max count as S_max; a length of 0 gives zeros;
    check_indices=True, or TEGULA_CHECK_INDICES=1, makes a length outside [0, S_max] an
    error instead: see kernels/_index_checks.py).
    Returns (B, H, D) in q's dtype. num_split defaults to a split that gives the GPU several
    waves of blocks. Strided or misaligned views are copied first; an empty B, H or D gives
    an empty result and S_max = 0 zeros. NaN and inf follow torch's float32 softmax, as in
    `flash_attention`.
    """
    op = "flash_decode"
    B, H, D, S, Hkv = check_flash_decode_args(op, q, k_cache, v_cache, cache_seqlens, sm_scale, num_split)
    if index_checks.wanted(op, check_indices, cache_seqlens):
        index_checks.check_lengths(op, "cache_seqlens", cache_seqlens, S, f"S_max = {S}, the length of k_cache")
    if B * H * D * S == 0:  # nothing to launch: empty, or no key at all (zeros)
        return torch.zeros((B, H, D), dtype=q.dtype, device=q.device)
    if num_split is None:
        num_split = default_num_split(B, Hkv, S, sms=sm_count(q.device))
    split, combine = kernels_for(B, H, Hkv, S, D, num_split, dtype_name(q.dtype),
                                 None if sm_scale is None else float(sm_scale), **config)
    out_part, lse_part = split(launchable(q), launchable(k_cache), launchable(v_cache), launchable(cache_seqlens))
    return combine(out_part, lse_part)
