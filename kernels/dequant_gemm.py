"""Weight-only 4-bit GEMM (W4A16): y = x @ Wᵀ with W stored as 4-bit codes and group scales,
dequantized in registers on the way into the tensor cores:

    x (M, K) fp16/bf16,  qweight (N, K/2) uint8 / int8 / float4_e2m1fn_x2 (two codes a byte,
                         element 2i in the low nibble),
    scales (N, G), G = ceil(K / group_size)      ->   y (M, N) in x's dtype

Weight formats (`weight_format`):

    "int4"   signed int4 codes q in -8..7 (two's complement nibbles):   w = q * s
             with `zeros` (N, G) (AWQ/GPTQ-style asymmetric; codes read as uint4 0..15):
                                                                       w = (q - z) * s
             scales in x's dtype or float32; zeros integer zero points 0..15 in uint8,
             int32 or x's dtype. group_size 32, 64, 128 (any even divisor-friendly size
             works), or -1 for one scale a row (per-channel).
    "fp4"    e2m1 codes (torch.float4_e2m1fn_x2's packing, low nibble first): w = fp4 * s
             with scales either e8m0 exponents (torch.float8_e8m0fnu, or uint8 holding its
             bits; MXFP4, group 32) or float8_e4m3fn (NVFP4's block scales, group 16; its
             per-tensor second-level scale is the caller's, applied to y). fp4 does not take
             zeros.

`pack_int4`, `quantize_int4` and `quantize_fp4` (weight_packing.py) build them from a float weight.

Why two programs. A decode step (M <= 16 tokens) reads every weight byte once and does two
FLOPs a weight, so its time is the weight stream: 14336 x 4096 is 29 MiB packed against 117
MiB in bf16, the whole of the 4x. `decode_program` therefore makes the weight rows the
tensor-core M dimension, Yᵀ = W Xᵀ: a block owns `block_N` weight rows, streams their packed
bytes through a pipelined ring of shared tiles, and every thread dequantizes the bytes of
its own A-operand registers (the fragment layout of mma m16n8k16 / wgmma m64nNk16 with A in
registers), so no dequantized copy of W exists anywhere; the tokens, padded to 8 or 16, are
the n of the instruction and sit in shared memory. When N / block_N tiles leave SMs idle,
K is cut into slices (`decode_splits`), each block writing its fp32 partial product to a
workspace that a second kernel sums in slice order (deterministic, no atomics).

The decode loop is issue-bound, so its instruction count per weight is what it is tuned
by. A stage loads block_K = 256 columns (128 contiguous bytes of each of 128 rows) and runs
them as two chunk_K = 128 dequantize-and-mma passes. `k_slot` orders K so that the two
codes of a register are 16 bits apart in one packed word: one mask-and-XOR of the word
builds both 16-bit weights (`pair_bits`), stored into the register whole (the engine's
pack_casts stores two halves of one 32-bit value as that value), then a half2 subtract (the
zero point or the magic base) makes them exact integers. With int4 weights and whole
chunks in a scale group (`post_scale`) the group's scale multiplies a second fp32
accumulator after the mma, a few FMAs a chunk. That is about 1.4 instructions a weight
for the dequantization and 2.8 for the whole loop (sm_90a SASS, M = 1: 361 instructions a
thread for 128 weights), against 3.1 and 4.6 when each weight was built on its own. The
default pipeline (`DECODE_PIPELINE` "mma") loads with cp.async in every thread and
multiplies with mma.sync even on sm_90a: wgmma's warpgroup-wide issue and waits made the
assembler serialise this loop, while eight independent warps a block, 72 registers a
thread, interleave their dequantization with their mma freely. The floor is the read:
on an H200 with L2 clean, torch reads these 29 MiB once (a sum) in 16.4 us and the
decode kernel takes 19-20 us, while torch's bf16 GEMM of the same shape takes 34 us, so
no kernel reaches 3x torch at this size (see benchmarks/bench_w4a16.py, "read ms").

`prefill_program` (M > 16) is an ordinary tiled GEMM whose B tile is dequantized from its
packed shared tile into a second shared tile each k step, then T.gemm(X_tile, W_tileᵀ);
it too splits K when its output tiles are fewer than the SMs (`prefill_splits`). Its
dequantization sits between the tensor-core steps (no overlap), so by default
(`PREFILL_MODE` "dequant") a prefill call instead dequantizes W once into x's dtype
(`dequant_program`: 2.5 bytes a weight, memory-bound) and runs tegula.kernels.gemm's
matmul(x, Wᵀ), which reads the transposed temporary in place: at M = 512 the GEMM is
compute-bound and the extra pass costs what streaming 2.5 bytes a weight costs.

Rounding: W is rounded once to x's dtype (the scale multiply; not at all with
post_scale, where the scale multiplies fp32 partial sums), the products accumulate in
fp32 on tensor cores and y is rounded once to x's dtype; tests compare with torch computing
x @ Wᵀ in float32 from the exactly dequantized W. Weights must be representable in x's
dtype (an e8m0 scale of 2^20 overflows fp16 weights, not bf16 ones).
"""
import functools

