"""FlashAttention backward (the FlashAttention-2 algorithm), written the TileLang way:

    dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP − Δ) · scale      dK = dSᵀ Q      dQ = dS K

with P = exp(S · scale − lse) recomputed from the forward's log-sum-exp and
Δ = rowsum(dO ∘ O). One call runs three kernels of one program:

1. Preprocess, one block per `prep_M` query rows of a head: Δ in float32, the forward's lse
   times log2(e) (so that P is one exp2 of a fused multiply-add), and the float32 dQ
   accumulator cleared. Both row vectors live in workspaces padded to whole `block_M` query
   blocks; a padded row, and a row that saw no key (lse = -inf), gets lse = +inf there,
   so its P is exp2(-inf) = 0 with no mask: its gradients are 0, never NaN.
2. Main, one block per (`block_N` keys, KV head, batch): K and V are loaded once and
   dK, dV stay in registers while the block loops over every (query head of the KV
   head's group, query block) that can see its keys. Causal and windowed attention bound
   that loop like the forward does (only the query blocks the mask lets see the keys),
   and only the tiles that cross the diagonal, the window's edge or the end of the keys
   pay for the mask. The scores are computed transposed (Sᵀ = K Qᵀ, keys along the rows)
   so that Pᵀ and dSᵀ are the accumulators that feed dV and dK as register operands.
   Grouped-query heads are summed in registers this way: no dK/dV atomics, no reduction
   pass, each KV head written once.
3. Postprocess: dQ from the float32 accumulator, cast to q's dtype and layout.

dQ: a key block adds its block_M x D share of every query tile into the float32 workspace
with atomics (T.atomic_add, relaxed reductions that the L2 performs), as FlashAttention-2
does. The alternative, a separate pass per query block that recomputes P and dP, costs two
more of the five GEMMs per tile (+40 % tensor-core work) to save those reductions, which
are small beside a tile's arithmetic (D = 128, 64 x 128 tiles: 32 KiB of reductions
against 5 · 2 · 64 · 128 · 128 = 10.5 MFLOP) and overlap it (the consumer warpgroups issue
them while the producer already loads the next tile). That is an estimate, not a
measurement of both: benchmarks/bench_attention.py --part backward times this design.
Atomics make dQ's rounding order-dependent (bit-for-bit reproducibility is not promised;
dK and dV are deterministic).

Masks are the forward's (kernels/flash_attention.py): causal aligns the last query with
the last key (query i sees keys j <= i + Skv - Sq), a window W keeps only the last W of
those keys, GQA maps query head h to KV head h // (H / Hkv).
"""
import functools
import math

import torch

import tegula
import tegula.language as T

from ._attention import check_flag, check_heads, check_sm_scale
from ._common import check_grad_devices, describe, dtype_name, launchable, wgmma_gpu
from .flash_attention import FAST_MATH, LAYOUTS, LOG2E
from .gemm import PATHS

OP = "flash_attention_backward"


