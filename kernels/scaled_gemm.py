"""Scaled FP8 GEMM: the matrix product of 8-bit float operands with their dequantisation
scales, the one DeepSeek-V3-style inference and torch._scaled_mm run.

    out = (a * scale_a) @ (b * scale_b)ᵀ [+ bias]     a (M, K), b (N, K) float8, fp32 sums

a is the activation, b the weight as stored (N, K), K-major: the tensor cores read 8-bit
operands K-major only, so both go to shared memory as (rows, block_K) tiles and T.gemm runs
with transpose_B (wgmma m64nNk32 on sm_90a, mma.sync m16n8k32 on sm_89). This is the layout
torch._scaled_mm takes as its second operand transposed (`_scaled_mm(a, b.t(), ...)`). K must
be a multiple of 16: a row of fp8 values then starts on a 16-byte boundary, which the tile
copies (and the bulk tensor copies on sm_90a) need. Ragged M, N and K are masked by the
copies (loads past the edge give zero, stores are skipped).

The scales are float32; their shapes choose the kind (`scale_kind`):

    kind      scale_a                scale_b                     applied
    tensor    one element            one element                 in the epilogue
    row       (M, 1) or (M,)         (1, N) or (N,)              in the epilogue (torch's rowwise shapes)
    block     (M, ceil(K/128))       (ceil(N/128), ceil(K/128))  per 128-wide K block

"block" is DeepSeek-V3's (DeepGEMM's): one scale per 1 x 128 group of the activation and per
128 x 128 block of the weight. Each k step covers exactly one 128-wide K block: its product
goes into a float32 fragment of its own (T.gemm with clear_accum), which is then added into
the running accumulator times scale_a[m, kb] * scale_b[n // 128, kb]. The scales of the step
are loaded into a fragment before the T.gemm, so that their global loads are in flight while
the tensor cores work (one per row where the tile lies in one weight block). That promotion
runs on the CUDA cores after the gemm's wait; on sm_90a (`pair`, the default there) a
pipelined step covers two K blocks, in two fragments: both gemms are issued, and block 2k is
promoted while the tensor cores run block 2k + 1, pipeline_loops sinking each gemm's wait
down to the promotion that reads its fragment (docs/pipeline.md) -- DeepGEMM and
FlashAttention-3 overlap the same way. Without it each warpgroup's tensor cores idle through
its promotion, and the two consumer warpgroups, released by the same barrier, tend to
promote at the same time. Besides applying the scales, this promotion is what keeps Hopper's fp8
wgmma, which sums its products with fewer bits than float32 keeps, from losing accuracy over
long K: no more than 128 products are summed at the tensor cores' precision.

The tensor and row kinds accumulate across the whole K on the tensor cores (as torch's
`use_fast_accum=True` does) and scale the fp32 tile once in the epilogue; `promote=n` adds the
tensor cores' accumulator into a second fp32 one every n k steps instead (TileLang's "2xAcc"),
for long K where accuracy matters more than the last few percent of speed.

Tiles (`plan`): on sm_90a 128 x 256 x 128 with two consumer warpgroups of m64n256 and four
stages of 48 KiB (a 128 x 256 x 64 bf16 tile of kernels/gemm.py holds the same bytes) for the
tensor and row kinds on outputs that fill the machine; the block kind keeps two accumulators,
so its tile is 128 x 128 (64 + 64 + 64 float32 registers a thread for the accumulator and
the pair's two fragments), three stages of two K blocks. Decode-shaped M (<= 64) runs split-K like kernels/gemm.py (`split_k_slices`, the
same rule): every slice writes its scaled fp32 partial tile to a workspace, a second kernel
sums the slices in order, adds the bias and rounds. The block kind's slices are whole
128-wide K blocks, so the scales apply inside each slice as in the one-kernel program.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import check_devices, check_rank, check_tensor, describe, launchable, sm_count, wgmma_gpu
from .gemm import MMA_SYNC, SPLIT_K_MAX_M, _default_sms, apply_epilogue, split_k_slices

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_NAMES = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}
OUT_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
KINDS = ("tensor", "row", "block")
GROUP = 128          # the block kind's scale group along K (and along N for the weight)
K_ALIGN = 16         # fp8 elements in 16 bytes: K is a multiple of this

# Tiles (see the module note): the keys kernel_for and the benchmark's --config take.
WGMMA_WIDE = dict(block_M=128, block_N=256, block_K=128, num_stages=4, threads=256, panel_size=8)
# The block kind: two K blocks a pipelined step (`pair`), three stages of 64 KiB; `promote`
# (tensor and row kinds) one K block a step, five stages of 32 KiB.
WGMMA_BLOCK = dict(block_M=128, block_N=128, block_K=128, num_stages=3, threads=256, panel_size=8, pair=1)
WGMMA_PROMOTE = dict(block_M=128, block_N=128, block_K=128, num_stages=5, threads=256, panel_size=8)
WGMMA_SMALL = dict(block_M=128, block_N=128, block_K=128, num_stages=4, threads=256, panel_size=4)
MMA_SYNC_TILE = dict(block_M=128, block_N=128, block_K=128, num_stages=3, threads=256, panel_size=4)
# Split-K: one m64n128 warpgroup, four stages of 24 KiB (two blocks an SM), as kernels/gemm.py.
SPLIT_K_TILE = dict(block_M=64, block_N=128, block_K=128, num_stages=4, threads=128)
WIDE_MIN_OUTPUT = 132 * 128 * 256   # M * N from which the 128 x 256 tile fills an H100 once


def scale_shapes(kind, M, N, K):
    """The shapes the program takes its scales in: (scale_a, scale_b)."""
    kb, nb = -(-K // GROUP), -(-N // GROUP)
    return {"tensor": ((1,), (1,)), "row": ((M,), (N,)), "block": ((M, kb), (nb, kb))}[kind]


@T.macro
def block_scales(scl, ScaleA, ScaleB, row0, col0, kb, rows, cols, M, NB, KB):
    """scl[i, j] = scale_a[row0 + i, kb] * scale_b[(col0 + j) // 128, kb], or with a (rows,)
    fragment scl[i] = scale_a[row0 + i, kb] * scale_b[col0 // 128, kb] (a tile within one
    128-wide weight block). Rows, weight blocks and kb past the last read the last one
    (their products are never stored or are skipped)."""
    if len(scl.shape) == 1:
        for i in T.Parallel(rows):
            scl[i] = ScaleA[T.min(row0 + i, M - 1), T.min(kb, KB - 1)] * ScaleB[T.min(col0 // GROUP, NB - 1),
                                                                                T.min(kb, KB - 1)]
    else:
        for i, j in T.Parallel(rows, cols):
            scl[i, j] = (ScaleA[T.min(row0 + i, M - 1), T.min(kb, KB - 1)] *
                         ScaleB[T.min((col0 + j) // GROUP, NB - 1), T.min(kb, KB - 1)])


@T.macro
def promote_scaled(acc, part, scl, rows, cols):
    """acc += part * scl (scl per element, or per row: see block_scales)."""
    if len(scl.shape) == 1:
        for i, j in T.Parallel(rows, cols):
            acc[i, j] += part[i, j] * scl[i]
    else:
        for i, j in T.Parallel(rows, cols):
            acc[i, j] += part[i, j] * scl[i, j]


@T.macro
def epilogue_scales(acc, ScaleA, ScaleB, row0, col0, rows, cols, M, N, kind, ab):
    """acc *= scale_a * scale_b, per tensor (ab[0], loaded before the main loop so that the
    epilogue does not wait on the load) or per row of a and row of b (the tensor and row
    kinds; rows and columns past M and N read the last scale and are never stored)."""
    if kind == "tensor":
        for i, j in T.Parallel(rows, cols):
            acc[i, j] = acc[i, j] * ab[0]
    if kind == "row":
        for i, j in T.Parallel(rows, cols):
            acc[i, j] = acc[i, j] * (ScaleA[T.min(row0 + i, M - 1)] * ScaleB[T.min(col0 + j, N - 1)])


@T.macro
def scaled_mainloop(A, B, ScaleA, ScaleB, A_s, B_s, part, scl, acc, row0, col0, first, steps, M, N, NB, KB, block_M,
                    block_N, block_K, num_stages, kind, promote, pair, A1_s, B1_s, part1, scl1):
    """acc = the scaled product of k steps first .. first + steps of the tile at (row0, col0)
    (the block kind; `pair`: two steps a pipelined iteration, A1_s .. scl1 the second
    step's tiles, fragment and scales), or its unscaled fp32 sum (the others; `promote` > 0:
    the tensor cores' sum added into acc every `promote` steps)."""
    if kind == "block" and pair:
        # Two K blocks a step: both gemms issued, then block 2k promoted while the tensor
        # cores run gemm 2k + 1 (pipeline_loops sinks each wait down to the promotion that
        # reads its fragment; the other consumer warpgroup's gemms fill the rest). A1_s /
        # B1_s: the second block's tiles, a copy group of their own. An odd last step's
        # second block lies past the range (its loads read zeros past K, or the next
        # slice): a count not known to be even skips its promotion there. (Rotating the
        # loop, block 2k - 1 promoted under gemm 2k, makes ptxas wait for every gemm in
        # flight before reading registers a gemm of the previous iteration wrote: C7517.)
        for k in T.Pipelined(T.ceildiv(steps, 2), num_stages=num_stages):
            T.copy(A[row0, (first + 2 * k) * block_K], A_s)
            T.copy(B[col0, (first + 2 * k) * block_K], B_s)
            T.copy(A[row0, (first + 2 * k + 1) * block_K], A1_s)
            T.copy(B[col0, (first + 2 * k + 1) * block_K], B1_s)
            block_scales(scl, ScaleA, ScaleB, row0, col0, first + 2 * k, block_M, block_N, M, NB, KB)
            block_scales(scl1, ScaleA, ScaleB, row0, col0, first + 2 * k + 1, block_M, block_N, M, NB, KB)
            T.gemm(A_s, B_s, part, transpose_B=True, clear_accum=True)
            T.gemm(A1_s, B1_s, part1, transpose_B=True, clear_accum=True)
            promote_scaled(acc, part, scl, block_M, block_N)
            if isinstance(steps, int) and steps % 2 == 0:
                promote_scaled(acc, part1, scl1, block_M, block_N)
            else:
                if 2 * k + 1 < steps:
                    promote_scaled(acc, part1, scl1, block_M, block_N)
    elif kind == "block":
        for k in T.Pipelined(steps, num_stages=num_stages):
            T.copy(A[row0, (first + k) * block_K], A_s)
            T.copy(B[col0, (first + k) * block_K], B_s)
            block_scales(scl, ScaleA, ScaleB, row0, col0, first + k, block_M, block_N, M, NB, KB)
            T.gemm(A_s, B_s, part, transpose_B=True, clear_accum=True)
            promote_scaled(acc, part, scl, block_M, block_N)
    elif promote > 0:
        T.clear(part)
        for k in T.Pipelined(steps, num_stages=num_stages):
            T.copy(A[row0, (first + k) * block_K], A_s)
            T.copy(B[col0, (first + k) * block_K], B_s)
            T.gemm(A_s, B_s, part, transpose_B=True)
            if (k + 1) % promote == 0:
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] += part[i, j]
                T.clear(part)
        if steps % promote != 0:
            for i, j in T.Parallel(block_M, block_N):
                acc[i, j] += part[i, j]
    else:
        for k in T.Pipelined(steps, num_stages=num_stages):
            T.copy(A[row0, (first + k) * block_K], A_s)
            T.copy(B[col0, (first + k) * block_K], B_s)
            T.gemm(A_s, B_s, acc, transpose_B=True)


def block_scale_shape(block_M, block_N):
    """The block kind's scale fragment: per row where the tile lies within one 128-wide
    weight block (block_N divides 128: two registers a thread), else per element."""
    return (block_M,) if GROUP % block_N == 0 else (block_M, block_N)


def _check_tile(op, kind, block_K, promote, pair=0):
    if pair not in (0, 1) or (pair and kind != "block"):
        raise ValueError(f"{op}: pair (two k steps an iteration, 0 or 1) is for the block kind only, got pair={pair} "
                         f"with kind={kind!r}")
    if kind not in KINDS:
        raise ValueError(f"{op}: kind must be one of {KINDS}, got {kind!r}")
    if kind == "block" and block_K != GROUP:
        raise ValueError(f"{op}: the block kind's k step is one {GROUP}-wide scale group, so block_K must be "
                         f"{GROUP}, got block_K={block_K}")
    if promote < 0 or (kind == "block" and promote):
        raise ValueError(f"{op}: promote (k steps between promotions, 0 = none) must be >= 0 and is for the "
                         f"tensor and row kinds only (the block kind promotes every step), got {promote}")


@T.macro
def tile_buffers(block_M, block_N, block_K, a_dtype, b_dtype, kind, promote, pair):
    """Both programs' buffers of one tile: A_s, B_s, the accumulator acc, the tensor cores'
    partial sums `part` and the scales `scl` (acc itself unless the block kind or promote
    needs them apart), the second step's A1_s, B1_s, part1, scl1 (the first's unless pair),
    and ab, the per-tensor scale product."""
    A_s = T.alloc_shared((block_M, block_K), a_dtype)
    B_s = T.alloc_shared((block_N, block_K), b_dtype)
    acc = T.alloc_fragment((block_M, block_N), "float32")
    part, scl = acc, acc
    if kind == "block" or promote:
        part = T.alloc_fragment((block_M, block_N), "float32")
    if kind == "block":
        scl = T.alloc_fragment(block_scale_shape(block_M, block_N), "float32")
    A1_s, B1_s, part1, scl1 = A_s, B_s, part, scl
    if pair:
        A1_s = T.alloc_shared((block_M, block_K), a_dtype)
        B1_s = T.alloc_shared((block_N, block_K), b_dtype)
        part1 = T.alloc_fragment((block_M, block_N), "float32")
        scl1 = T.alloc_fragment(block_scale_shape(block_M, block_N), "float32")
    ab = T.alloc_local((1,), "float32")
    return A_s, B_s, acc, part, scl, A1_s, B1_s, part1, scl1, ab


def fp8_gemm_program(M, N, K, kind="tensor", block_M=128, block_N=128, block_K=128, num_stages=4, threads=256,
                     a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", out_dtype="bfloat16", has_bias=False,
                     panel_size=8, promote=0, pair=0):
    """C (M, N) out_dtype = (A · scale) @ (B · scale)ᵀ [+ Bias], A (M, K), B (N, K) 8-bit;
    ScaleA / ScaleB in `scale_shapes(kind, M, N, K)`; one block per block_M x block_N tile.
    pair=1 (block kind): two K blocks a pipelined iteration, their promotions overlapping
    the other's gemm (see scaled_mainloop)."""
    _check_tile("fp8_gemm_program", kind, block_K, promote, pair)
    sa_shape, sb_shape = scale_shapes(kind, M, N, K)
    NB, KB = -(-N // GROUP), -(-K // GROUP)

    @T.prim_func
    def fp8_gemm(A: T.Tensor((M, K), a_dtype), B: T.Tensor((N, K), b_dtype), ScaleA: T.Tensor(sa_shape, "float32"),
                 ScaleB: T.Tensor(sb_shape, "float32"), Bias: T.Tensor((N,), out_dtype),
                 C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_s, B_s, acc, part, scl, A1_s, B1_s, part1, scl1, ab = tile_buffers(block_M, block_N, block_K, a_dtype,
                                                                                 b_dtype, kind, promote, pair)
            T.use_swizzle(panel_size=panel_size)
            T.clear(acc)
            if kind == "tensor":
                ab[0] = ScaleA[0] * ScaleB[0]
            scaled_mainloop(A, B, ScaleA, ScaleB, A_s, B_s, part, scl, acc, by * block_M, bx * block_N, 0,
                            T.ceildiv(K, block_K), M, N, NB, KB, block_M, block_N, block_K, num_stages, kind, promote,
                            pair, A1_s, B1_s, part1, scl1)
            epilogue_scales(acc, ScaleA, ScaleB, by * block_M, bx * block_N, block_M, block_N, M, N, kind, ab)
            apply_epilogue(acc, Bias, bx * block_N, block_M, block_N, has_bias, "none", "float32")
            T.copy(acc, C[by * block_M, bx * block_N])

    return fp8_gemm


def fp8_gemm_splitk_program(M, N, K, splits, kind="tensor", block_M=64, block_N=128, block_K=128, num_stages=4,
                            threads=128, a_dtype="float8_e4m3fn", b_dtype="float8_e4m3fn", out_dtype="bfloat16",
                            has_bias=False, promote=0, pair=0, combine_M=16, combine_N=128, combine_threads=128):
    """fp8_gemm_program's product with K cut into `splits` slices of whole block_K steps
    (every slice non-empty), as kernels/gemm.py's matmul_splitk_program: kernel 1 writes each
    slice's scaled fp32 tile to the workspace Partial (splits, M, N), kernel 2 sums the slices
    in slice order, adds the bias and stores C."""
    _check_tile("fp8_gemm_splitk_program", kind, block_K, promote, pair)
    sa_shape, sb_shape = scale_shapes(kind, M, N, K)
    NB, KB = -(-N // GROUP), -(-K // GROUP)
    k_steps = -(-K // block_K)
    per_slice = -(-k_steps // splits) if splits >= 1 else 0
    if splits < 1 or (splits - 1) * per_slice >= k_steps:
        raise ValueError(f"fp8_gemm_splitk_program: splits must leave every slice at least one of the {k_steps} "
                         f"block_K={block_K} steps of K={K}, got splits={splits}")

    @T.prim_func
    def fp8_gemm_splitk(A: T.Tensor((M, K), a_dtype), B: T.Tensor((N, K), b_dtype),
                        ScaleA: T.Tensor(sa_shape, "float32"), ScaleB: T.Tensor(sb_shape, "float32"),
                        Bias: T.Tensor((N,), out_dtype), C: T.Tensor((M, N), out_dtype)):
        Partial = T.alloc_global((splits, M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            A_s, B_s, acc, part, scl, A1_s, B1_s, part1, scl1, ab = tile_buffers(block_M, block_N, block_K, a_dtype,
                                                                                 b_dtype, kind, promote, pair)
            T.clear(acc)
            if kind == "tensor":
                ab[0] = ScaleA[0] * ScaleB[0]
            # The last slice may be shorter when the steps do not divide evenly.
            scaled_mainloop(A, B, ScaleA, ScaleB, A_s, B_s, part, scl, acc, by * block_M, bx * block_N,
                            bz * per_slice, T.min(per_slice, k_steps - bz * per_slice), M, N, NB, KB, block_M,
                            block_N, block_K, num_stages, kind, promote, pair, A1_s, B1_s, part1, scl1)
            epilogue_scales(acc, ScaleA, ScaleB, by * block_M, bx * block_N, block_M, block_N, M, N, kind, ab)
            T.copy(acc, Partial[bz, by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])

        with T.Kernel(T.ceildiv(N, combine_N), T.ceildiv(M, combine_M), threads=combine_threads) as (bx, by):
            piece = T.alloc_fragment((combine_M, combine_N), "float32")
            total = T.alloc_fragment((combine_M, combine_N), "float32")
            T.clear(total)
            for s in T.unroll(splits):
                T.copy(Partial[s, by * combine_M:(by + 1) * combine_M, bx * combine_N:(bx + 1) * combine_N], piece)
                for i, j in T.Parallel(combine_M, combine_N):
                    total[i, j] += piece[i, j]
            apply_epilogue(total, Bias, bx * combine_N, combine_M, combine_N, has_bias, "none", "float32")
            T.copy(total, C[by * combine_M, bx * combine_N])

    return fp8_gemm_splitk


def _jits(program):
    return {mma: tegula.jit(out_idx=[-1], pass_configs=MMA_SYNC if mma else {})(program) for mma in (False, True)}


_TILED, _SPLIT_K = _jits(fp8_gemm_program), _jits(fp8_gemm_splitk_program)
fp8_gemm_kernel = _TILED[False]
fp8_gemm_splitk_kernel = _SPLIT_K[False]


def plan(M, N, K, kind, wgmma=None, sms=132, promote=0):
    """The rule that picks the program and its tile: (splits, tile), splits > 1 for split-K.

    M <= 64: 64 x 128 x 128 tiles (one m64n128 warpgroup), split-K where the output tiles
    alone leave SMs idle, the slice count from kernels/gemm.py's split_k_slices (16 x 7168 x
    2048 on 132 SMs: 56 tiles, 16 steps -> 4 slices of 4 steps). Otherwise on wgmma: the
    block kind 128 x 128 x 128 two K blocks a step (`pair`), three stages of 64 KiB;
    `promote` (which also keeps two accumulators) 128 x 128 x 128, five stages; the tensor and row kinds 128 x 256 x 128, four stages, when M * N fills the
    machine once (4096 x 4096: 512 tiles), else 128 x 128. On
    mma.sync (sm_89) 128 x 128 x 128 with three stages (96 KiB of its 99 KiB shared memory)."""
    if M <= SPLIT_K_MAX_M:
        tile = dict(SPLIT_K_TILE)
        return split_k_slices(M, N, K, sms, tile["block_M"], tile["block_N"], tile["block_K"]), tile
    if not (wgmma_gpu() if wgmma is None else wgmma):
        return 1, dict(MMA_SYNC_TILE)
    if kind == "block":
        return 1, dict(WGMMA_BLOCK)
    if promote:
        return 1, dict(WGMMA_PROMOTE)
    return 1, dict(WGMMA_WIDE if M * N >= WIDE_MIN_OUTPUT else WGMMA_SMALL)


@functools.lru_cache(maxsize=None)
def kernel_for(M, N, K, kind, a_dtype: torch.dtype, b_dtype: torch.dtype, out_dtype="bfloat16", has_bias=False,
               mma_sync=False, sms=None, **config):
    """The jit kernel of this product, program and tile from `plan` (on `sms` SMs, default
    this GPU's); config overrides the tile's keys (block_M, block_N, block_K, num_stages,
    threads, panel_size, promote, pair), `splits=n` forces n K slices (1: the one-kernel
    program)."""
    splits, tile = plan(M, N, K, kind, False if mma_sync else None, _default_sms() if sms is None else sms,
                        config.get("promote", 0))
    splits = config.pop("splits", splits)
    tile.update(config)
    dtypes = dict(a_dtype=FP8_NAMES[a_dtype], b_dtype=FP8_NAMES[b_dtype], out_dtype=out_dtype, has_bias=has_bias)
    if splits > 1:
        tile.pop("panel_size", None)   # the split-K grid is not rasterised in panels
        return _SPLIT_K[mma_sync](M, N, K, splits, kind, **dtypes, **tile)
    return _TILED[mma_sync](M, N, K, kind, **dtypes, **tile)


# ---- the entry point ----

def _shape(t):
    return tuple(t.shape)


def scale_kind(op, scale_a, scale_b, M, N, K):
    """The kind the scales' shapes choose (see the module note), or a ValueError naming the
    scale that fits none. Shapes that fit two kinds mean the same scaling in both (one
    element: tensor; K <= 128: one group along K), and the first kind listed wins."""
    kb, nb = -(-K // GROUP), -(-N // GROUP)
    forms_a = {"tensor": scale_a.numel() == 1, "row": _shape(scale_a) in ((M, 1), (M,)),
               "block": _shape(scale_a) == (M, kb)}
    forms_b = {"tensor": scale_b.numel() == 1, "row": _shape(scale_b) in ((1, N), (N,)),
               "block": _shape(scale_b) == (nb, kb)}
    for kind in KINDS:
        if forms_a[kind] and forms_b[kind]:
            return kind
    wanted_b = {"tensor": "one element", "row": f"shape ({N},) or (1, {N}) (one scale per row of b)",
                "block": f"shape ({nb}, {kb}) (one scale per 128 x 128 block of b)"}
    fits_a = [k for k in KINDS if forms_a[k]]
    if not fits_a:
        raise ValueError(f"{op}: scale_a must have one element (per tensor), shape ({M}, 1) or ({M},) (per row "
                         f"of a), or ({M}, {kb}) (per 1 x 128 group of a, K={K}), got {describe(scale_a)}")
    raise ValueError(f"{op}: scale_b must have " + " or ".join(wanted_b[k] for k in fits_a) +
                     f" to go with scale_a of shape {_shape(scale_a)} ({'/'.join(fits_a)} scaling), "
                     f"got {describe(scale_b)}")


def check_fp8_gemm_args(a, b, scale_a, scale_b, bias=None, out_dtype="bfloat16", op="fp8_gemm"):
    """Every check of fp8_gemm (its operator's fake runs them too); returns (M, N, K, kind)."""
    check_tensor(op, "a", a, dtypes=FP8_DTYPES)
    check_tensor(op, "b", b, dtypes=FP8_DTYPES)
    check_tensor(op, "scale_a", scale_a, dtypes=(torch.float32,))
    check_tensor(op, "scale_b", scale_b, dtypes=(torch.float32,))
    if not isinstance(out_dtype, str) or out_dtype not in OUT_DTYPES:
        raise ValueError(f"{op}: out_dtype must be one of {tuple(OUT_DTYPES)}, got {out_dtype!r}")
    if bias is not None:
        check_tensor(op, "bias", bias, dtypes=(OUT_DTYPES[out_dtype],))
    check_rank(op, "a", a, 2, "M, K")
    check_rank(op, "b", b, 2, "N, K: the weight as stored, K-major")
    M, K = a.shape
    N = b.shape[0]
    if b.shape[1] != K:
        raise ValueError(f"{op}: b must have shape (N, {K}) (N x K, K-major, its columns matching the columns of a), "
                         f"got {describe(b)}")
    if K % K_ALIGN:
        raise ValueError(f"{op}: K (the columns of a and b) must be a multiple of {K_ALIGN}, so that every row of "
                         f"8-bit values starts on a 16-byte boundary, got K={K}")
    kind = scale_kind(op, scale_a, scale_b, M, N, K)
    if bias is not None and _shape(bias) != (N,):
        raise ValueError(f"{op}: bias must have shape ({N},), got {describe(bias)}")
    named = [("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)]
    check_devices(op, *named, *((("bias", bias),) if bias is not None else ()))
    return M, N, K, kind


def fp8_gemm_fake(a, b, scale_a, scale_b, bias=None, out_dtype="bfloat16"):
    """fp8_gemm's result from shapes only (for tracing), after the same checks."""
    M, N, _, _ = check_fp8_gemm_args(a, b, scale_a, scale_b, bias, out_dtype)
    return a.new_empty((M, N), dtype=OUT_DTYPES[out_dtype])


def kernel_scales(kind, scale_a, scale_b, M, N):
    """The scales as the program takes them (`scale_shapes`): float32, launchable."""
    if kind == "tensor":
        return launchable(scale_a.reshape(1)), launchable(scale_b.reshape(1))
    if kind == "row":
        return launchable(scale_a.reshape(M)), launchable(scale_b.reshape(N))
    return launchable(scale_a), launchable(scale_b)


def fp8_gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             bias: torch.Tensor | None = None, out_dtype: str = "bfloat16") -> torch.Tensor:
    """(a · scale_a) @ (b · scale_b)ᵀ [+ bias] in out_dtype ("bfloat16", "float16" or "float32").

    a (M, K), b (N, K): CUDA float8_e4m3fn / float8_e5m2 (either, each), K a multiple of 16; b
    is the weight as stored (nn.Linear's (out, in)). scale_a, scale_b: float32, per tensor
    (one element each), per row ((M, 1) and (1, N), or (M,) and (N,)) or per block ((M,
    ceil(K/128)) and (ceil(N/128), ceil(K/128))); see the module note. bias (N,) in out_dtype.
    Strided or misaligned views are copied first; empty extents give torch's result (zeros +
    bias for K = 0). NaN and inf propagate. Returns a new (M, N) tensor."""
    return fp8_gemm_with_config(a, b, scale_a, scale_b, bias, out_dtype)


def fp8_gemm_with_config(a, b, scale_a, scale_b, bias=None, out_dtype="bfloat16", **config):
    """fp8_gemm with kernel_for's tile overrides (block_M, ..., splits, promote, pair, mma_sync)."""
    M, N, K, kind = check_fp8_gemm_args(a, b, scale_a, scale_b, bias, out_dtype)
    dtype = OUT_DTYPES[out_dtype]
    if M == 0 or N == 0 or K == 0:
        out = torch.zeros((M, N), dtype=torch.float32, device=a.device)
        return (out + bias.float() if bias is not None else out).to(dtype)
    sa, sb = kernel_scales(kind, scale_a, scale_b, M, N)
    dummy = launchable(bias) if bias is not None else torch.empty(N, dtype=dtype, device=a.device)
    kernel = kernel_for(M, N, K, kind, a.dtype, b.dtype, out_dtype, bias is not None, sms=sm_count(a.device),
                        **config)
    return kernel(launchable(a), launchable(b), sa, sb, dummy)
