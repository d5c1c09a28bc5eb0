"""FlashAttention forward, written the TileLang way:

    O = softmax(Q Kᵀ · scale [+ mask]) V        Q (B, Sq, H, D), K/V (B, Skv, Hkv, D)  ("bshd")
                                                or Q (B, H, Sq, D), K/V (B, Hkv, Skv, D)  ("bhsd")

One block owns `block_M` query rows of one head and streams the keys and values in
`block_N` tiles through shared memory. The scores of a tile (Q Kᵀ) and the output stay in
registers (mma accumulators); an online softmax keeps the running row max, the rescale
factor and the running denominator in fragments, so no Sq x Skv matrix ever exists.

Masks: a causal mask aligns the last query with the last key (query i sees keys
j <= i + Skv - Sq), as FlashAttention does when the lengths differ; a causal sliding
window of W lets a query see only the last W of those keys. Key blocks outside the mask are
skipped by the loop bounds, so causal attention costs half and a window costs O(S·W).
Query heads share KV heads in groups of H / Hkv (GQA).
"""
import functools
import math

import torch

import tegula
import tegula.language as T

from ._attention import check_flag, check_heads, check_like_q, check_operand, check_sm_scale, online_softmax
from ._common import check_devices, describe, dtype_name, launchable, wgmma_gpu
from .gemm import PATHS

LOG2E = 1.4426950408889634
LAYOUTS = ("bshd", "bhsd")


