"""Rotary position embedding (RoPE) of queries and keys, both in one launch, in place or
into new tensors.

Each pair (x_a, x_b) of a head's D values turns by the angle θ_i of its frequency i,

    out_a = x_a·cos θ_i - x_b·sin θ_i,    out_b = x_b·cos θ_i + x_a·sin θ_i,

in one of two pairings: half-split (Llama, GPT-NeoX, Hugging Face's `rotate_half`), where
x_a = x[i] and x_b = x[i + D/2]; or interleaved (GPT-J), where x_a = x[2i], x_b = x[2i + 1].
θ_i = p·inv_freq_i at position p, read from a cos/sin table or computed in the kernel.

A block takes `tokens` consecutive tokens of one sequence and every head of q and of k at
those tokens: the tokens' cos/sin rows go once into shared memory (float32), then each
tensor is read once (16-byte vectors: half-split loads the two halves of a head as two
fragments; interleaved loads whole rows and finds each partner in the same thread's
vector) and written once. Positions out of a table's range read cos = sin = 0: memory
outside the table is never touched, and those tokens' rows come out as zeros.

Without a table the kernel computes the angles: inv_freq_i = 1 / base^(2i/D) rounded as
`rope_inv_freq` rounds it, θ = float(p)·inv_freq_i in float32 (the product Hugging Face
forms), then sin and cos from a reduction to [-π/4, π/4] in float64 and Taylor series in
float32 (within 1e-7 of the exact values of that float32 angle, at any position).
"""
import functools
import math
from dataclasses import dataclass

import torch

import tegula
import tegula.language as T

from . import _index_checks as index_checks
from ._common import (BLOCK_BYTES, MULTI_ROW_THREADS, VECTOR_BYTES, check_devices, check_rank, check_tensor,
                      describe, dtype_name, elem_bytes, is_launchable, launchable, next_pow2)

LAYOUTS = ("bshd", "bhsd")
MAX_HEAD_DIM = 1024        # a block keeps tokens x D/2 float32 cos and sin in shared memory
MAX_TOKENS = 64            # tokens a block takes at most (small heads stack up to BLOCK_BYTES)
POSITION_DTYPES = {torch.int32: "int32", torch.int64: "int64"}

# Taylor coefficients of sin and cos on |r| <= π/4: the first terms left out, r^11/11! and
# r^12/12!, are below 2e-9 there, under half a float32 ulp of the results.
SIN_TERMS = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 5))   # r^3 .. r^9
COS_TERMS = tuple((-1) ** k / math.factorial(2 * k) for k in range(1, 6))       # r^2 .. r^10


@dataclass(frozen=True)
class RopePlan:
    tokens: int     # consecutive tokens of one sequence a block takes (a power of two)
    q_heads: int    # heads of q rotated per step (all of them unless a block cannot hold them)
    k_heads: int    # the same for k; 0 without k
    threads: int