import torch

import tegula
import tegula.language as T

from . import _calls
from ._common import check_devices, check_rank, check_tensor, describe, dtype_name, launchable, next_pow2, sm_count
from .dequant_codes import (code_bits, decode_half, group_column, k_column, k_slot, magic_value,  # noqa: F401
                            pair_bits, weight_value)
from .gemm import _default_sms, k_slices
from .weight_packing import (E4M3_DTYPE, E8M0_DTYPE, HALF_DTYPES, dequantize, pack_int4,  # noqa: F401
                             quantize_fp4, quantize_int4)

FORMATS = ("int4", "fp4")
DECODE_MAX_M = 16            # the largest M w4a16_gemm sends to the decode program by default
DECODE_PROGRAM_MAX_M = 64    # the largest the decode program takes (path="decode")
SLICE_SCALE_BYTES = 24576   # shared memory a decode block may give its slice's scales and zeros
DTYPE_BYTES = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "uint8": 1, "float8_e8m0fnu": 1,
               "float8_e4m3fn": 1}
PACKED = "uint8"         # how the kernels take qweight: bytes of two codes
# qweight may come as any byte type of two codes (torch's fp4 pairs included): read as uint8.
QWEIGHT_DTYPES = tuple(d for d in (torch.uint8, torch.int8, getattr(torch, "float4_e2m1fn_x2", None)) if d is not None)


def scale_kind(scales: torch.Tensor, weight_format: str, dtype: torch.dtype) -> str:
    """The kernel's name for how scales are stored: "dtype" (x's dtype), "float32",
    "e8m0" or "e4m3"."""
    if weight_format == "int4":
        return "float32" if scales.dtype == torch.float32 else "dtype"
    if scales.dtype == torch.float8_e4m3fn:
        return "e4m3"
    return "e8m0"


SCALE_TENSOR_DTYPE = {"float32": "float32", "e8m0": "float8_e8m0fnu", "e4m3": "float8_e4m3fn"}


def _param_dtypes(dtype, kind, zero_dtype):
    return SCALE_TENSOR_DTYPE.get(kind, dtype), zero_dtype or "uint8"


