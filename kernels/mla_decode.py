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

An FP8 cache (float8_e4m3fn, one scale for the whole cache) halves the bytes of the
memory-bound case (a tensor-parallel shard, few heads a sequence). Its program streams the
key blocks into shared memory in 8 bits and converts each there to q's dtype, exactly
(every e4m3 value is a float16 and a bfloat16), before the same two gemms; the scale is
applied outside them, in float32: once in the softmax scale (q·(sK) = s(q·K)) and once on
each split's output (P·(sV) = s(P·V)). FP8 tensor cores are not used: their operands must
both be K-major, which V (the cache itself, N-major in P·V) is not, and q would have to be
rounded to 8 bits. Each stage is one copy of the block's whole 576-byte rows (one cp.async
group, one wait and barrier a block). A block of 16 or 32 heads takes 32-key blocks, whose
buffers let two blocks share a SM (fp8_config), and splits that even out the waves
(balanced_num_split): with one block of four warps a SM, each key block's chain of
barrier-separated steps (the conversion, whose e4m3 -> f16 instructions run at a quarter
of the integer rate, the gemms, the softmax's cross-warp reductions) left the SM idle on
latency. The conversion has two forms (`convert`): the dtype conversion (e4m3 -> f16 pairs
at a quarter of the integer rate; bfloat16 through float, twice that) or integer bit moves
and one exact multiply, NaN kept (CONVERTS, _bits_pair). FP8_TUNING overrides these
choices for sweeps. The 16-bit program is unchanged.
"""
import functools
import math
import re

import torch

import tegula
import tegula.language as T

from . import _calls, _index_checks as index_checks
from ._attention import check_kv_scale, check_num_split, check_operand, check_sm_scale, online_softmax
from ._common import check_devices, check_rank, check_tensor, describe, dtype_name, launchable, sm_count
from .flash_attention import FAST_MATH

LOG2E = 1.4426950408889634
DIM, PE_DIM, PAGE = 512, 64, 64
FP8 = "float8_e4m3fn"


def async_proxy_target(target=None):
    """Whether `target` (None: the one tegula.compile picks, the GPU's or TEGULA_TARGET's)
    is sm_90 or newer, where T.gemm may read shared memory through the async proxy."""
    arch = tegula.env.resolve_target(target)[0]
    return int(re.match(r"sm_(\d+)", arch).group(1)) >= 90


def block_heads(heads):
    return 64 if heads > 32 else 16 * -(-heads // 16)


def mla_decode_program(batch, heads, kv_rows, num_split, paged=False, table_width=0, dtype="float16",
                       sm_scale=None, block_N=PAGE, num_stages=2, kv_dtype=None, convert="cvt"):
    """kv_rows: S_max (contiguous cache) or the number of pages (paged). kv_dtype None is
    the cache in `dtype`; FP8 ("float8_e4m3fn") adds a float32 scalar parameter kv_scale
    after seqlens (the outputs are then parameters 5 and 6). convert (FP8 only): how the
    8-bit block becomes q's dtype, "cvt" (the dtype conversion, e4m3 -> f16 pairs, bf16
    through float) or "bits" (integer bit moves and one exact multiply, CONVERTS)."""
    if kv_dtype is None or kv_dtype == dtype:
        return _program_16(batch, heads, kv_rows, num_split, paged, table_width, dtype, sm_scale, block_N,
                           num_stages)
    if kv_dtype != FP8:
        raise ValueError(f"mla_decode_program: kv_dtype must be None, {dtype!r} or {FP8!r}, got {kv_dtype!r}")
    if block_N not in (32, PAGE):
        raise ValueError(f"mla_decode_program: an FP8 cache's block_N must be 32 or {PAGE}, got {block_N!r}")
    if convert not in CONVERTS:
        raise ValueError(f"mla_decode_program: convert must be one of {CONVERTS}, got {convert!r}")
    return _program_fp8(batch, heads, kv_rows, num_split, paged, table_width, dtype, sm_scale, block_N, num_stages,
                        convert)


def _program_16(batch, heads, kv_rows, num_split, paged, table_width, dtype, sm_scale, block_N, num_stages):
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
                attend_block(Q_shared, Q_pe_shared, KV_shared, K_pe_shared, acc_s, acc_s_cast, acc_o, scores_max,
                             scores_max_prev, scores_scale, scores_sum, logsum, scale, k0, seqlen, block_H, block_N)
            store_split(O_part, L_part, acc_o, logsum, scores_max, scores_scale, scale, None, heads, hb, bs, bz,
                        block_H)

        combine(O_part, L_part, Output, Lse, batch, heads, num_split)

    return mla_decode


# How an FP8 program turns the 8-bit block into q's dtype (mla_decode_program's `convert`).
CONVERTS = ("cvt", "bits")
# The "bits" conversion of an e4m3 byte b to a 16-bit float, exactly: the sign to bit 15 and
# the seven magnitude bits (4 exponent, 3 mantissa) to the bottom of the exponent field,
# (b & 0x7F) << SHIFT, are the value times 2^-SCALE (e4m3's bias 7 against float16's 15 or
# bfloat16's 127, subnormal e4m3 codes becoming subnormal 16-bit ones with the same ratio);
# one multiply by 2^SCALE, which keeps subnormal inputs (16-bit arithmetic does not flush
# them), gives the value. NaN (0x7F, 0xFF) would read as +-480: NAN_SHIFT makes it the
# dtype's NaN (see _bits_pair).
BITS_SHIFT = {"float16": 7, "bfloat16": 4}
BITS_SCALE = {"float16": 8, "bfloat16": 120}
NAN_SHIFT = {"float16": 6, "bfloat16": 9}   # 0x8000 - (0x8000 >> n): 0x7E00, 0x7FC0


def _bits_pair(z, dtype):
    """The 32-bit word of two `dtype` values (low half first) from the e4m3 bytes at bits
    8..15 and 24..31 of z (the rest zero): two bit moves (sign kept in place, magnitude
    shifted right by 8 - BITS_SHIFT), a multiply a value, and the NaN fix-up: a half whose
    magnitude byte is 0x7F gets bit 15 of t, and (t >> 15) x (0x8000 - (0x8000 >> NAN_SHIFT))
    sets that half's exponent and top mantissa bits, which ORed into ±480's bits make a NaN
    of the same sign. Integer
    work a pair: about eight logic/shift/add ops beside the two multiplies, against two
    conversions at a quarter of the integer rate (bfloat16 through float otherwise)."""
    mask = ((0x7F << BITS_SHIFT[dtype]) << 16) | (0x7F << BITS_SHIFT[dtype])
    bits = (z & 0x80008000) | (T.shift_right(z, 8 - BITS_SHIFT[dtype]) & mask)
    factor = T.cast(2.0 ** BITS_SCALE[dtype], dtype)
    lo = T.reinterpret(T.reinterpret(T.cast(bits & 0xFFFF, "uint16"), dtype) * factor, "uint16")
    hi = T.reinterpret(T.reinterpret(T.cast(T.shift_right(bits, 16), "uint16"), dtype) * factor, "uint16")
    t = ((z & 0x7F007F00) + 0x01000100) & 0x80008000
    nan_bits = 0x8000 - (0x8000 >> NAN_SHIFT[dtype])
    return (T.cast(lo, "uint32") | T.shift_left(T.cast(hi, "uint32"), 16)) | (T.shift_right(t, 15) * nan_bits)


@T.macro
def convert_bits(src_bytes, dst_pairs, block_N, words, first_word, k0, seqlen, masked, dtype):
    """dst (block_N, 2 words) = the e4m3 bytes of src words [first_word, first_word + words)
    of each row, in `dtype` (_bits_pair); rows at and past seqlen zero when `masked`."""
    wv = T.alloc_local((4,), "uint32")
    out = T.alloc_local((8,), "uint32")
    for i, c, _ in T.Parallel(block_N, words // 4, 1):
        wv[0:4] = T.lds128(src_bytes[i, 4 * (first_word + 4 * c):4 * (first_word + 4 * c) + 16],
                           pred=(k0 + i < seqlen) if masked else None)
        for e in T.unroll(4):
            x = wv[e]
            out[2 * e] = _bits_pair(T.shift_left(x & 0xFF, 8) | T.shift_left(x & 0xFF00, 16), dtype)
            out[2 * e + 1] = _bits_pair(T.shift_right(x & 0xFF0000, 8) | (x & 0xFF000000), dtype)
        for e in T.unroll(8):
            dst_pairs[i, 8 * c + e] = out[e]


def _program_fp8(batch, heads, kv_rows, num_split, paged, table_width, dtype, sm_scale, block_N, num_stages,
                 convert="cvt"):
    """The program over an FP8 cache: each key block is copied to shared memory in 8 bits
    (the pipelined global reads, half the bytes of a 16-bit cache) and converted there to
    q's dtype, exactly (every e4m3 value is a float16 and a bfloat16), rows past the end
    zeroed on the way; the gemms and the softmax are the 16-bit program's. kv_scale is
    applied outside the gemms: q·(s K) = s (q·K) folds into the softmax scale, and
    P·(s V) = s (P·V) into the split's output."""
    accum = "float32"
    width = DIM + PE_DIM
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(width)) * LOG2E
    block_H = block_heads(heads)
    threads = 256 if block_H == 64 else 128
    head_blocks = -(-heads // block_H)
    kv_shape = (kv_rows, PAGE, width) if paged else (batch, kv_rows, width)
    max_len = table_width * PAGE if paged else kv_rows
    fence = convert == "bits" and block_H == 64 and async_proxy_target()

    @T.prim_func
    def mla_decode_fp8(Q: T.Tensor((batch, heads, width), dtype), KV: T.Tensor(kv_shape, FP8),
                       block_table: T.Tensor((batch, max(table_width, 1)), T.int32),
                       seqlens: T.Tensor((batch,), T.int32), kv_scale: T.float32,
                       Output: T.Tensor((batch, heads, DIM), dtype), Lse: T.Tensor((batch, heads), accum)):
        O_part = T.alloc_global((batch, heads, num_split, DIM), accum)
        L_part = T.alloc_global((batch, heads, num_split), accum)
        with T.Kernel(head_blocks, num_split, batch, threads=threads) as (hb, bs, bz):
            Q_shared = T.alloc_shared((block_H, DIM), dtype)
            Q_pe_shared = T.alloc_shared((block_H, PE_DIM), dtype)
            KV8_shared = T.alloc_shared((block_N, width), FP8)
            KV_shared = T.alloc_shared((block_N, DIM), dtype)
            K_pe_shared = T.alloc_shared((block_N, PE_DIM), dtype)
            if convert == "bits":
                KV_pairs = T.view(KV_shared, shape=[block_N, DIM // 2], dtype="uint32")
                K_pe_pairs = T.view(K_pe_shared, shape=[block_N, PE_DIM // 2], dtype="uint32")
            acc_s = T.alloc_fragment((block_H, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_H, block_N), dtype)
            acc_o = T.alloc_fragment((block_H, DIM), accum)
            scores_max = T.alloc_fragment((block_H,), accum)
            scores_max_prev = T.alloc_fragment((block_H,), accum)
            scores_scale = T.alloc_fragment((block_H,), accum)
            scores_sum = T.alloc_fragment((block_H,), accum)
            logsum = T.alloc_fragment((block_H,), accum)
            score_scale = T.alloc_var(accum)
            score_scale = kv_scale * scale
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
                # One copy of the block's whole 576-byte rows: one cp.async group a stage,
                # so one wait and one barrier before the conversion.
                if paged:
                    page = block_table[bz, k0 // PAGE]
                    if block_N == PAGE:
                        T.copy(KV[page, 0:PAGE, 0:width], KV8_shared)
                    else:
                        T.copy(KV[page, k0 % PAGE:k0 % PAGE + block_N, 0:width], KV8_shared)
                else:
                    T.copy(KV[bz, k0:k0 + block_N, 0:width], KV8_shared)
                if convert == "bits":
                    if k0 + block_N > seqlen:  # rows past the end may hold anything, NaN included
                        convert_bits(KV8_shared, KV_pairs, block_N, DIM // 4, 0, k0, seqlen, True, dtype)
                        convert_bits(KV8_shared, K_pe_pairs, block_N, PE_DIM // 4, DIM // 4, k0, seqlen, True, dtype)
                    else:
                        convert_bits(KV8_shared, KV_pairs, block_N, DIM // 4, 0, k0, seqlen, False, dtype)
                        convert_bits(KV8_shared, K_pe_pairs, block_N, PE_DIM // 4, DIM // 4, k0, seqlen, False, dtype)
                    if fence:
                        # wgmma reads the 16-bit block through the async proxy; stores made
                        # through a view are not fenced by the engine, so this does.
                        T.fence_proxy_async()
                else:
                    if k0 + block_N > seqlen:  # rows past the end may hold anything, NaN included
                        for i, j in T.Parallel(block_N, DIM):
                            KV_shared[i, j] = T.if_then_else(k0 + i < seqlen, KV8_shared[i, j], 0)
                    else:
                        T.copy(KV8_shared[:, 0:DIM], KV_shared)
                    T.copy(KV8_shared[:, DIM:width], K_pe_shared)
                attend_block(Q_shared, Q_pe_shared, KV_shared, K_pe_shared, acc_s, acc_s_cast, acc_o, scores_max,
                             scores_max_prev, scores_scale, scores_sum, logsum, score_scale, k0, seqlen, block_H,
                             block_N)
            store_split(O_part, L_part, acc_o, logsum, scores_max, scores_scale, score_scale, kv_scale, heads, hb, bs,
                        bz, block_H)

        combine(O_part, L_part, Output, Lse, batch, heads, num_split)

    return mla_decode_fp8


@T.macro
def attend_block(Q_shared, Q_pe_shared, KV_shared, K_pe_shared, acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev,
                 scores_scale, scores_sum, logsum, scale, k0, seqlen, block_H, block_N):
    """One key block of both programs, its latent and rotary parts in shared memory as q's
    dtype: the scores q·Kᵀ, the columns at and past seqlen at -inf, the online softmax
    (scale: the scores' factor, log2 e included), and P·V into acc_o."""
    T.gemm(Q_shared, KV_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
    T.gemm(Q_pe_shared, K_pe_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
    for i, j in T.Parallel(block_H, block_N):
        acc_s[i, j] = T.if_then_else(k0 + j < seqlen, acc_s[i, j], -T.infinity("float32"))
    online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum, logsum, scale,
                   block_H, block_N, DIM)
    T.gemm(acc_s_cast, KV_shared, acc_o, policy=T.GemmWarpPolicy.FullCol)


@T.macro
def store_split(O_part, L_part, acc_o, logsum, scores_max, row_scale, scale, kv_scale, heads, hb, bs, bz, block_H):
    """A split's normalised output and log-sum-exp, for the combine; kv_scale (an FP8
    cache's, None for a 16-bit one) multiplies the output. An empty split leaves 0 and a
    log-sum-exp of -inf (weight 0 in the combine). row_scale: a (block_H,) fragment it
    overwrites with each row's factor (one reciprocal a row, not a division an element)."""
    for i in T.Parallel(block_H):
        if kv_scale is None:
            row_scale[i] = T.if_then_else(logsum[i] == 0, 0, 1 / logsum[i])
        else:
            row_scale[i] = T.if_then_else(logsum[i] == 0, 0, kv_scale / logsum[i])
    for i, j in T.Parallel(block_H, DIM):
        if hb * block_H + i < heads:
            O_part[bz, hb * block_H + i, bs, j] = acc_o[i, j] * row_scale[i]
    for i in T.Parallel(block_H):
        if hb * block_H + i < heads:
            L_part[bz, hb * block_H + i, bs] = T.if_then_else(
                logsum[i] == 0, -T.infinity("float32"), T.log2(logsum[i]) + scores_max[i] * scale)


@T.macro
def combine(O_part, L_part, Output, Lse, batch, heads, num_split):
    """Both programs' second kernel: one warp per (head, sequence, 128 output columns), many
    small blocks, each split's weight computed once, the loops over the splits unrolled so
    that their loads are in flight together. A sequence of length 0 has every split at
    -inf: output 0, log-sum-exp -inf."""
    accum = "float32"
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


mla_decode_kernel = tegula.jit(out_idx=[4, 5], pass_configs=FAST_MATH)(mla_decode_program)


def default_num_split(batch, heads, max_len, sms=132):
    """Enough blocks for two waves of the machine (a few sequences of a tensor-parallel
    shard are memory-bound: every SM must stream), at least two key blocks a split."""
    blocks = batch * -(-heads // block_heads(heads))
    want = -(-2 * sms // blocks)
    return max(1, min(128, want, -(-max_len // (2 * PAGE))))


mla_decode_fp8_kernel = tegula.jit(out_idx=[5, 6], pass_configs=FAST_MATH)(mla_decode_program)


# Overrides of fp8_config's choices, for sweeps (benchmarks/bench_mla.py --fp8 --block-n ...):
# keys "block_N" (32 or 64), "num_stages", "num_split" ("auto", "balanced", "default" or an int),
# "convert" ("cvt" or "bits", see CONVERTS; fp8_convert).
FP8_TUNING = {}


def fp8_convert(dtype):
    """How the FP8 program converts the 8-bit block (FP8_TUNING's "convert", "cvt" by
    default: "bits" is exact too and cheaper in instructions, bfloat16's especially, but
    stores the block in 32-bit words; which is faster is the GPU's to say)."""
    return FP8_TUNING.get("convert", "cvt")


def fp8_smem_bytes(heads, block_N, num_stages):
    """Shared memory of an FP8 block: q, the 8-bit stages, the converted 16-bit block and
    the score exchange (the reduction buffers and the per-block reserve rounded up)."""
    block_H = block_heads(heads)
    width = DIM + PE_DIM
    return block_H * width * 2 + num_stages * block_N * width + block_N * width * 2 + block_H * block_N * 2 + 1536


def fp8_config(heads):
    """(block_N, num_stages, blocks a SM) of the FP8 program. A 16- or 32-head block is
    latency-bound with one block of four warps on a SM (each 64-key block is a chain of
    barrier-separated steps: the conversion, the two gemms, the softmax's cross-warp
    reductions), so it takes 32-key blocks, whose buffers let two blocks share a SM, as
    many 8-bit stages as still fit; a 64-head block is compute-bound and keeps 64-key
    blocks, two stages, one block a SM."""
    sm_bytes = 228 * 1024
    if block_heads(heads) <= 32:
        block_N = FP8_TUNING.get("block_N", 32)
        stages = FP8_TUNING.get("num_stages")
        if stages is None:
            stages = max([n for n in (2, 3, 4) if 2 * fp8_smem_bytes(heads, block_N, n) <= sm_bytes] or [2])
    else:
        block_N, stages = FP8_TUNING.get("block_N", 64), FP8_TUNING.get("num_stages", 2)
    per_sm = max(1, min(2, sm_bytes // fp8_smem_bytes(heads, block_N, stages)))
    return block_N, stages, per_sm


def fp8_stages(heads):
    """The FP8 program's pipeline stages (fp8_config)."""
    return fp8_config(heads)[1]


def balanced_num_split(batch, heads, max_len, sms=132, per_sm=1):
    """Splits that even out the waves: the smallest estimate of the busiest SM's key blocks
    (waves x blocks a split, plus a small charge a split for the combine), at least two
    64-key blocks a split. The 16-bit default aims at two waves, which leaves a third,
    part-filled one at 64 sequences of 16 heads (320 blocks on 132 SMs)."""
    blocks = batch * -(-heads // block_heads(heads))
    key_blocks = -(-max_len // PAGE)
    best = None
    for s in range(1, max(1, min(128, -(-key_blocks // 2))) + 1):
        waves = -(-blocks * s // (sms * per_sm))
        cost = waves * -(-key_blocks // s) + 0.05 * s
        if best is None or cost < best[0]:
            best = (cost, s)
    return best[1]


def fp8_num_split(batch, heads, max_len, sms=132):
    """Splits of the FP8 program: FP8_TUNING's "num_split" ("auto": balanced for 16 or 32
    heads, where the blocks are few and each SM's share of the stream counts; the 16-bit
    default above that)."""
    choice = FP8_TUNING.get("num_split", "auto")
    if isinstance(choice, int):
        return choice
    if choice == "default" or (choice == "auto" and block_heads(heads) > 32):
        return default_num_split(batch, heads, max_len, sms=sms)
    return balanced_num_split(batch, heads, max_len, sms=sms, per_sm=fp8_config(heads)[2])


@functools.lru_cache(maxsize=None)
def kernel_for(batch, heads, kv_rows, num_split, paged, table_width, dtype, sm_scale, kv_dtype=None, fp8=None):
    """fp8: (block_N, num_stages[, convert]) of an FP8 cache's program, fp8_config's and
    fp8_convert's by default."""
    if kv_dtype is not None:
        block_N, stages, *rest = fp8 or fp8_config(heads)[:2]
        convert = rest[0] if rest else fp8_convert(dtype)
        return mla_decode_fp8_kernel(batch, heads, kv_rows, num_split, paged=paged, table_width=table_width,
                                     dtype=dtype, sm_scale=sm_scale, block_N=block_N, num_stages=stages,
                                     kv_dtype=kv_dtype, convert=convert)
    return mla_decode_kernel(batch, heads, kv_rows, num_split, paged=paged, table_width=table_width, dtype=dtype,
                             sm_scale=sm_scale)


@functools.lru_cache(maxsize=64)
def _no_table(batch, device):
    """The block-table argument of the contiguous program, which never reads it."""
    return _calls.plan_constant(torch.zeros((batch, 1), dtype=torch.int32, device=device))


def check_mla_decode_args(op, q, kv_cache, cache_seqlens, block_table, sm_scale, num_split, kv_scale=None):
    """The arguments of mla_decode (its operator's fake checks them too); returns
    (B, H, capacity): capacity the tokens a sequence can hold, max_pages x 64 when paged,
    else S_max."""
    check_operand(op, "q", q, 3, "B, h_q, 576")
    B, H, W = q.shape
    if W != DIM + PE_DIM:
        raise ValueError(f"{op}: q must be (B, h_q, {DIM + PE_DIM}) (512 latent + 64 rope), got {describe(q)}")
    paged = block_table is not None
    check_tensor(op, "kv_cache", kv_cache, dtypes=(torch.float16, torch.bfloat16, torch.float8_e4m3fn))
    check_rank(op, "kv_cache", kv_cache, 3, "num_pages, 64, 576" if paged else "B, S_max, 576")
    if kv_cache.dtype not in (q.dtype, torch.float8_e4m3fn):
        raise ValueError(f"{op}: kv_cache must have q's dtype {dtype_name(q.dtype)} or be float8_e4m3fn, "
                         f"got {describe(kv_cache)}")
    check_kv_scale(op, kv_scale, kv_cache.dtype == torch.float8_e4m3fn)
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
               check_indices=None, kv_scale=None):
    """One decode step of multi-head latent attention.

    q (B, h_q, 576) float16 or bfloat16; kv_cache in q's dtype or float8_e4m3fn, either
    contiguous (B, S_max, 576) or, with `block_table` (B, max_pages) int32, pages
    (num_pages, 64, 576); cache_seqlens int32 (B,). An FP8 cache stands for kv_scale x its
    values (kv_scale a positive finite Python number, None meaning 1.0; one scale for the
    whole cache, latent and rope parts alike): the kernel reads it in 8 bits and converts
    it to q's dtype exactly, so the result is the 16-bit kernel's over the dequantized
    cache, to its rounding. kv_scale with a 16-bit cache is an error (a scale the call
    would not apply). Keys at and past len_b are ignored whatever the cache holds
    there (lengths past the cache count as its end; a length of 0 gives zeros and a
    log-sum-exp of -inf). A block-table entry outside [0, num_pages) reads zeros.
    check_indices=True (or TEGULA_CHECK_INDICES=1) makes a length outside [0, capacity] or
    a page a sequence reads outside [0, num_pages) an error naming the entry (see
    kernels/_index_checks.py). sm_scale defaults to 1/sqrt(576). Returns out (B, h_q, 512) in q's
    dtype and, with return_lse, the natural log-sum-exp of the scaled scores (B, h_q)
    float32.
    """
    op = "mla_decode"
    B, H, max_len = check_mla_decode_args(op, q, kv_cache, cache_seqlens, block_table, sm_scale, num_split, kv_scale)
    fp8 = kv_cache.dtype == torch.float8_e4m3fn
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
        num_split = (fp8_num_split if fp8 else default_num_split)(B, H, max_len, sms=sm_count(q.device))
    kernel = kernel_for(B, H, kv_cache.shape[0] if paged else kv_cache.shape[1], num_split, paged, table_width,
                        dtype_name(q.dtype), None if sm_scale is None else float(sm_scale), FP8 if fp8 else None,
                        (*fp8_config(H)[:2], fp8_convert(dtype_name(q.dtype))) if fp8 else None)
    table = launchable(block_table) if paged else _no_table(B, q.device)
    args = (launchable(q), launchable(kv_cache), table, launchable(cache_seqlens))
    out, lse = kernel(*args, 1.0 if kv_scale is None else float(kv_scale)) if fp8 else kernel(*args)
    return (out, lse) if return_lse else out