def flash_attention_program(batch, heads, kv_heads, seq_q, seq_kv, dim, is_causal=False, window=0,
                            layout="bshd", block_M=128, block_N=64, num_stages=2, threads=128,
                            dtype="float16", sm_scale=None, overlap=False):
    """overlap: FlashAttention-3's schedule of the loop (T.Pipelined's order and stage):
    the softmax of one key tile runs while the tensor cores compute P V of the tile before
    it (on sm_90a; elsewhere it means the same, one tile at a time)."""
    accum = "float32"
    scale = (sm_scale if sm_scale is not None else 1.0 / math.sqrt(dim)) * LOG2E
    group = heads // kv_heads
    offset = seq_kv - seq_q                    # query i is aligned with key i + offset
    masked = is_causal or window > 0 or seq_kv % block_N != 0
    bshd = layout == "bshd"
    q_shape = (batch, seq_q, heads, dim) if bshd else (batch, heads, seq_q, dim)
    kv_shape = (batch, seq_kv, kv_heads, dim) if bshd else (batch, kv_heads, seq_kv, dim)

    @T.prim_func
    def attention(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
                  Output: T.Tensor(q_shape, dtype), Lse: T.Tensor((batch, heads, seq_q), accum)):
        with T.Kernel(T.ceildiv(seq_q, block_M), heads, batch, threads=threads) as (bx, by, bz):
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            acc_s = T.alloc_fragment((block_M, block_N), accum)
            acc_s_cast = T.alloc_fragment((block_M, block_N), dtype)
            acc_o = T.alloc_fragment((block_M, dim), accum)
            scores_max = T.alloc_fragment((block_M,), accum)
            scores_max_prev = T.alloc_fragment((block_M,), accum)
            scores_scale = T.alloc_fragment((block_M,), accum)
            scores_sum = T.alloc_fragment((block_M,), accum)
            logsum = T.alloc_fragment((block_M,), accum)
            # Causal blocks near the end have the most keys: start them first.
            q0 = (T.ceildiv(seq_q, block_M) - 1 - bx if is_causal else bx) * block_M
            if bshd:
                T.copy(Q[bz, q0:q0 + block_M, by, :], Q_shared)
            else:
                T.copy(Q[bz, by, q0:q0 + block_M, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -1e30)
            # Keys [lo, hi) can be seen by some query of this block.
            hi = T.min(seq_kv, q0 + block_M + offset) if is_causal else seq_kv
            lo = T.max(0, q0 + offset - window + 1) if window > 0 else 0
            first = lo // block_N
            # The loop's statements: the two copies, Q Kᵀ, the mask (where one is needed)
            # and the softmax, the output's rescale, P V. With overlap, Q Kᵀ and the softmax
            # of tile k run in stage 0 and the rescale and P V in stage 1, one tile behind:
            # at one time, Q Kᵀ of k, the rescale and P V of k - 1, the softmax of k.
            schedule = {}
            if overlap:
                softmax = 7 + (1 if masked else 0)  # online_softmax's statements, and the mask's
                schedule = dict(order=[-1, -1, 0, 3, 1, 2], stage=[-1, -1, 0, 0, 1, 1],
                                group=[[0], [1], [2], list(range(3, 3 + softmax)), [3 + softmax], [4 + softmax]])
            for kb in T.Pipelined(T.ceildiv(hi, block_N) - first, num_stages=num_stages, **schedule):
                k0 = (first + kb) * block_N
                if bshd:
                    T.copy(K[bz, k0:k0 + block_N, by // group, :], K_shared)
                    T.copy(V[bz, k0:k0 + block_N, by // group, :], V_shared)
                else:
                    T.copy(K[bz, by // group, k0:k0 + block_N, :], K_shared)
                    T.copy(V[bz, by // group, k0:k0 + block_N, :], V_shared)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow,
                       clear_accum=True)
                # Only the blocks that cross the diagonal, the window's edge or the end of
                # the keys pay for the mask.
                edge = k0 + block_N > seq_kv
                if is_causal:
                    edge = edge | (k0 + block_N > q0 + 1 + offset)
                if window > 0:
                    edge = edge | (k0 <= q0 + block_M - 1 + offset - window)
                if masked and edge:
                    for i, j in T.Parallel(block_M, block_N):
                        visible = k0 + j < seq_kv
                        if is_causal:
                            visible = visible & (k0 + j <= q0 + i + offset)
                        if window > 0:
                            visible = visible & (k0 + j > q0 + i + offset - window)
                        acc_s[i, j] = T.if_then_else(visible, acc_s[i, j], -T.infinity(accum))
                online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum,
                               logsum, scale, block_M, block_N, dim, rescale_output=not overlap)
                if overlap:
                    for i, j in T.Parallel(block_M, dim):
                        acc_o[i, j] *= scores_scale[i]
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            # A row that saw no key (causal with Sq > Skv) gives 0 and a log-sum-exp of -inf;
            # a NaN denominator (a NaN query, a +inf score) stays NaN, as in torch. One
            # reciprocal a row, then products: a division an element would be dim of them.
            for i in T.Parallel(block_M):
                scores_scale[i] = T.if_then_else(logsum[i] == 0, 0, 1 / logsum[i])
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] *= scores_scale[i]
            for i in T.Parallel(block_M):
                logsum[i] = T.if_then_else(logsum[i] == 0, -T.infinity(accum),
                                           (T.log2(logsum[i]) + scores_max[i] * scale) / LOG2E)
            # Through shared memory (Q's tile, no longer read), so the stores are 16-byte rows.
            T.copy(acc_o, Q_shared)
            if bshd:
                T.copy(Q_shared, Output[bz, q0:q0 + block_M, by, :])
            else:
                T.copy(Q_shared, Output[bz, by, q0:q0 + block_M, :])
            T.copy(logsum, Lse[bz, by, q0:q0 + block_M])

    return attention


# Fast math: exp2 and the final division become single approximate instructions, well
# inside the error an fp16 output can show.
FAST_MATH = {tegula.PassConfigKey.TL_ENABLE_FAST_MATH: True}
flash_attention_kernel = tegula.jit(out_idx=[3, 4], pass_configs=FAST_MATH)(flash_attention_program)
# The same program held to the engine's "legacy" code path (gemm.PATHS), for comparing the two.
flash_attention_kernel_legacy = tegula.jit(out_idx=[3, 4], pass_configs={**FAST_MATH, **PATHS["legacy"]})(
    flash_attention_program)
_KERNELS = {"auto": flash_attention_kernel, "legacy": flash_attention_kernel_legacy}


def default_config(seq_q, dim, is_causal):
    """Tiles by head dimension, from sweeps on an H100 (benchmarks/tune_attention.py).
    mma.sync (sm_80): four warps of 32 query rows each read every K/V tile from shared
    memory once per 32 rows, which the tensor cores can keep up with; wider heads take
    fewer rows. wgmma (sm_90, warp specialised: a producer warpgroup feeds the tiles by
    bulk copies): two consumer warpgroups over 128-key tiles for D=128, causal or not
    (541 against 502 TFLOP/s non-causal, 477 against 426 causal, B2 H32 S4096), and of
    64 rows each for D=256 (566 against 329); D=64 keeps 64-row blocks, two per SM (334
    against 314). On sm_90 the loop runs FlashAttention-3's schedule (overlap): on an H200,
    1.01 / 1.05 / 1.09 / 1.03 / 1.07 / 1.06x cuDNN at B2 H32 S4096 D128 full / causal, D64
    causal, GQA 32:8 causal, B8 H16 S1024 D64, D256, against 0.89 / 1.00 / 1.08 / 0.98 /
    1.03 / 0.94x without it (benchmarks/bench_attention.py, its "no overlap" column)."""
    hopper = wgmma_gpu()
    if dim <= 64:
        return dict(block_M=64 if hopper else 128, block_N=128, threads=128, num_stages=2, overlap=hopper)
    if dim <= 128:
        if hopper:
            return dict(block_M=128, block_N=128, threads=256, num_stages=2, overlap=True)
        return dict(block_M=128, block_N=64, threads=128, num_stages=2)
    if hopper:
        return dict(block_M=128, block_N=64, threads=256, num_stages=2, overlap=True)
    return dict(block_M=64, block_N=64, threads=128, num_stages=2)


@functools.lru_cache(maxsize=None)
def kernel_for(batch, heads, kv_heads, seq_q, seq_kv, dim, is_causal, window, layout, dtype, sm_scale, path="auto",
               **config):
    """path: the engine's code path, "auto" or "legacy" (gemm.PATHS); flash_attention's
    **config reaches it too."""
    if path not in _KERNELS:
        raise ValueError(f"flash_attention: path must be one of {tuple(_KERNELS)}, got {path!r}")
    cfg = default_config(seq_q, dim, is_causal)
    cfg.update(config)
    return _KERNELS[path](batch, heads, kv_heads, seq_q, seq_kv, dim, is_causal=is_causal, window=window,
                          layout=layout, dtype=dtype, sm_scale=sm_scale, **cfg)


def check_qkv(op, q, k, v, layout):
    """The checks of q, k, v but their devices; returns (B, H, Hkv, Sq, Skv, D)."""
    if layout not in LAYOUTS:
        raise ValueError(f"{op}: layout must be one of {LAYOUTS}, got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_operand(op, name, t, 4, layout.upper())
    for name, t in (("k", k), ("v", v)):
        check_like_q(op, name, t, q)
    if layout == "bshd":
        (B, Sq, H, D), (Bk, Skv, Hkv, Dk) = q.shape, k.shape
    else:
        (B, H, Sq, D), (Bk, Hkv, Skv, Dk) = q.shape, k.shape
    if v.shape != k.shape:
        raise ValueError(f"{op}: v must have k's shape {tuple(k.shape)}, got {describe(v)}")
    if Bk != B or Dk != D:
        raise ValueError(f"{op}: k must match q in batch and head dimension ({B}, {D}), got {describe(k)}")
    check_heads(op, H, Hkv, D, "k, v", "k and v")
    return B, H, Hkv, Sq, Skv, D


def check_flash_attention_args(op, q, k, v, causal, window, layout, sm_scale):
    """The arguments of flash_attention (its operator's fake checks them too); returns
    (B, H, Hkv, Sq, Skv, D)."""
    B, H, Hkv, Sq, Skv, D = check_qkv(op, q, k, v, layout)
    check_flag(op, "causal", causal)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"{op}: window must be None or a positive int, got {window!r}")
        if not causal:
            raise ValueError(f"{op}: window={window} is a causal sliding window (each query sees "
                             "the last W keys up to its own position): pass causal=True with it")
    check_sm_scale(op, sm_scale)
    check_devices(op, ("q", q), ("k", k), ("v", v))
    return B, H, Hkv, Sq, Skv, D


def _visible_keys(Sq, Skv, causal, window, device):
    """How many keys each query sees, (Sq,) int64."""
    if not causal:
        return torch.full((Sq,), Skv, dtype=torch.int64, device=device)
    last = torch.arange(Sq, device=device) + (Skv - Sq)   # the last key query i sees
    first = (last - window + 1).clamp(min=0) if window else torch.zeros_like(last)
    return (last.clamp(max=Skv - 1) - first + 1).clamp(min=0)


def _without_kernel(q, B, H, Sq, Skv, D, causal, window):
    """torch's result where an extent is 0, so no kernel runs: empty when B, H, Sq or D is;
    with no key at all, 0 and a log-sum-exp of -inf. With D = 0 every score is an empty
    dot product, 0, so the log-sum-exp is log(number of keys seen)."""
    out = torch.zeros_like(q, memory_format=torch.contiguous_format)
    lse = torch.full((B, H, Sq), -math.inf, dtype=torch.float32, device=q.device)
    if D == 0 and lse.numel() > 0:
        seen = _visible_keys(Sq, Skv, causal, window, q.device).float()
        lse.copy_(torch.where(seen > 0, seen.log(), -math.inf).expand(B, H, Sq))
    return out, lse


def flash_attention(q, k, v, causal=False, window=None, layout="bshd", sm_scale=None, return_lse=False,
                    **config):
    """softmax(q kᵀ · sm_scale + mask) v without materialising the scores.

    q (B, Sq, H, D) and k, v (B, Skv, Hkv, D) for layout "bshd"; (B, H, S, D) for "bhsd".
    CUDA float16 or bfloat16; H a multiple of Hkv (grouped-query attention); D a multiple of
    16 up to 256. `causal` aligns the last query with the last key (query i sees keys
    j <= i + Skv - Sq); `window=W` (with causal=True) narrows that to the W most recent
    keys, j > i + Skv - Sq - W, at O(S·W) cost. sm_scale (> 0) defaults to 1/sqrt(D).
    Returns the output in q's layout and dtype, and with return_lse=True also the
    natural-log log-sum-exp of each query's scores, float32 (B, H, Sq) (-inf for a query
    that sees no key; its output is 0). Strided or misaligned views are copied first; an
    empty extent gives torch's result (no keys at all: zeros).

    NaN and inf follow torch's float32 softmax: a NaN in a query row makes that row's output
    NaN; a key with an inf makes NaN every row that sees it with a +inf score (an inf - inf
    in its softmax) and drops out of rows where its score is -inf. Keys a query cannot see
    never reach it (the math path of scaled_dot_product_attention adds its -inf mask to the
    scores instead, so a masked +inf score turns NaN there).
    """
    op = "flash_attention"
    check_flag(op, "return_lse", return_lse)
    B, H, Hkv, Sq, Skv, D = check_flash_attention_args(op, q, k, v, causal, window, layout, sm_scale)
    if B * H * Sq * D * Skv == 0:
        out, lse = _without_kernel(q, B, H, Sq, Skv, D, causal, int(window or 0))
    else:
        kernel = kernel_for(B, H, Hkv, Sq, Skv, D, causal, int(window or 0), layout, dtype_name(q.dtype),
                            None if sm_scale is None else float(sm_scale), **config)
        out, lse = kernel(launchable(q), launchable(k), launchable(v))
    return (out, lse) if return_lse else out