def plan_rope(hq: int, hk: int, d: int, elem_bytes: int, seq_len: int) -> RopePlan:
    """The tiling for hq query and hk key heads of d values. Worked examples (bfloat16,
    8 elements a vector):

    hq=32, hk=8, d=128 (Llama 3 8B): a token is 10 KiB, so one token a block, 256 threads;
    q's 32 x 64 pairs are one 16-byte vector of each half a thread, k's 8 x 64 pairs take 64
    threads;
    hq=4, hk=1, d=64, S >= 16: 16 tokens a block (10 KiB), q's 16 x 4 x 32 pairs again one
    vector of each half a thread; with S=1 (decode), one token and 32 threads;
    hq=128, hk=128, d=256: a step holds at most two vectors of each half a thread (4096
    pairs), so each tensor is walked in 2 steps of 32 heads.
    """
    vector = VECTOR_BYTES // elem_bytes
    half = max(1, d // 2)
    token_bytes = max(1, (hq + hk) * d * elem_bytes)
    tokens = 1
    while tokens < MAX_TOKENS and tokens < seq_len and tokens * token_bytes < BLOCK_BYTES:
        tokens *= 2
    widest = tokens * max(hq, hk) * half
    threads = min(MULTI_ROW_THREADS, max(32, next_pow2(-(-widest // vector))))
    step_pairs = threads * 2 * vector

    def heads(h):
        return min(h, max(1, step_pairs // (tokens * half)))

    return RopePlan(tokens, heads(hq), heads(hk), threads)


def _tensor_shape(batch, seq, heads, d, layout):
    return (batch, seq, heads, d) if layout == "bshd" else (batch, heads, seq, d)


def _steps(heads, step):
    """The loop over head steps: unrolled away (the Python list [0]) when one step holds
    every head."""
    n = -(-heads // step)
    return [0] if n == 1 else T.serial(n)


def rope_program(hq, hk, d, dtype, interleaved=False, q_layout="bshd", k_layout="bshd",
                 cache_dtype="float32", cache_width=None, cache_layout="pw",
                 pos_dtype=None, pos_layout="bs", base=10000.0,
                 tokens=1, q_heads=None, k_heads=None, threads=256):
    """Q (B, S, hq, D) or (B, hq, S, D) (q_layout "bshd" or "bhsd"), K likewise with hk
    heads (k_layout) → QO, KO of their shapes. B and S are dynamic.

    cache_dtype None: no table, the angles are computed from the positions and `base`.
    Otherwise C and Sn are the cos and sin tables of cache_dtype, cache_width columns:
    cache_layout "pw" (P, W); "1pw" (1, P, W); "bpw" (B, P, W), one table per sequence.
    W = D/2 reads column i for frequency i; W = D (Hugging Face's form) reads column i
    (half-split: its halves are equal) or 2i (interleaved: its pairs are equal).
    pos_dtype None: the token at index s is at position s. Otherwise Pos of that int dtype
    holds the positions: pos_layout "s" (S,); "1s" (1, S); "bs" (B, S), one row per
    sequence. hk = 0 rotates Q alone: K and KO are then declared like Q and never touched
    (the entry point passes Q and QO there).

    The signature is (Q, K[, C, Sn][, Pos], QO, KO): the tables and positions are present
    only when used.
    """
    if d % 2 != 0 or d < 2:
        raise ValueError(f"rope_program: d must be even and at least 2, got {d}")
    half = d // 2
    B, S = T.dynamic("b"), T.dynamic("s")
    CB, P, PB = T.dynamic("cb"), T.dynamic("p"), T.dynamic("pb")
    q_heads = q_heads or hq
    k_heads = k_heads or hk or hq
    k_decl, k_layout = (hk, k_layout) if hk else (hq, q_layout)
    q_shape = _tensor_shape(B, S, hq, d, q_layout)
    k_shape = _tensor_shape(B, S, k_decl, d, k_layout)
    computed = cache_dtype is None
    width = cache_width or half
    column_step = 2 if (interleaved and width == d) else 1
    log2_base = math.log2(base)
    s3, s5, s7, s9 = SIN_TERMS
    c2, c4, c6, c8, c10 = COS_TERMS

    @T.macro
    def position(Pos, b, s):
        # A block's tokens past the end of the sequence read the last one's position (their
        # results are never stored): the row index of the table read must stay in bounds.
        return (s if pos_dtype is None else Pos[T.min(s, S - 1)] if pos_layout == "s"
                else Pos[b if pos_layout == "bs" else 0, T.min(s, S - 1)])

    @T.macro
    def table_at(Table, b, row, col):
        return T.cast(Table[row, col] if cache_layout == "pw" else Table[b if cache_layout == "bpw" else 0, row, col],
                      "float32")

    @T.macro
    def read_angles(c_s, s_s, C, Sn, Pos, b, s0):
        """c_s[t, i], s_s[t, i] = the table's cos, sin of frequency i at token s0 + t."""
        for t, i in T.Parallel(tokens, half):
            c_s[t, i] = table_at(C, b, position(Pos, b, s0 + t), i * column_step)
        for t, i in T.Parallel(tokens, half):
            s_s[t, i] = table_at(Sn, b, position(Pos, b, s0 + t), i * column_step)

    @T.macro
    def compute_angles(c_s, s_s, Pos, b, s0):
        """c_s[t, i], s_s[t, i] = cos, sin of θ_i at token s0 + t, computed. Each step
        keeps its result in a fragment, so the next reads it once rather than repeating
        its expression."""
        angle = T.alloc_fragment((tokens, half), "float32")
        quadrant = T.alloc_fragment((tokens, half), "float32")
        cos_r = T.alloc_fragment((tokens, half), "float32")
        sin_r = T.alloc_fragment((tokens, half), "float32")
        for t, i in T.Parallel(tokens, half):
            # Hugging Face's inv_freq = 1 / base^(arange(0, D, 2) / D), float32 steps; the
            # power correctly rounded to float32 (a float64 exp2).
            power = T.cast(T.exp2(T.cast(T.cast(2 * i, "float32") / float(d), "float64") * log2_base), "float32")
            angle[t, i] = T.cast(position(Pos, b, s0 + t), "float32") * (1.0 / power)
        for t, i in T.Parallel(tokens, half):
            # θ = j·π/2 + r with |r| <= π/4, in float64: exact enough for any float32 θ.
            theta = T.cast(angle[t, i], "float64")
            j = (theta * (2.0 / math.pi) + 0.5) // 1.0
            quadrant[t, i] = T.cast(j % 4.0, "float32")
            angle[t, i] = T.cast(theta - j * (math.pi / 2.0), "float32")
        for t, i in T.Parallel(tokens, half):
            r = angle[t, i]
            sin_r[t, i] = r + r * (r * r) * (s3 + (r * r) * (s5 + (r * r) * (s7 + (r * r) * s9)))
        for t, i in T.Parallel(tokens, half):
            r = angle[t, i]
            cos_r[t, i] = 1.0 + (r * r) * (c2 + (r * r) * (c4 + (r * r) * (c6 + (r * r) * (c8 + (r * r) * c10))))
        # Quadrant k: (cos θ, sin θ) = (cos r, sin r), (-sin r, cos r), (-cos r, -sin r), (sin r, -cos r).
        for t, i in T.Parallel(tokens, half):
            k = quadrant[t, i]
            c_s[t, i] = T.if_then_else(k < 0.5, cos_r[t, i], T.if_then_else(
                k < 1.5, -sin_r[t, i], T.if_then_else(k < 2.5, -cos_r[t, i], sin_r[t, i])))
        for t, i in T.Parallel(tokens, half):
            k = quadrant[t, i]
            s_s[t, i] = T.if_then_else(k < 0.5, sin_r[t, i], T.if_then_else(
                k < 1.5, cos_r[t, i], T.if_then_else(k < 2.5, -sin_r[t, i], -cos_r[t, i])))

    def f32(v):
        return T.cast(v, "float32")

    def turned_pair_element(x, partner, j, cos, sin):
        """Element j of an interleaved pair: x·cos - partner·sin at even j, x·cos + partner·sin at odd."""
        return T.cast(f32(x) * cos + T.if_then_else(j % 2 == 0, -1.0, 1.0) * f32(partner) * sin, dtype)

    @T.macro
    def rotate(X, XO, heads, step, layout, c_s, s_s, b, s0):
        """XO = X turned by the angles of c_s/s_s, `step` heads at a time."""
        if interleaved:
            if layout == "bshd":
                x = T.alloc_fragment((tokens, step, d), dtype)
                for g in _steps(heads, step):
                    T.copy(X[b, s0:s0 + tokens, g * step:g * step + step, 0:d], x)
                    # The partner of j is j + 1 - 2·(j % 2), in the same (even-aligned) vector.
                    for t, h, j in T.Parallel(tokens, step, d):
                        XO[b, s0 + t, g * step + h, j] = turned_pair_element(
                            x[t, h, j], x[t, h, j + 1 - 2 * (j % 2)], j, c_s[t, j // 2], s_s[t, j // 2])
            else:
                x = T.alloc_fragment((step, tokens, d), dtype)
                for g in _steps(heads, step):
                    T.copy(X[b, g * step:g * step + step, s0:s0 + tokens, 0:d], x)
                    for h, t, j in T.Parallel(step, tokens, d):
                        XO[b, g * step + h, s0 + t, j] = turned_pair_element(
                            x[h, t, j], x[h, t, j + 1 - 2 * (j % 2)], j, c_s[t, j // 2], s_s[t, j // 2])
        else:
            if layout == "bshd":
                x1 = T.alloc_fragment((tokens, step, half), dtype)
                x2 = T.alloc_fragment((tokens, step, half), dtype)
                for g in _steps(heads, step):
                    T.copy(X[b, s0:s0 + tokens, g * step:g * step + step, 0:half], x1)
                    T.copy(X[b, s0:s0 + tokens, g * step:g * step + step, half:d], x2)
                    for t, h, i in T.Parallel(tokens, step, half):
                        XO[b, s0 + t, g * step + h, i] = T.cast(
                            f32(x1[t, h, i]) * c_s[t, i] - f32(x2[t, h, i]) * s_s[t, i], dtype)
                    for t, h, i in T.Parallel(tokens, step, half):
                        XO[b, s0 + t, g * step + h, half + i] = T.cast(
                            f32(x2[t, h, i]) * c_s[t, i] + f32(x1[t, h, i]) * s_s[t, i], dtype)
            else:
                x1 = T.alloc_fragment((step, tokens, half), dtype)
                x2 = T.alloc_fragment((step, tokens, half), dtype)
                for g in _steps(heads, step):
                    T.copy(X[b, g * step:g * step + step, s0:s0 + tokens, 0:half], x1)
                    T.copy(X[b, g * step:g * step + step, s0:s0 + tokens, half:d], x2)
                    for h, t, i in T.Parallel(step, tokens, half):
                        XO[b, g * step + h, s0 + t, i] = T.cast(
                            f32(x1[h, t, i]) * c_s[t, i] - f32(x2[h, t, i]) * s_s[t, i], dtype)
                    for h, t, i in T.Parallel(step, tokens, half):
                        XO[b, g * step + h, s0 + t, half + i] = T.cast(
                            f32(x2[h, t, i]) * c_s[t, i] + f32(x1[h, t, i]) * s_s[t, i], dtype)

    @T.macro
    def body(Q, K, C, Sn, Pos, QO, KO):
        with T.Kernel(T.ceildiv(S, tokens), B, threads=threads) as (bs, b):
            s0 = bs * tokens
            c_s = T.alloc_shared((tokens, half), "float32")
            s_s = T.alloc_shared((tokens, half), "float32")
            if computed:
                compute_angles(c_s, s_s, Pos, b, s0)
            else:
                read_angles(c_s, s_s, C, Sn, Pos, b, s0)
            rotate(Q, QO, hq, q_heads, q_layout, c_s, s_s, b, s0)
            if hk:
                rotate(K, KO, hk, k_heads, k_layout, c_s, s_s, b, s0)

    cache_shape = (P, width) if cache_layout == "pw" else (CB, P, width)
    pos_shape = (S,) if pos_layout == "s" else (PB, S)
    if computed and pos_dtype is None:
        @T.prim_func
        def rope(Q: T.Tensor(q_shape, dtype), K: T.Tensor(k_shape, dtype),
                 QO: T.Tensor(q_shape, dtype), KO: T.Tensor(k_shape, dtype)):
            body(Q, K, None, None, None, QO, KO)
    elif computed:
        @T.prim_func
        def rope(Q: T.Tensor(q_shape, dtype), K: T.Tensor(k_shape, dtype), Pos: T.Tensor(pos_shape, pos_dtype),
                 QO: T.Tensor(q_shape, dtype), KO: T.Tensor(k_shape, dtype)):
            body(Q, K, None, None, Pos, QO, KO)
    elif pos_dtype is None:
        @T.prim_func
        def rope(Q: T.Tensor(q_shape, dtype), K: T.Tensor(k_shape, dtype),
                 C: T.Tensor(cache_shape, cache_dtype), Sn: T.Tensor(cache_shape, cache_dtype),
                 QO: T.Tensor(q_shape, dtype), KO: T.Tensor(k_shape, dtype)):
            body(Q, K, C, Sn, None, QO, KO)
    else:
        @T.prim_func
        def rope(Q: T.Tensor(q_shape, dtype), K: T.Tensor(k_shape, dtype),
                 C: T.Tensor(cache_shape, cache_dtype), Sn: T.Tensor(cache_shape, cache_dtype),
                 Pos: T.Tensor(pos_shape, pos_dtype),
                 QO: T.Tensor(q_shape, dtype), KO: T.Tensor(k_shape, dtype)):
            body(Q, K, C, Sn, Pos, QO, KO)
    return rope


# TileLang's form (returns QO, KO); the entry point passes its own outputs (or, in place,
# the inputs themselves) through the second one.
rope_kernel = tegula.jit(out_idx=[-2, -1])(rope_program)
_rope_into = tegula.jit(rope_program)


@functools.lru_cache(maxsize=None)
def kernel_for(hq: int, hk: int, d: int, dtype: torch.dtype, seq_len: int, interleaved: bool = False,
               q_layout: str = "bshd", k_layout: str = "bshd", cache_dtype: torch.dtype | None = torch.float32,
               cache_width: int | None = None, cache_layout: str = "pw", pos_dtype: torch.dtype | None = None,
               pos_layout: str = "bs", base: float = 10000.0, allocates_output: bool = False):
    """The jit kernel for hq query and hk key heads (hk = 0: q alone) of d values, planned
    for sequences of about seq_len tokens (it serves any length). Called as
    kernel(q, k[, cos, sin][, positions], q_out, k_out), or without the outputs and
    returning them with `allocates_output`; the tensors as `rope_program` declares them."""
    plan = plan_rope(hq, hk, d, elem_bytes(dtype), seq_len)
    jit = rope_kernel if allocates_output else _rope_into
    return jit(hq, hk, d, dtype_name(dtype), bool(interleaved), q_layout, k_layout,
               None if cache_dtype is None else dtype_name(cache_dtype), cache_width, cache_layout,
               None if pos_dtype is None else POSITION_DTYPES[pos_dtype], pos_layout,
               float(base), plan.tokens, plan.q_heads, plan.k_heads, plan.threads)


def rope_inv_freq(dim: int, base: float = 10000.0, device=None) -> torch.Tensor:
    """(dim/2,) float32: inv_freq_i = 1 / base^(2i/dim), exactly as `rope` computes it
    without a table. The steps of Hugging Face's
    `1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`: the exponent and the
    reciprocal in float32, the power correctly rounded to float32 (torch's float32 pow is an
    ulp off for a few exponents, so Hugging Face's own inv_freq may differ there in the last
    bit; `rope_cache(inv_freq=...)` takes it as it is)."""
    op = "rope_inv_freq"
    _check_dim(op, dim)
    _check_base(op, base)
    exponent = torch.arange(0, dim, 2, dtype=torch.float32) / float(dim)
    power = torch.exp2(exponent.double() * math.log2(base)).float()
    return (1.0 / power).to(device)


def rope_cache(max_positions: int, dim: int, base: float = 10000.0, inv_freq: torch.Tensor | None = None,
               scaling: float = 1.0, device="cuda", dtype: torch.dtype = torch.float32):
    """The (cos, sin) tables `rope` reads: (max_positions, dim/2) each, row p holding
    cos and sin of θ_i = p·inv_freq_i (the float32 product, as the kernel and Hugging Face
    form it), computed in float64 and rounded once to `dtype` (float32, or the activations'
    float16/bfloat16).

    inv_freq: (dim/2,) frequencies (float32 or float64, any device), e.g. Llama 3's scaled
    ones; default `rope_inv_freq(dim, base)`. scaling multiplies cos and sin (Hugging Face's
    attention_scaling of YaRN-style RoPE); linear position scaling is inv_freq / factor.
    """
    op = "rope_cache"
    if isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 0:
        raise ValueError(f"{op}: max_positions must be a non-negative int, got {max_positions!r}")
    _check_dim(op, dim)
    if isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or not math.isfinite(scaling):
        raise ValueError(f"{op}: scaling must be a finite number, got {scaling!r}")
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{op}: dtype must be float32, float16 or bfloat16, got {dtype}")
    if inv_freq is None:
        inv_freq = rope_inv_freq(dim, base)
    else:
        _check_base(op, base)
        if not isinstance(inv_freq, torch.Tensor) or inv_freq.dtype not in (torch.float32, torch.float64) \
                or tuple(inv_freq.shape) != (dim // 2,):
            raise ValueError(f"{op}: inv_freq must be a float32 or float64 tensor of shape ({dim // 2},), "
                             f"got {describe(inv_freq)}")
    inv = inv_freq.detach().to("cpu", torch.float32)
    theta = (torch.arange(max_positions, dtype=torch.float32)[:, None] * inv[None, :]).double()
    cos, sin = torch.cos(theta) * scaling, torch.sin(theta) * scaling
    return cos.to(device=device, dtype=dtype), sin.to(device=device, dtype=dtype)


def _check_dim(op, dim):
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2 or dim % 2 or dim > MAX_HEAD_DIM:
        raise ValueError(f"{op}: dim must be an even int from 2 to {MAX_HEAD_DIM}, got {dim!r}")


def _check_base(op, base):
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not 1.0 < base < math.inf:
        raise ValueError(f"{op}: base must be a finite number greater than 1, got {base!r}")


def _check_flag(op, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")


def _sizes(layout, t):
    """(B, S, H, D) of a 4-D q or k in `layout`."""
    if layout == "bshd":
        b, s, h, d = t.shape
    else:
        b, h, s, d = t.shape
    return b, s, h, d


def _physical(t, layout):
    """(tensor, layout, copied): what the kernel reads in place. t itself; or, for a
    transposed view of the other layout (Hugging Face's q.view(B, S, H, D).transpose(1, 2)
    given as "bhsd"), that contiguous tensor in its own layout; else a contiguous copy."""
    if is_launchable(t):
        return t, layout, False
    swapped = t.transpose(1, 2)
    if is_launchable(swapped):
        return swapped, "bhsd" if layout == "bshd" else "bshd", False
    return t.clone(memory_format=torch.contiguous_format), layout, True


def _check_tables(op, cos, sin, q, B, S, D, positions):
    """cos and sin: both or neither; float32 or q's dtype; (P, W) or (1 | B, P, W) with W
    D/2 or D. Returns the kernel's cache_layout ("pw", "1pw" or "bpw") and W."""
    if (cos is None) != (sin is None):
        raise ValueError(f"{op}: pass both cos and sin, or neither (the kernel then computes the angles "
                         f"from the positions and base)")
    if cos is None:
        return "pw", None
    check_tensor(op, "cos", cos, dtypes=(torch.float32, q.dtype))
    check_tensor(op, "sin", sin, like=cos, like_name="cos")
    if cos.dim() not in (2, 3):
        raise ValueError(f"{op}: cos must be 2-D (P, {D // 2} or {D}) or 3-D ({B} or 1, P, {D // 2} or {D}), "
                         f"got {describe(cos)}")
    if sin.shape != cos.shape:
        raise ValueError(f"{op}: sin must have cos's shape {tuple(cos.shape)}, got {describe(sin)}")
    width = cos.shape[-1]
    if width not in (D // 2, D) or (cos.dim() == 3 and cos.shape[0] not in (1, B)):
        raise ValueError(f"{op}: cos must be (P, {D // 2} or {D}) or ({B} or 1, P, {D // 2} or {D}) for head "
                         f"dimension {D} and batch {B}, got {describe(cos)}")
    if positions is None and cos.shape[-2] < S:
        raise ValueError(f"{op}: without positions token s reads row s of cos and sin, so they need at least "
                         f"{S} rows (the sequence length), got {describe(cos)}")
    if cos.dim() == 2:
        return "pw", width
    return ("bpw" if cos.shape[0] == B and B > 1 else "1pw"), width


def _check_positions(op, positions, B, S):
    """None, or an int32/int64 tensor (S,), (1, S) or (B, S). Returns the kernel's
    pos_layout ("s", "1s" or "bs")."""
    if positions is None:
        return "bs"
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{op}: positions must be None or a torch.Tensor, got {describe(positions)}")
    if positions.dtype not in POSITION_DTYPES or tuple(positions.shape) not in ((S,), (1, S), (B, S)):
        raise ValueError(f"{op}: positions must be an int32 or int64 tensor of shape ({S},), (1, {S}) or "
                         f"({B}, {S}), got {describe(positions)}")
    if positions.dim() == 1:
        return "s"
    return "bs" if positions.shape[0] == B and B > 1 else "1s"


def check_rope_args(op, q, k, cos, sin, positions, interleaved, inplace, layout, base):
    """The arguments of rope (its operators' fakes check them too). Returns
    (named, B, S, D, cache_layout, width, pos_layout): named, the (name, tensor) of q and
    k that are not None; the kernel's table and position layouts (`_check_tables`,
    `_check_positions`)."""
    if layout not in LAYOUTS:
        raise ValueError(f"{op}: layout must be one of {LAYOUTS}, got {layout!r}")
    _check_flag(op, "interleaved", interleaved)
    _check_flag(op, "inplace", inplace)
    if q is None and k is None:
        raise TypeError(f"{op}: q and k are both None; pass at least one tensor to rotate")
    named = [(name, t) for name, t in (("q", q), ("k", k)) if t is not None]
    first = named[0][1]
    dims = "B, S, H, D" if layout == "bshd" else "B, H, S, D"
    for name, t in named:
        check_tensor(op, name, t, like=None if t is first else first, like_name=named[0][0])
        check_rank(op, name, t, 4, dims)
    B, S, _, D = _sizes(layout, first)
    for name, t in named[1:]:
        b, s, _, d = _sizes(layout, t)
        if (b, s, d) != (B, S, D):
            raise ValueError(f"{op}: {name} must match {named[0][0]} in batch, sequence and head dimension "
                             f"({B}, {S}, {D}) ({dims}), got {describe(t)}")
    if D % 2 or D > MAX_HEAD_DIM:
        raise ValueError(f"{op}: the head dimension (last dimension of {', '.join(n for n, _ in named)}) must be "
                         f"even and at most {MAX_HEAD_DIM}, got {D}")
    cache_layout, width = _check_tables(op, cos, sin, first, B, S, D, positions)
    pos_layout = _check_positions(op, positions, B, S)
    _check_base(op, base)
    check_devices(op, *named, *[(n, t) for n, t in (("cos", cos), ("sin", sin), ("positions", positions))
                                if t is not None])
    return named, B, S, D, cache_layout, width, pos_layout


def rope(q, k, cos=None, sin=None, positions=None, *, interleaved: bool = False, inplace: bool = False,
         layout: str = "bshd", base: float = 10000.0, check_indices: bool | None = None):
    """Rotary position embedding of q and k in one launch: (q_out, k_out).

    q (B, S, Hq, D) and k (B, S, Hk, D) for layout "bshd" (a projection's output viewed as
    heads), (B, H, S, D) for "bhsd"; any head counts (GQA: Hq != Hk); either may be None
    (its result is None). CUDA float16, bfloat16 or float32, one dtype; D even, 2 to 1024.
    Pairs (x[i], x[i + D/2]) turn by θ_i (half-split: Llama, Hugging Face's rotate_half),
    or with interleaved=True pairs (x[2i], x[2i + 1]) (GPT-J). Math in float32, rounded
    once.

    cos, sin: the angles' tables, float32 or q's dtype, (P, W) shared by every sequence or
    (B, P, W) one per sequence ((1, P, W) is shared too; Hugging Face's per-token
    cos/sin (B, S, D) are such tables without positions). W = D/2 reads column i for
    frequency i (`rope_cache` builds these); W = D is Hugging Face's form, of which
    half-split reads the first half (its halves are equal) and interleaved the even
    columns (its pairs are equal). Without tables the kernel computes
    θ_i = p·inv_freq_i from the position p and `base` (see `rope_inv_freq`).

    positions: None (token s is at position s), or int32/int64 (S,), (1, S) or (B, S)
    (decode: each sequence at its own length). A position outside [0, P) of the table
    reads cos = sin = 0 (nothing outside the table is read): that token's q and k come
    out as zeros; check_indices=True (or TEGULA_CHECK_INDICES=1) makes it an error naming
    the position (kernels/_index_checks.py). Without tables any position is valid (angles
    are float32: positions are exact up to 2^24).

    inplace=True writes the results into q and k and returns them; otherwise new tensors
    with q's and k's shapes and strides. Strided or misaligned views are read through a
    contiguous copy (in place: written back into them); a "bhsd" view that is the
    transpose of a contiguous "bshd" tensor (or the other way round) is read in place.
    NaN and inf propagate as in torch's q·cos + rotate_half(q)·sin: a NaN makes its pair
    NaN; an inf times a zero cos or sin gives NaN. Empty extents return without a launch.
    """
    op = "rope"
    named, B, S, D, cache_layout, width, pos_layout = check_rope_args(op, q, k, cos, sin, positions, interleaved,
                                                                      inplace, layout, base)
    first = named[0][1]
    if cos is not None and positions is not None and index_checks.wanted(op, check_indices, positions):
        rows = cos.shape[-2]
        index_checks.check_range(op, "positions", positions, 0, rows, f"the {rows} rows of the cos and sin tables")
    live = [(name, t) for name, t in named if t.numel() > 0]
    if not live:  # nothing to rotate: torch's result is empty too
        return tuple(None if t is None else (t if inplace else t.clone()) for t in (q, k))

    heads = [_sizes(layout, t)[2] for _, t in live] + [0]
    phys = [_physical(t, layout) for _, t in live]
    inputs = [p for p, _, _ in phys]
    outs = inputs if inplace else [torch.empty_like(p) for p in inputs]
    kernel = kernel_for(heads[0], heads[1], D, first.dtype, min(next_pow2(S), MAX_TOKENS), interleaved,
                        phys[0][1], phys[-1][1],
                        None if cos is None else cos.dtype, width, cache_layout,
                        None if positions is None else positions.dtype, pos_layout, float(base))
    # q alone: the kernel's k slots, which it does not touch without k heads, get q's.
    pair = inputs if len(live) > 1 else inputs * 2
    results = outs if len(live) > 1 else outs * 2
    if cos is None:
        kernel(*pair, *([] if positions is None else [launchable(positions)]), *results)
    else:
        kernel(*pair, launchable(cos), launchable(sin), *([] if positions is None else [launchable(positions)]),
               *results)

    done = {}
    for (name, t), (p, lay, copied), o in zip(live, phys, outs):
        if inplace:
            if copied:
                t.copy_(o)
            done[name] = t
        else:
            done[name] = o if lay == layout else o.transpose(1, 2)
    # An empty q or k is not launched: itself in place, else a copy of it.
    return tuple(None if t is None else done[name] if name in done else (t if inplace else t.clone())
                 for name, t in (("q", q), ("k", k)))