def _slice_scales(K, group_size, per_slice, block_N, block_K, weight_format, dtype, s_dtype, z_dtype):
    """(groups, dtype, fits) of a decode block's slice scales. The scales (and zeros) of a
    block's whole K slice are copied to shared memory once, before the loop, when they fit
    SLICE_SCALE_BYTES: none of the loop's loads then waits on global memory outside the
    pipeline (otherwise every weight reads its scale from global memory, and an 8-bit one
    is converted each time: fp4 with group 32 ran 2.3x slower so). A slice of per_slice
    steps spans at most `groups` groups wherever it starts; fp4's fp8 scales are converted
    to x's dtype on the way in (decode_half multiplies in it). z_dtype: None without zeros."""
    G = -(-K // group_size)
    groups = min(G, per_slice * block_K // group_size + 2)
    blk_dtype = dtype if weight_format == "fp4" else s_dtype
    group_bytes = DTYPE_BYTES[blk_dtype] + (DTYPE_BYTES[z_dtype] if z_dtype else 0)
    return groups, blk_dtype, block_N * groups * group_bytes <= SLICE_SCALE_BYTES


def decode_program(M, N, K, group_size, splits=1, weight_format="int4", scale="dtype", zero_dtype=None,
                   block_N=64, block_K=512, num_stages=3, threads=128, dtype="float16", combine_N=256,
                   combine_threads=128, chunk_K=128, post_scale=None, mma_sync=False):
    """Y (M, N) = X (M, K) @ Wᵀ for M <= 64 (w4a16_gemm sends M <= 16 here), weight rows as
    the tensor-core M dimension and the tokens, padded to 8, 16 or a multiple of 16, as its
    n (see the module notes). Block (n tile, slice) runs the block_K steps of its K slice;
    with splits > 1 the fp32 partials go to a workspace (splits, M, N) summed by a second
    kernel in slice order. zero_dtype: the zeros' dtype name, None for no zeros (the Z
    parameter is then a 1-element placeholder). block_K: the columns a pipeline stage
    loads (block_N x block_K / 2 bytes), a multiple of chunk_K, the columns one dequantize
    and tensor-core pass takes (its W_f fragment is block_N x chunk_K; a multiple of 32:
    k_slot gives each lane whole 32-bit words); big stages keep many bytes in flight and
    read block_K / 2 contiguous bytes of each weight row; block_N: a multiple of 16 (the
    mma's M). post_scale: multiply by the scales after the tensor cores instead of before
    (int4 only, and only when a chunk lies in one scale group, group_size % chunk_K == 0;
    None: wherever it can): the chunk's integer weights q (exact in x's dtype) go through
    the mma into a second accumulator that is added to the first times the group's scale
    in fp32, a few FMAs a chunk instead of a 16-bit multiply every two weights, and W is
    never rounded (y is more accurate, not less). threads: 128, or 256 with mma_sync=True,
    which says the program will be compiled with MMA's pass configs (mma.sync, 16 rows a
    warp): on TMA with a producer warpgroup and two wgmma consumer warpgroups the program
    stopped an H200 with an illegal instruction (4096 x 14336, eight slices), so 256
    threads are refused otherwise."""
    if M > DECODE_PROGRAM_MAX_M:
        raise ValueError(f"decode_program: M must be at most {DECODE_PROGRAM_MAX_M}, got {M}")
    if threads != 128 and not (threads == 256 and mma_sync):
        raise ValueError(f"decode_program: threads must be 128, or 256 with mma_sync=True (compiled with MMA's "
                         f"pass configs), got threads={threads}, mma_sync={mma_sync}")
    if chunk_K % 32 or block_K % chunk_K or block_N % 16:
        raise ValueError(f"decode_program: chunk_K must be a multiple of 32, block_K a multiple of chunk_K and "
                         f"block_N of 16, got chunk_K={chunk_K}, block_K={block_K}, block_N={block_N}")
    tokens = max(8, next_pow2(M)) if M <= 16 else -(-M // 16) * 16
    G = -(-K // group_size)
    k_steps = -(-K // block_K)
    per_slice = -(-k_steps // splits) if splits >= 1 else 0
    if splits < 1 or (splits - 1) * per_slice >= k_steps:
        raise ValueError(f"decode_program: splits must leave every slice at least one of the {k_steps} "
                         f"block_K={block_K} steps of K={K}, got splits={splits}")
    has_zeros = zero_dtype is not None
    s_dtype, z_dtype = _param_dtypes(dtype, scale, zero_dtype)
    z_shape = (N, G) if has_zeros else (1,)
    half_k = block_K // 2
    slice_groups, blk_dtype, preload = _slice_scales(K, group_size, per_slice, block_N, block_K, weight_format,
                                                     dtype, s_dtype, z_dtype if has_zeros else None)
    can_post_scale = weight_format == "int4" and group_size % chunk_K == 0
    if post_scale and not can_post_scale:
        raise ValueError(f"decode_program: post_scale needs int4 weights and group_size a multiple of chunk_K, got "
                         f"{weight_format}, group_size={group_size}, chunk_K={chunk_K}")
    post_scale = can_post_scale if post_scale is None else bool(post_scale)

    @T.prim_func
    def w4a16_decode(X: T.Tensor((M, K), dtype), Q: T.Tensor((N, K // 2), PACKED), S: T.Tensor((N, G), s_dtype),
                     Z: T.Tensor(z_shape, z_dtype), Magic: T.uint32, Y: T.Tensor((M, N), dtype)):
        Partial = T.alloc_global((splits, M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), splits, threads=threads) as (bx, bz):
            Q_s = T.alloc_shared((block_N, half_k), "uint8")
            Q_words = T.view(Q_s, shape=[block_N, block_K // 8], dtype="uint32")
            X_in = T.alloc_shared((tokens, block_K), dtype)
            X_s = T.alloc_shared((tokens, block_K), dtype)
            W_f = T.alloc_fragment((block_N, chunk_K), dtype)
            acc = T.alloc_fragment((block_N, tokens), "float32")
            part = T.alloc_fragment((block_N, tokens) if post_scale else (1, 1), "float32")
            S_blk = T.alloc_shared((block_N, slice_groups) if preload else (1, 1), blk_dtype)
            Z_blk = T.alloc_shared((block_N, slice_groups) if preload and has_zeros else (1, 1), z_dtype)
            T.clear(acc)
            first = bz * per_slice
            g_first = (first * block_K) // group_size
            if preload:
                T.copy(S[bx * block_N, g_first], S_blk)
                if has_zeros:
                    T.copy(Z[bx * block_N, g_first], Z_blk)
            for k in T.Pipelined(T.min(per_slice, k_steps - first), num_stages=num_stages):
                k0 = (first + k) * block_K
                T.copy(Q[bx * block_N, k0 // 2], Q_s)
                T.copy(X[0, k0], X_in)
                # X into the tensor cores' k order chunk by chunk
                for t, jj in T.Parallel(tokens, block_K):
                    X_s[t, jj] = X_in[t, jj // chunk_K * chunk_K + k_column(jj % chunk_K, chunk_K)]
                for c in T.unroll(block_K // chunk_K):
                    # A register's two weights' bits from one 32-bit word (pair_bits): the
                    # two halves of that word, stored as it is
                    for i, j in T.Parallel(block_N, chunk_K):
                        w, p, e = k_slot(j, chunk_K)
                        word = Q_words[i, c * (chunk_K // 8) + w]
                        bits = T.shift_right(pair_bits(T.shift_right(word, 4 * p), weight_format, Magic, dtype), 16 * e)
                        W_f[i, j] = T.reinterpret(T.cast(bits, "uint16"), dtype)
                    for i, j in T.Parallel(block_N, chunk_K):
                        w, p, e = k_slot(j, chunk_K)
                        n = T.min(bx * block_N + i, N - 1)
                        col = c * chunk_K + group_column(8 * w + p + 4 * e, chunk_K, group_size)
                        g = T.min((k0 + col) // group_size, G - 1)
                        z = (Z_blk[i, g - g_first] if preload else Z[n, g]) if has_zeros else 0
                        if post_scale:
                            W_f[i, j] = weight_value(W_f[i, j], 1.0, z, weight_format, "unscaled", has_zeros, dtype)
                        elif preload:
                            W_f[i, j] = weight_value(W_f[i, j], S_blk[i, g - g_first], z, weight_format, scale,
                                                     has_zeros, dtype)
                        else:
                            W_f[i, j] = weight_value(W_f[i, j], S[n, g], z, weight_format, scale, has_zeros, dtype)
                    if post_scale:
                        T.gemm(W_f, X_s[:, c * chunk_K:(c + 1) * chunk_K], part, transpose_B=True, clear_accum=True)
                        for i, t in T.Parallel(block_N, tokens):
                            n = T.min(bx * block_N + i, N - 1)
                            g = T.min((k0 + c * chunk_K) // group_size, G - 1)
                            acc[i, t] += part[i, t] * T.cast(S_blk[i, g - g_first] if preload else S[n, g], "float32")
                    else:
                        T.gemm(W_f, X_s[:, c * chunk_K:(c + 1) * chunk_K], acc, transpose_B=True)
            for i, j in T.Parallel(block_N, tokens):
                if j < M and bx * block_N + i < N:
                    if splits == 1:
                        Y[j, bx * block_N + i] = T.cast(acc[i, j], dtype)
                    else:
                        Partial[bz, j, bx * block_N + i] = acc[i, j]

        if splits > 1:
            combine_slices(Partial, Y, M, N, splits, combine_N, combine_threads)

    return w4a16_decode


def prefill_program(M, N, K, group_size, weight_format="int4", scale="dtype", zero_dtype=None, block_M=128,
                    block_N=128, block_K=64, num_stages=3, threads=128, dtype="float16", panel_size=4, splits=1,
                    combine_N=256, combine_threads=128):
    """Y (M, N) = X (M, K) @ Wᵀ for any M: each k step the packed (block_N, block_K / 2)
    tile is dequantized into a (block_N, block_K) shared tile that T.gemm reads as Bᵀ.
    splits > 1 cuts K into slices as the decode program does (for outputs of too few
    tiles to fill the GPU), the fp32 partials summed in slice order by a second kernel."""
    G = -(-K // group_size)
    has_zeros = zero_dtype is not None
    s_dtype, z_dtype = _param_dtypes(dtype, scale, zero_dtype)
    z_shape = (N, G) if has_zeros else (1,)
    k_steps = -(-K // block_K)
    per_slice = -(-k_steps // splits) if splits >= 1 else 0
    if splits < 1 or (splits - 1) * per_slice >= k_steps:
        raise ValueError(f"prefill_program: splits must leave every slice at least one of the {k_steps} "
                         f"block_K={block_K} steps of K={K}, got splits={splits}")

    @T.prim_func
    def w4a16_prefill(X: T.Tensor((M, K), dtype), Q: T.Tensor((N, K // 2), PACKED), S: T.Tensor((N, G), s_dtype),
                      Z: T.Tensor(z_shape, z_dtype), Magic: T.uint32, Y: T.Tensor((M, N), dtype)):
        Partial = T.alloc_global((splits, M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            X_s = T.alloc_shared((block_M, block_K), dtype)
            Q_s = T.alloc_shared((block_N, block_K // 2), "uint8")
            W_s = T.alloc_shared((block_N, block_K), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            if splits == 1:
                T.use_swizzle(panel_size=panel_size)
            T.clear(acc)
            first = bz * per_slice
            for k in T.Pipelined(T.min(per_slice, k_steps - first), num_stages=num_stages):
                k0 = (first + k) * block_K
                T.copy(X[by * block_M, k0], X_s)
                T.copy(Q[bx * block_N, k0 // 2], Q_s)
                for i, j in T.Parallel(block_N, block_K):
                    n = T.min(bx * block_N + i, N - 1)
                    g = T.min((k0 + j) // group_size, G - 1)
                    bits = code_bits(T.shift_right(T.cast(Q_s[i, j // 2], "uint32"), (j % 2) * 4), weight_format, Magic,
                                     dtype)
                    W_s[i, j] = decode_half(bits, S[n, g], Z[n, g] if has_zeros else 0, weight_format, scale,
                                            has_zeros, dtype)
                T.gemm(X_s, W_s, acc, transpose_B=True)
            if splits == 1:
                T.copy(acc, Y[by * block_M, bx * block_N])
            else:
                T.copy(acc, Partial[bz, by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])

        if splits > 1:
            combine_slices(Partial, Y, M, N, splits, combine_N, combine_threads)

    return w4a16_prefill


def dequant_program(N, K, group_size, weight_format="int4", scale="dtype", zero_dtype=None, block_N=32, block_K=256,
                    threads=256, dtype="float16"):
    """W (N, K) in x's dtype from the packed weight, scales and zeros: the first half of
    the prefill fallback (PREFILL_MODE "dequant"), whose second half is
    tegula.kernels.gemm's matmul(x, Wᵀ). A block turns a (block_N, block_K) tile: its
    packed bytes are copied to shared memory (16-byte vectors), each thread decodes its
    fragment elements as the fused programs do (code_bits, decode_half) and the fragment
    is stored with vector stores; memory-bound, 2.5 bytes a weight."""
    G = -(-K // group_size)
    has_zeros = zero_dtype is not None
    s_dtype, z_dtype = _param_dtypes(dtype, scale, zero_dtype)
    z_shape = (N, G) if has_zeros else (1,)
    span = next(v for v in (16, 8, 4, 2) if group_size % v == 0 and block_K % v == 0)

    @T.prim_func
    def w4a16_dequant(Q: T.Tensor((N, K // 2), PACKED), S: T.Tensor((N, G), s_dtype), Z: T.Tensor(z_shape, z_dtype),
                      Magic: T.uint32, W: T.Tensor((N, K), dtype)):
        with T.Kernel(T.ceildiv(K, block_K), T.ceildiv(N, block_N), threads=threads) as (bx, by):
            Q_s = T.alloc_shared((block_N, block_K // 2), "uint8")
            W_f = T.alloc_fragment((block_N, block_K), dtype)
            T.copy(Q[by * block_N, bx * (block_K // 2)], Q_s)
            for i, j in T.Parallel(block_N, block_K):
                n = T.min(by * block_N + i, N - 1)
                # the same group for each aligned run of `span` columns (groups start at
                # multiples of group_size), so a thread's run shares one scale load
                g = T.min((bx * block_K + j // span * span) // group_size, G - 1)
                bits = code_bits(T.shift_right(T.cast(Q_s[i, j // 2], "uint32"), (j % 2) * 4), weight_format, Magic,
                                 dtype)
                W_f[i, j] = decode_half(bits, S[n, g], Z[n, g] if has_zeros else 0, weight_format, scale, has_zeros,
                                        dtype)
            T.copy(W_f, W[by * block_N, bx * block_K])

    return w4a16_dequant


@T.macro
def combine_slices(Partial, Y, M, N, splits, combine_N, combine_threads):
    """Y = the sum over slices of Partial (splits, M, N), in slice order: one block per
    (combine_N columns, row)."""
    with T.Kernel(T.ceildiv(N, combine_N), M, threads=combine_threads) as (bx, by):
        part = T.alloc_fragment((combine_N,), "float32")
        total = T.alloc_fragment((combine_N,), "float32")
        T.clear(total)
        for s in T.unroll(splits):
            T.copy(Partial[s, by, bx * combine_N:(bx + 1) * combine_N], part)
            for j in T.Parallel(combine_N):
                total[j] += part[j]
        T.copy(total, Y[by, bx * combine_N:(bx + 1) * combine_N])


decode_kernel = tegula.jit(out_idx=[-1])(decode_program)
prefill_kernel = tegula.jit(out_idx=[-1])(prefill_program)
# The decode program on the cp.async pipeline every thread of the block both loads and
# computes in (no TMA, no producer warpgroup): about 100 registers a thread instead of the
# warp-specialised kernel's 128-thread producer beside its consumers, so twice the blocks
# fit an SM. Which streams faster is the GPU's to say (benchmarks/bench_w4a16.py --sweep).
LEGACY = {tegula.PassConfigKey.TL_DISABLE_TMA_LOWER: True, tegula.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}
decode_kernel_legacy = tegula.jit(out_idx=[-1], pass_configs=LEGACY)(decode_program)
# The cp.async pipeline with mma.sync instead of wgmma on sm_90a (elsewhere the same as
# LEGACY): no warpgroup-wide issue and wait, so each warp's dequantize and mma interleave
# freely, in about 70 registers a thread.
MMA = dict(LEGACY, **{tegula.PassConfigKey.TL_DISABLE_WGMMA: True})
decode_kernel_mma = tegula.jit(out_idx=[-1], pass_configs=MMA)(decode_program)
dequant_kernel = tegula.jit(out_idx=[-1])(dequant_program)
PIPELINES = ("auto", "legacy", "mma")
DECODE_JITS = {"auto": decode_kernel, "legacy": decode_kernel_legacy, "mma": decode_kernel_mma}

# Each stage 128 contiguous bytes of each of 128 weight rows (16 KiB), four stages in
# flight; eight warps, each 16 rows of mma.sync. On an H200, L2 clean, bf16, int4 group 128
# (M = 1 / 16): 14336 x 4096 19.8 / 21.6 us against 19.2-19.4 / 24.4 for 64 rows and four
# warps; 4096 x 14336 (eight slices) 20.0 / 22.7 against 19.6 / 26.0; the cp.async and
# wgmma pipeline ("legacy") 22.2-26 us, TMA with a producer warpgroup ("auto") 22.8-27.
DECODE_CONFIG = dict(block_N=128, block_K=256, chunk_K=128, num_stages=4, threads=256)
DECODE_PIPELINE = "mma"     # or "auto", "legacy" (see DECODE_JITS); kernel_for's `pipeline` overrides it
# The tile where DECODE_CONFIG's slice scales do not fit shared memory (_slice_scales):
# small groups over an unsplit K (fp4 with group 32 at K = 4096 is 128 groups a row).
DECODE_CONFIG_NARROW = dict(block_N=64, threads=128)
PREFILL_CONFIG = dict(block_M=128, block_N=128, block_K=64, num_stages=3, threads=128)
# How M > DECODE_MAX_M runs: "dequant", W dequantized to x's dtype by dequant_program and
# multiplied by tegula.kernels.gemm's matmul (two kernels and a 2-byte-a-weight temporary,
# but the GEMM at its own speed), or "fused", prefill_program (one kernel; its per-step
# dequantization into shared memory sits between the tensor-core steps). config key
# `prefill_mode` overrides it.
PREFILL_MODE = "dequant"
PREFILL_MODES = ("dequant", "fused")
DEQUANT_CONFIG = dict(block_N=32, block_K=256, threads=256)
DECODE_MIN_STEPS = 4        # block_K steps a K slice keeps at least, so that its pipeline fills
# Output tiles covering this share of the SMs run unsplit: the second kernel that sums the
# slices costs more than the idle SMs (H200, 112 tiles of 128 rows on 132 SMs: one slice
# 19.8 us, two 23.3).
DECODE_UNSPLIT_SHARE = 0.75


def decode_splits(N, K, sms, block_N=DECODE_CONFIG["block_N"], block_K=DECODE_CONFIG["block_K"]):
    """K slices of the decode program: 1 when the N / block_N output tiles already cover
    DECODE_UNSPLIT_SHARE of the SMs, else the count bringing tiles x slices nearest to two
    blocks an SM, each slice at least DECODE_MIN_STEPS steps (k_slices). On 132 SMs with
    128-row, 256-wide steps: N=14336, K=4096: 112 tiles -> 1; N=4096, K=14336: 32 tiles,
    56 steps -> 8 slices of 7 (H200, M = 1: 20.0 us against 24.0 at four); N=4096,
    K=4096: 16 steps -> 4; N=64, K=256: 1 step -> 1."""
    tiles = -(-N // block_N)
    if tiles >= DECODE_UNSPLIT_SHARE * sms:
        return 1
    return k_slices(tiles, -(-K // block_K), 2 * sms, DECODE_MIN_STEPS)


def _decode_scales_fit(K, group_size, splits, cfg, weight_format, scale, zero_dtype, dtype):
    steps = -(-K // cfg["block_K"])
    s_dtype, z_dtype = _param_dtypes(dtype_name(dtype), scale, zero_dtype)
    return _slice_scales(K, group_size, -(-steps // splits), cfg["block_N"], cfg["block_K"], weight_format,
                         dtype_name(dtype), s_dtype, z_dtype if zero_dtype else None)[2]


def prefill_splits(M, N, K, sms, block_M=128, block_N=128, block_K=64):
    """K slices of the prefill program: 1 unless its output tiles would leave SMs idle, then
    the count bringing tiles x slices nearest to one block an SM (at least DECODE_MIN_STEPS
    steps a slice). On 132 SMs: M=64 (64-row tiles), N=4096: 32 tiles -> 4 slices; M=512,
    N=4096: 128 tiles -> 1."""
    return k_slices(-(-M // block_M) * -(-N // block_N), -(-K // block_K), sms, DECODE_MIN_STEPS)


@functools.lru_cache(maxsize=None)
def kernel_for(M, N, K, dtype: torch.dtype, group_size, weight_format="int4", scale="dtype", zero_dtype=None,
               sms=None, path=None, **config):
    """The jit kernel for this call: the decode program for M <= 16 (K slices by
    decode_splits on `sms` SMs, or config's `splits`), else the prefill program. path:
    "decode" / "prefill" forces one (the decode program takes M <= 64); config overrides
    the tile (DECODE_CONFIG / PREFILL_CONFIG keys, `splits` (prefill_splits' rule by
    default), and for decode `post_scale` and `pipeline`, "auto" or "legacy"). The
    prefill path's "dequant" mode does not come here (see _product)."""
    path = path or ("decode" if M <= DECODE_MAX_M else "prefill")
    common = dict(weight_format=weight_format, scale=scale, zero_dtype=zero_dtype, dtype=dtype_name(dtype))
    if path == "decode":
        cfg, splits, pipeline = decode_tile(M, N, K, dtype, group_size, weight_format, scale, zero_dtype, sms,
                                            **config)
        return DECODE_JITS[pipeline](M, N, K, group_size, splits, **common, **cfg, mma_sync=pipeline == "mma")
    if path != "prefill":
        raise ValueError(f"kernel_for: path must be 'decode' or 'prefill', got {path!r}")
    cfg = dict(prefill_config(M), **config)
    if cfg.get("splits") is None:
        cfg["splits"] = prefill_splits(M, N, K, _default_sms() if sms is None else sms, cfg["block_M"], cfg["block_N"],
                                       cfg["block_K"])
    return prefill_kernel(M, N, K, group_size, **common, **cfg)


def decode_tile(M, N, K, dtype: torch.dtype, group_size, weight_format="int4", scale="dtype", zero_dtype=None,
                sms=None, **config):
    """(tile, splits, pipeline) of the decode program for this call: DECODE_CONFIG with
    config's keys over it, decode_splits' slice count on `sms` SMs (or config's `splits`),
    DECODE_CONFIG_NARROW where the default tile's slice scales would not fit shared memory
    (unless config names block_N), and the stages decode_stages leaves room for."""
    cfg = dict(DECODE_CONFIG, **config)
    splits = cfg.pop("splits", None)
    pipeline = cfg.pop("pipeline", DECODE_PIPELINE)
    if pipeline not in PIPELINES:
        raise ValueError(f"kernel_for: pipeline must be one of {PIPELINES}, got {pipeline!r}")
    sms = _default_sms() if sms is None else sms
    if pipeline != "mma" and "threads" not in config:
        cfg.update(DECODE_CONFIG_NARROW)          # one warpgroup: decode_program's rule off mma.sync
    if splits is None:
        splits = decode_splits(N, K, sms, cfg["block_N"], cfg["block_K"])
        if "block_N" not in config and not _decode_scales_fit(K, group_size, splits, cfg, weight_format, scale,
                                                              zero_dtype, dtype):
            # the slice's scales of 128 rows past shared memory's share: 64 rows (one
            # warpgroup), whose scales fit (fp4 with group 32, H200: 37 against 86 us)
            cfg.update(DECODE_CONFIG_NARROW)
            splits = decode_splits(N, K, sms, cfg["block_N"], cfg["block_K"])
    if "num_stages" not in config:
        cfg["num_stages"] = decode_stages(M, cfg, dtype)
    return cfg, splits, pipeline


# The shared memory one decode block may take (sm_90a's 227 KiB, less room for the scale
# tiles and barriers).
DECODE_SMEM_BUDGET = 200 * 1024


def decode_stages(M, cfg, dtype):
    """cfg's pipeline depth, lowered until a stage of packed weights and of the token tile
    (tokens x block_K of x, which grows with a forced M up to 64) fits DECODE_SMEM_BUDGET
    beside the reordered token chunk."""
    tokens = max(8, next_pow2(M)) if M <= 16 else -(-M // 16) * 16
    esize = torch.empty((), dtype=dtype).element_size()
    stage = cfg["block_N"] * cfg["block_K"] // 2 + tokens * cfg["block_K"] * esize
    fixed = tokens * cfg["block_K"] * esize
    return max(2, min(cfg["num_stages"], (DECODE_SMEM_BUDGET - fixed) // stage))


def prefill_config(M):
    """PREFILL_CONFIG, with 64-row tiles for M <= 64 (wgmma's smallest M), which halve the
    wasted rows of a short M."""
    return dict(PREFILL_CONFIG, block_M=64) if M <= 64 else dict(PREFILL_CONFIG)


# ---- arguments ----

OP = "w4a16_gemm"


def _group(op, group_size, K):
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise TypeError(f"{op}: group_size must be an int, got {group_size!r}")
    if group_size == -1:
        return max(K, 1)
    if group_size <= 0 or group_size % 2:
        raise ValueError(f"{op}: group_size must be a positive even number of weights or -1 (one scale a "
                         f"row), got {group_size}")
    return group_size


def check_w4a16_gemm_args(x, qweight, scales, zeros=None, group_size=128, weight_format="int4", op=OP):
    """Every argument check of w4a16_gemm (its fake runs them too); returns
    (M, N, K, group, scale_kind)."""
    check_tensor(op, "x", x, dtypes=HALF_DTYPES)
    check_tensor(op, "qweight", qweight, dtypes=QWEIGHT_DTYPES)
    if not isinstance(weight_format, str) or weight_format not in FORMATS:
        raise ValueError(f"{op}: weight_format must be one of {FORMATS}, got {weight_format!r}")
    check_rank(op, "x", x, 2, "M, K")
    check_rank(op, "qweight", qweight, 2, "N, K / 2: two 4-bit codes a byte")
    M, K = x.shape
    N = qweight.shape[0]
    if K % 2 or qweight.shape[1] != K // 2:
        raise ValueError(f"{op}: qweight must have shape (N, {K // 2}) for x of K={K} (two codes a byte; K even), "
                         f"got {describe(qweight)}")
    group = _group(op, group_size, K)
    G = -(-K // group)
    if weight_format == "int4":
        scale_dtypes = (x.dtype, torch.float32)
    else:
        scale_dtypes = tuple(d for d in (E8M0_DTYPE, torch.uint8, E4M3_DTYPE) if d is not None)
    if not isinstance(scales, torch.Tensor):
        raise TypeError(f"{op}: scales must be a torch.Tensor, got {describe(scales)}")
    check_tensor(op, "scales", scales, dtypes=scale_dtypes)
    if tuple(scales.shape) != (N, G):
        raise ValueError(f"{op}: scales must have shape ({N}, {G}) (N, ceil(K / group_size)), got {describe(scales)}")
    named = [("x", x), ("qweight", qweight), ("scales", scales)]
    if zeros is not None:
        if weight_format != "int4":
            raise ValueError(f"{op}: zeros are for weight_format 'int4' (asymmetric uint4 codes); {weight_format!r} "
                             f"takes none, got {describe(zeros)}")
        check_tensor(op, "zeros", zeros, dtypes=(torch.uint8, torch.int32, x.dtype))
        if tuple(zeros.shape) != (N, G):
            raise ValueError(f"{op}: zeros must have shape ({N}, {G}) like scales, got {describe(zeros)}")
        named.append(("zeros", zeros))
    check_devices(op, *named)
    return M, N, K, group, scale_kind(scales, weight_format, x.dtype)


def w4a16_gemm_fake(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
                    group_size: int = 128, weight_format: str = "int4") -> torch.Tensor:
    """The output's shape and dtype from the arguments' (after every check)."""
    M, N, _, _, _ = check_w4a16_gemm_args(x, qweight, scales, zeros, group_size, weight_format)
    return x.new_empty((M, N))


@functools.lru_cache(maxsize=None)
def _placeholder(device):
    return _calls.plan_constant(torch.zeros(1, dtype=torch.uint8, device=device))


def launch_args(x, qweight, scales, zeros, kind, weight_format):
    """The arguments as the kernels take them: launchable tensors, qweight as uint8, e8m0
    scales as torch.float8_e8m0fnu, a placeholder for absent zeros, and `magic_value`."""
    q = launchable(qweight).view(torch.uint8)
    s = launchable(scales)
    if kind == "e8m0" and s.dtype == torch.uint8:
        s = s.view(E8M0_DTYPE)
    z = launchable(zeros) if zeros is not None else _placeholder(x.device)
    return launchable(x), q, s, z, magic_value(weight_format, zeros is not None, dtype_name(x.dtype))


def w4a16_gemm(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None = None,
               group_size: int = 128, weight_format: str = "int4", **config) -> torch.Tensor:
    """y (M, N) = x @ Wᵀ in x's dtype, W dequantized from qweight and scales (and zeros)
    as the module notes define. config: overrides for sweeping: `path=` "decode" /
    "prefill", `prefill_mode=` "dequant" / "fused" (PREFILL_MODE), `splits=`, the chosen
    program's block sizes, chunk_K, num_stages, threads, `pipeline=` (decode), and
    `dequant_block_N=` / `dequant_block_K=` / `dequant_threads=` (DEQUANT_CONFIG)."""
    M, N, K, group, kind = check_w4a16_gemm_args(x, qweight, scales, zeros, group_size, weight_format)
    return _product(x, qweight, scales, zeros, group, weight_format, kind, sm_count(x.device), **config)


# The entry point with its tile overrides, for sweeps: `w4a16_gemm` itself becomes the
# operator's caller (kernels/_ops.py), whose schema has no room for them.
w4a16_gemm_with_config = w4a16_gemm


def _product(x, qweight, scales, zeros, group, weight_format, kind, sms, **config):
    """w4a16_gemm past its checks, on a GPU of `sms` SMs."""
    M, K = x.shape
    N = qweight.shape[0]
    if M == 0 or N == 0 or K == 0:
        return torch.zeros((M, N), dtype=x.dtype, device=x.device)
    zero_dtype = None if zeros is None else str(zeros.dtype).replace("torch.", "")
    mode = config.pop("prefill_mode", None) or PREFILL_MODE
    if mode not in PREFILL_MODES:
        raise ValueError(f"w4a16_gemm: prefill_mode must be one of {PREFILL_MODES}, got {mode!r}")
    path = config.get("path") or ("decode" if M <= DECODE_MAX_M else "prefill")
    args = launch_args(x, qweight, scales, zeros, kind, weight_format)
    dequant = {k[len("dequant_"):]: config.pop(k) for k in list(config) if k.startswith("dequant_")}
    if path == "prefill" and mode == "dequant":
        kernel = dequant_kernel_for(N, K, x.dtype, group, weight_format, kind, zero_dtype, **dequant)
        w = kernel(*args[1:])
        return _gemm().matmul(args[0], w.t())
    kernel = kernel_for(M, N, K, x.dtype, group, weight_format, kind, zero_dtype, sms, **config)
    return kernel(*args)


def _gemm():
    from . import gemm
    return gemm


@functools.lru_cache(maxsize=None)
def dequant_kernel_for(N, K, dtype: torch.dtype, group_size, weight_format="int4", scale="dtype", zero_dtype=None,
                       **config):
    """The jit kernel of dequant_program (DEQUANT_CONFIG, config overriding it)."""
    return dequant_kernel(N, K, group_size, weight_format=weight_format, scale=scale, zero_dtype=zero_dtype,
                          dtype=dtype_name(dtype), **dict(DEQUANT_CONFIG, **config))