def flash_attention_bwd_program(batch, heads, kv_heads, seq_q, seq_kv, dim, is_causal=False, window=0,
                                layout="bshd", block_M=64, block_N=128, num_stages=2, threads=256,
                                dtype="float16", sm_scale=None, prep_M=64, post_M=64, dq_staged=False,
                                stagger=True, heads_first=None):
    """Q, O, dO (q's shape), K, V (k's shape), Lse (B, H, Sq) float32 -> dQ, dK, dV."""
    accum = "float32"
    sm_scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(dim)
    scale = sm_scale * LOG2E
    group = heads // kv_heads
    offset = seq_kv - seq_q                    # query i is aligned with key i + offset
    q_blocks = -(-seq_q // block_M)
    seq_pad = q_blocks * block_M               # the row workspaces hold whole query blocks
    prep_M = math.gcd(prep_M, block_M)         # divides seq_pad
    masked = is_causal or window > 0 or seq_kv % block_N != 0
    # heads_first: consecutive blocks of the main kernel take the same key block of
    # different heads. With a causal mask the first key blocks have the most query tiles:
    # this way they all start in the first wave (longest first), 1.01-1.11x SDPA flash
    # against 0.97-1.00x on an H100. Without a mask every key block has the same work, and
    # consecutive key blocks of one head sharing their Q and dO tiles in L2 wins instead
    # (281 against 207 TFLOP/s). None picks by the mask.
    if heads_first is None:
        heads_first = is_causal or window > 0
    # dQ = dS K is block_M x D: its rows split over the warps (warpgroups) when there are
    # 16 rows a warp, 64 a warpgroup; otherwise its columns do too.
    dq_policy = T.GemmWarpPolicy.FullRow if block_M % (16 * (threads // 32)) == 0 else T.GemmWarpPolicy.Square
    bshd = layout == "bshd"
    q_shape = (batch, seq_q, heads, dim) if bshd else (batch, heads, seq_q, dim)
    kv_shape = (batch, seq_kv, kv_heads, dim) if bshd else (batch, kv_heads, seq_kv, dim)

    def rows(X, b, h, r0, n):
        """X's rows r0..r0+n of head h, in either layout."""
        return X[b, r0:r0 + n, h, :] if bshd else X[b, h, r0:r0 + n, :]

    @T.prim_func
    def attention_bwd(Q: T.Tensor(q_shape, dtype), K: T.Tensor(kv_shape, dtype), V: T.Tensor(kv_shape, dtype),
                      O: T.Tensor(q_shape, dtype), dO: T.Tensor(q_shape, dtype),
                      Lse: T.Tensor((batch, heads, seq_q), accum), dLse: T.Tensor((batch, heads, seq_q), accum),
                      dQ: T.Tensor(q_shape, dtype),
                      dK: T.Tensor(kv_shape, dtype), dV: T.Tensor(kv_shape, dtype)):
        Lse2 = T.alloc_global((batch, heads, seq_pad), accum)      # lse · log2(e), +inf: no key
        Delta = T.alloc_global((batch, heads, seq_pad), accum)     # rowsum(dO ∘ O)
        dQ_acc = T.alloc_global((batch, heads, seq_pad, dim), accum)

        with T.Kernel(seq_pad // prep_M, heads, batch, threads=128) as (bx, by, bz):
            o = T.alloc_fragment((prep_M, dim), dtype)
            g = T.alloc_fragment((prep_M, dim), dtype)
            prod = T.alloc_fragment((prep_M, dim), accum)
            delta = T.alloc_fragment((prep_M,), accum)
            lse = T.alloc_fragment((prep_M,), accum)
            dlse = T.alloc_fragment((prep_M,), accum)
            m0 = bx * prep_M
            T.copy(rows(O, bz, by, m0, prep_M), o)
            T.copy(rows(dO, bz, by, m0, prep_M), g)
            for i, j in T.Parallel(prep_M, dim):
                prod[i, j] = T.cast(o[i, j], accum) * T.cast(g[i, j], accum)
            T.reduce_sum(prod, delta, dim=1)
            # A gradient reaching the log-sum-exp adds P ∘ dLse to dS = P ∘ (dP - delta):
            # it folds into delta.
            T.copy(dLse[bz, by, m0:m0 + prep_M], dlse)
            for i in T.Parallel(prep_M):
                delta[i] = delta[i] - dlse[i]
            T.copy(delta, Delta[bz, by, m0:m0 + prep_M])
            T.copy(Lse[bz, by, m0:m0 + prep_M], lse)
            for i in T.Parallel(prep_M):
                lse[i] = T.if_then_else((m0 + i < seq_q) & (lse[i] != -T.infinity(accum)), lse[i] * LOG2E,
                                        T.infinity(accum))
            T.copy(lse, Lse2[bz, by, m0:m0 + prep_M])
            T.clear(prod)
            T.copy(prod, dQ_acc[bz, by, m0:m0 + prep_M, :])

        with T.Kernel(kv_heads if heads_first else T.ceildiv(seq_kv, block_N),
                      T.ceildiv(seq_kv, block_N) if heads_first else kv_heads, batch,
                      threads=threads) as (bx, by, bz):
            kb = by if heads_first else bx      # the key block
            kh = bx if heads_first else by      # the KV head
            K_shared = T.alloc_shared((block_N, dim), dtype)
            V_shared = T.alloc_shared((block_N, dim), dtype)
            Q_shared = T.alloc_shared((block_M, dim), dtype)
            dO_shared = T.alloc_shared((block_M, dim), dtype)
            dS_shared = T.alloc_shared((block_N, block_M), dtype)
            # 2-D, so that the copy engine can fill them (one row each).
            lse_shared = T.alloc_shared((1, block_M), accum)
            delta_shared = T.alloc_shared((1, block_M), accum)
            s = T.alloc_fragment((block_N, block_M), accum)         # Sᵀ, then Pᵀ
            dp = T.alloc_fragment((block_N, block_M), accum)        # dPᵀ, then dSᵀ
            p_cast = T.alloc_fragment((block_N, block_M), dtype)
            ds_cast = T.alloc_fragment((block_N, block_M), dtype)
            dk = T.alloc_fragment((block_N, dim), accum)
            dv = T.alloc_fragment((block_N, dim), accum)
            dq = T.alloc_fragment((block_M, dim), accum)
            if dq_staged:
                dq_shared = T.alloc_shared((block_M, dim), accum)
            k0 = kb * block_N
            T.copy(rows(K, bz, kh, k0, block_N), K_shared)
            T.copy(rows(V, bz, kh, k0, block_N), V_shared)
            T.clear(dk)
            T.clear(dv)
            # Queries [lo, hi) can see some key of this block.
            lo = T.max(0, k0 - offset) if is_causal else 0
            hi = T.min(seq_q, k0 + block_N - 1 + window - offset) if window > 0 else seq_q
            first = lo // block_M
            steps = T.max(0, T.ceildiv(hi, block_M) - first)
            # A pipeline prologue may form the indices of iterations an empty loop never has.
            divisor = T.max(steps, 1)
            # Without a causal mask every key block walks the same query tiles: started
            # together at tile 0 they would all add into the same dQ rows at once. Each
            # starts at its own tile instead (`stagger`) and wraps around; with a causal
            # mask the ranges already start apart.
            shift = kb % divisor if stagger and not is_causal and window == 0 else 0
            for t in T.Pipelined(group * steps, num_stages=num_stages):
                h = kh * group + t // divisor
                m0 = (first + (t % divisor + shift) % divisor) * block_M
                T.copy(rows(Q, bz, h, m0, block_M), Q_shared)
                T.copy(Lse2[bz, h, m0:m0 + block_M], lse_shared)
                T.gemm(K_shared, Q_shared, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)
                for i, j in T.Parallel(block_N, block_M):
                    s[i, j] = T.exp2(s[i, j] * scale - lse_shared[0, j])
                edge = k0 + block_N > seq_kv
                if is_causal:
                    edge = edge | (k0 + block_N - 1 > m0 + offset)
                if window > 0:
                    edge = edge | (k0 <= m0 + block_M - 1 + offset - window)
                if masked and edge:
                    for i, j in T.Parallel(block_N, block_M):
                        visible = k0 + i < seq_kv
                        if is_causal:
                            visible = visible & (k0 + i <= m0 + j + offset)
                        if window > 0:
                            visible = visible & (k0 + i > m0 + j + offset - window)
                        s[i, j] = T.if_then_else(visible, s[i, j], 0)
                T.copy(rows(dO, bz, h, m0, block_M), dO_shared)
                T.copy(Delta[bz, h, m0:m0 + block_M], delta_shared)
                # dV first: Pᵀ's float16 copy is dead before dPᵀ's registers are live.
                T.copy(s, p_cast)
                T.gemm(p_cast, dO_shared, dv, policy=T.GemmWarpPolicy.FullRow)
                T.gemm(V_shared, dO_shared, dp, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)
                for i, j in T.Parallel(block_N, block_M):
                    dp[i, j] = s[i, j] * (dp[i, j] - delta_shared[0, j]) * sm_scale
                T.copy(dp, ds_cast)
                T.gemm(ds_cast, Q_shared, dk, policy=T.GemmWarpPolicy.FullRow)
                T.copy(ds_cast, dS_shared)
                T.gemm(dS_shared, K_shared, dq, transpose_A=True, policy=dq_policy, clear_accum=True)
                if dq_staged:
                    # Through shared memory, the adds leave as whole coalesced rows. Measured
                    # on an H100 at 0.76-0.80x of the register form (the extra shared
                    # round trip and barrier cost more than the coalescing saves while the
                    # engine issues scalar reductions either way): off by default, kept
                    # for the sweep.
                    T.copy(dq, dq_shared)
                    T.atomic_add(dQ_acc[bz, h, m0:m0 + block_M, :], dq_shared)
                else:
                    T.atomic_add(dQ_acc[bz, h, m0:m0 + block_M, :], dq)
            # Through shared memory (K's and V's tiles, no longer read): 16-byte rows.
            T.copy(dk, K_shared)
            T.copy(dv, V_shared)
            T.copy(K_shared, rows(dK, bz, kh, k0, block_N))
            T.copy(V_shared, rows(dV, bz, kh, k0, block_N))

        with T.Kernel(T.ceildiv(seq_q, post_M), heads, batch, threads=128) as (bx, by, bz):
            acc = T.alloc_fragment((post_M, dim), accum)
            out = T.alloc_fragment((post_M, dim), dtype)
            T.copy(dQ_acc[bz, by, bx * post_M:(bx + 1) * post_M, :], acc)
            T.copy(acc, out)
            T.copy(out, rows(dQ, bz, by, bx * post_M, post_M))

    return attention_bwd


flash_attention_bwd_kernel = tegula.jit(out_idx=[7, 8, 9], pass_configs=FAST_MATH)(flash_attention_bwd_program)
flash_attention_bwd_kernel_legacy = tegula.jit(out_idx=[7, 8, 9], pass_configs={**FAST_MATH, **PATHS["legacy"]})(
    flash_attention_bwd_program)
_KERNELS = {"auto": flash_attention_bwd_kernel, "legacy": flash_attention_bwd_kernel_legacy}


def default_config(dim, is_causal, wgmma=None):
    """Tiles by head dimension; wgmma: whether T.gemm runs on wgmma (default: whether this
    GPU is an sm_90 part). The choice weighs registers against dQ's atomics: a key block
    of block_N rows adds block_M x D floats per query tile, so wider key blocks halve the
    atomics per FLOP and the Q/dO reloads per key, but dK and dV (block_N x D float32)
    live in registers through the whole loop.

    wgmma (sm_90a, warp specialised: a producer warpgroup feeds Q, dO, lse and Δ by bulk
    copies): two consumer warpgroups over 128 keys, 64 key rows each. D = 128 takes
    64-query tiles: dK, dV 2 x 64 registers a thread, Sᵀ and dPᵀ 2 x 32, which ptxas fits
    in the 240 registers setmaxnreg gives (8 bytes of stack), with 145 KiB of shared
    memory, one block per SM (FlashAttention-3's tiles at D = 128). D = 64 takes 128-query
    tiles: half the dK/dV registers buy twice the query rows (40 bytes of stack);
    64-query tiles would leave dQ = dS K 64 x 64 for two warpgroups, 32 columns each,
    which wgmma cannot read from a 64-column swizzled K. Both are to be confirmed by
    benchmarks/bench_attention.py --part backward against `configs`. D > 128 holds dK
    and dV for 64 keys in one warpgroup (spills). mma.sync (sm_80): FlashAttention-2's
    tiles, 128 x 128 over eight warps at D <= 64, 64 x 128 at D = 128, 64 x 64 above."""
    hopper = wgmma_gpu() if wgmma is None else wgmma
    if dim <= 64:
        return dict(block_M=128, block_N=128, threads=256, num_stages=2)
    if dim <= 128:
        return dict(block_M=64, block_N=128, threads=256, num_stages=2)
    return dict(block_M=64, block_N=64, threads=128, num_stages=1)


# What benchmarks sweep (each a default_config override).
configs = [dict(block_M=bm, block_N=bn, threads=th, num_stages=st, stagger=stagger, heads_first=hf)
           for bm, bn, th, st in ((64, 128, 256, 2), (128, 128, 256, 2))
           for stagger, hf in ((True, None), (True, True), (True, False), (False, None))]


@functools.lru_cache(maxsize=None)
def kernel_for(batch, heads, kv_heads, seq_q, seq_kv, dim, is_causal, window, layout, dtype, sm_scale, path="auto",
               **config):
    """path: the engine's code path, "auto" or "legacy" (gemm.PATHS); **config overrides
    default_config's tiles."""
    if path not in _KERNELS:
        raise ValueError(f"{OP}: path must be one of {tuple(_KERNELS)}, got {path!r}")
    cfg = default_config(dim, is_causal)
    cfg.update(config)
    return _KERNELS[path](batch, heads, kv_heads, seq_q, seq_kv, dim, is_causal=is_causal, window=window,
                          layout=layout, dtype=dtype, sm_scale=sm_scale, **cfg)


def _check_half(name, t, like=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{OP}: {name} must be a torch.Tensor, got {describe(t)}")
    if like is None:
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"{OP}: {name} must be a float16/bfloat16 tensor, got {describe(t)}")
    elif t.dtype != like.dtype:
        raise ValueError(f"{OP}: {name} must have q's dtype {str(like.dtype).replace('torch.', '')}, "
                         f"got {describe(t)}")


def _check_args(do, q, k, v, out, lse, layout):
    """Returns (B, H, Hkv, Sq, Skv, D)."""
    if layout not in LAYOUTS:
        raise ValueError(f"{OP}: layout must be one of {LAYOUTS}, got {layout!r}")
    _check_half("q", q)
    for name, t in (("k", k), ("v", v), ("out", out), ("do", do)):
        _check_half(name, t, like=q)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("do", do)):
        if t.dim() != 4:
            raise ValueError(f"{OP}: {name} must be 4-D ({layout.upper()}), got {describe(t)}")
    if layout == "bshd":
        (B, Sq, H, D), (Bk, Skv, Hkv, Dk) = q.shape, k.shape
    else:
        (B, H, Sq, D), (Bk, Hkv, Skv, Dk) = q.shape, k.shape
    if Bk != B or Dk != D:
        raise ValueError(f"{OP}: k must match q in batch and head dimension ({B}, {D}), got {describe(k)}")
    if v.shape != k.shape:
        raise ValueError(f"{OP}: v must have k's shape {tuple(k.shape)}, got {describe(v)}")
    for name, t in (("out", out), ("do", do)):
        if t.shape != q.shape:
            raise ValueError(f"{OP}: {name} must have q's shape {tuple(q.shape)}, got {describe(t)}")
    if not isinstance(lse, torch.Tensor):
        raise TypeError(f"{OP}: lse must be a torch.Tensor, got {describe(lse)}")
    if lse.dtype != torch.float32 or tuple(lse.shape) != (B, H, Sq):
        raise ValueError(f"{OP}: lse must be a float32 tensor of shape {(B, H, Sq)} (the forward's "
                         f"return_lse), got {describe(lse)}")
    check_heads(OP, H, Hkv, D, "k, v", "k and v")
    return B, H, Hkv, Sq, Skv, D


def _check_devices(do, q, k, v, out, lse):
    check_grad_devices(OP, (("do", do), ("q", q), ("k", k), ("v", v), ("out", out), ("lse", lse)))


def check_flash_attention_backward_args(do, q, k, v, out, lse, causal, window, layout, sm_scale, dlse):
    """The arguments of flash_attention_backward (its operator's fake checks them too);
    returns (B, H, Hkv, Sq, Skv, D)."""
    B, H, Hkv, Sq, Skv, D = _check_args(do, q, k, v, out, lse, layout)
    check_flag(OP, "causal", causal)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"{OP}: window must be None or a positive int, got {window!r}")
        if not causal:
            raise ValueError(f"{OP}: window={window} is a causal sliding window: pass causal=True with it")
    check_sm_scale(OP, sm_scale)
    _check_devices(do, q, k, v, out, lse)
    if dlse is not None and (not isinstance(dlse, torch.Tensor) or dlse.dtype != torch.float32
                             or tuple(dlse.shape) != (B, H, Sq) or dlse.device != q.device):
        raise ValueError(f"{OP}: dlse must be None or a float32 tensor of shape {(B, H, Sq)} on {q.device}, "
                         f"got {describe(dlse)}")
    return B, H, Hkv, Sq, Skv, D


def flash_attention_backward(do, q, k, v, out, lse, causal=False, window=None, layout="bshd", sm_scale=None,
                             dlse=None, **config):
    """The gradients (dq, dk, dv) of flash_attention(q, k, v, causal, window, layout,
    sm_scale) given the upstream gradient `do` of its output `out` and its log-sum-exp
    `lse` (return_lse=True). q, k, v, out, do: CUDA float16/bfloat16 in `layout`, any
    strides (strided, misaligned or expanded views are copied first); lse float32
    (B, H, Sq). Returns contiguous tensors of q's, k's and v's shapes and dtype; dk and dv
    sum the query heads of each KV head's group. dlse (optional, lse's shape, float32) is
    the upstream gradient of the log-sum-exp, when a loss used it. A query that saw no key (lse = -inf)
    contributes nothing and gets dq = 0; keys no query sees get dk = dv = 0; empty extents
    give zeros. **config overrides the tiles (default_config), and path="legacy" holds
    the engine to its cp.async path."""
    B, H, Hkv, Sq, Skv, D = check_flash_attention_backward_args(do, q, k, v, out, lse, causal, window, layout,
                                                                sm_scale, dlse)
    if B * H * Sq * D * Skv == 0:
        zeros = (lambda t: torch.zeros(t.shape, dtype=t.dtype, device=t.device))
        return zeros(q), zeros(k), zeros(v)
    kernel = kernel_for(B, H, Hkv, Sq, Skv, D, causal, int(window or 0), layout, dtype_name(q.dtype),
                        None if sm_scale is None else float(sm_scale), **config)
    if dlse is None:
        dlse = torch.zeros((B, H, Sq), dtype=torch.float32, device=q.device)
    dq, dk, dv = kernel(launchable(q), launchable(k), launchable(v), launchable(out), launchable(do),
                        launchable(lse), launchable(dlse))
    return dq, dk, dv
