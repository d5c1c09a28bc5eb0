"""Matrix multiplication on tensor cores, written the TileLang way:

    C = epilogue(A @ B [+ bias])      A (M, K), B (K, N), fp16 or bf16, fp32 accumulation

The block tile goes through shared memory; T.gemm lowers to wgmma on sm_90a (reading the
swizzled tiles straight from shared memory) and to ldmatrix + mma.sync elsewhere. Ragged
M, N and K are masked by the copies (loads past the edge give zero, stores are skipped);
rows whose stride is not a multiple of 8 elements are loaded with narrower accesses.

Decode-shaped products (M <= 64: a few tokens against a weight) have too few output tiles
to occupy the GPU: 16 x 4096 x 4096 is 32 tiles of 64 x 128, on 132 SMs, each block
streaming a 4096-row panel of B alone. They run split-K (`matmul_splitk_program`): K is cut
into slices so that tiles x slices blocks cover the machine about twice; each block writes
its fp32 partial product to a workspace, and a second kernel of the same call sums the
slices in a fixed order (the result does not depend on block scheduling), applies the
epilogue and stores C. `split_k_slices` is the rule.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import check_devices, check_rank, check_tensor, describe, dtype_name, launchable, sm_count, wgmma_gpu

EPILOGUES = ("none", "relu", "gelu", "bias", "bias_relu", "bias_gelu")


def _parse_epilogue(epilogue):
    """"bias_gelu" -> (True, "gelu"); "bias" -> (True, "none")."""
    return epilogue.startswith("bias"), epilogue.replace("bias_", "").replace("bias", "none")


@T.macro
def apply_epilogue(acc, Bias, col0, rows, cols, has_bias, act, accum_dtype):
    """acc (rows, cols) fp32, whose column j is C's column col0 + j: + bias, then the
    activation, in place."""
    for i, j in T.Parallel(rows, cols):
        v = acc[i, j]
        if has_bias:
            v = v + T.cast(Bias[col0 + j], accum_dtype)
        if act == "relu":
            v = T.max(v, 0.0)
        if act == "gelu":
            u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
            v = 0.5 * v * (2.0 - 2.0 / (T.exp(2.0 * u) + 1.0))  # 1 + tanh(u)
        acc[i, j] = v


def matmul_program(M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128,
                   dtype="float16", accum_dtype="float32", epilogue="none", ldb=None, panel_size=4):
    """ldb: B's row length when its rows are padded past N (matmul() pads rows that would
    break 16-byte alignment); columns N..ldb are never stored. panel_size: T.use_swizzle's
    rasterisation panel, in tiles."""
    ldb = N if ldb is None else ldb
    has_bias, act = _parse_epilogue(epilogue)

    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, ldb), dtype), Bias: T.Tensor((N,), dtype),
             C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.use_swizzle(panel_size=panel_size)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            apply_epilogue(C_local, Bias, bx * block_N, block_M, block_N, has_bias, act, accum_dtype)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


def matmul_splitk_program(M, N, K, splits, block_M=64, block_N=128, block_K=64, num_stages=4, threads=128,
                          dtype="float16", accum_dtype="float32", epilogue="none", ldb=None, combine_M=16,
                          combine_N=128, combine_threads=128):
    """C = epilogue(A @ B [+ bias]) with K cut into `splits` slices of whole block_K steps
    (every slice non-empty: `split_k_slices` picks such a count). Kernel 1, one block per
    (N tile, M tile, slice), writes its fp32 partial tile to the workspace `Partial`
    (splits, M, N); kernel 2, one block per combine_M x combine_N tile of C, sums the
    slices in slice order, applies the epilogue and stores C. Ragged edges are masked by
    the copies in both kernels (the workspace has C's extents, not the tiles')."""
    ldb = N if ldb is None else ldb
    has_bias, act = _parse_epilogue(epilogue)
    k_steps = -(-K // block_K)
    per_slice = -(-k_steps // splits) if splits >= 1 else 0
    if splits < 1 or (splits - 1) * per_slice >= k_steps:
        raise ValueError(f"matmul_splitk_program: splits must leave every slice at least one of the "
                         f"{k_steps} block_K={block_K} steps of K={K}, got splits={splits}")

    @T.prim_func
    def gemm_splitk(A: T.Tensor((M, K), dtype), B: T.Tensor((K, ldb), dtype), Bias: T.Tensor((N,), dtype),
                    C: T.Tensor((M, N), dtype)):
        Partial = T.alloc_global((splits, M, N), accum_dtype)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            first = bz * per_slice
            # The last slice may be shorter when the steps do not divide evenly.
            for k in T.Pipelined(T.min(per_slice, k_steps - first), num_stages=num_stages):
                T.copy(A[by * block_M, (first + k) * block_K], A_shared)
                T.copy(B[(first + k) * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, Partial[bz, by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])

        # The partials were just written, so they are read from L2. Every slice's loads are
        # issued before the sums (the loop is unrolled).
        with T.Kernel(T.ceildiv(N, combine_N), T.ceildiv(M, combine_M), threads=combine_threads) as (bx, by):
            part = T.alloc_fragment((combine_M, combine_N), accum_dtype)
            acc = T.alloc_fragment((combine_M, combine_N), accum_dtype)
            T.clear(acc)
            for s in T.unroll(splits):
                T.copy(Partial[s, by * combine_M:(by + 1) * combine_M, bx * combine_N:(bx + 1) * combine_N], part)
                for i, j in T.Parallel(combine_M, combine_N):
                    acc[i, j] += part[i, j]
            apply_epilogue(acc, Bias, bx * combine_N, combine_M, combine_N, has_bias, act, accum_dtype)
            T.copy(acc, C[by * combine_M, bx * combine_N])

    return gemm_splitk


# The engine's code paths a kernel can be held to, for comparing them: "auto" lets the
# engine pick (on sm_90a, TMA loads and warp-specialised pipelines where it can), "legacy"
# keeps the cp.async pipeline that every thread of the block both loads and computes in.
PATHS = {
    "auto": {},
    "legacy": {tegula.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
               tegula.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True},
}
MMA_SYNC = {tegula.PassConfigKey.TL_DISABLE_WGMMA: True}


def _jits(program):
    """(mma_sync, path) -> the jit object of `program` under those pass configs."""
    return {(mma, path): tegula.jit(out_idx=[-1], pass_configs={**(MMA_SYNC if mma else {}), **configs})(program)
            for mma in (False, True) for path, configs in PATHS.items()}


_TILED, _SPLIT_K = _jits(matmul_program), _jits(matmul_splitk_program)
matmul_kernel = _TILED[False, "auto"]
# The same program held to mma.sync on sm_90a too (for comparing the two paths).
matmul_kernel_mma_sync = _TILED[True, "auto"]
matmul_kernel_legacy = _TILED[False, "legacy"]
matmul_splitk_kernel = _SPLIT_K[False, "auto"]
matmul_splitk_kernel_legacy = _SPLIT_K[False, "legacy"]


def default_config(M, N, K, wgmma=None):
    """A tile that fills the machine: large for large outputs, smaller for thin ones.
    wgmma: whether T.gemm runs on wgmma (default: whether this GPU is an sm_90 part)."""
    if M <= 64:
        return dict(block_M=64, block_N=128, block_K=64, num_stages=3, threads=128)
    if (wgmma_gpu() if wgmma is None else wgmma) and M * N >= 132 * 128 * 256:
        # benchmarks/tune_gemm.py on an H100 (wgmma): 509-527 TFLOP/s at 4096^3 and
        # 500-533 at 8192^3; two warpgroups of m64n256, four stages with one wgmma group in
        # flight. Rasterising in panels of 8 tiles rather than 4 gave 533 against 496 at
        # 8192^3 in one run (L2 reuse of the wide B tiles), the same at 4096^3.
        return dict(block_M=128, block_N=256, block_K=64, num_stages=4, threads=256, panel_size=8)
    # mma.sync (and smaller Hopper outputs): 350 TFLOP/s at 4096^3 on an H100, against
    # 342 with block_K=32 and 314-339 for the 256-wide tiles.
    return dict(block_M=128, block_N=128, block_K=64, num_stages=3, threads=128)


# Split-K: a decode-shaped product streams B once and does little arithmetic per byte,
# so its speed is the bandwidth at which all SMs together pull B. One 64 x 128 tile per
# block (one m64n128 warpgroup on wgmma); four stages of 24 KiB (A 8, B 16) make 96 KiB of
# shared memory, so two blocks fit an SM, each with its copies two or three steps ahead.
SPLIT_K_CONFIG = dict(block_M=64, block_N=128, block_K=64, num_stages=4, threads=128)
SPLIT_K_MAX_M = 64
SPLIT_K_BLOCKS_PER_SM = 2   # the grid the slices aim for: two resident blocks on every SM
SPLIT_K_MIN_STEPS = 4       # block_K steps a slice keeps at least, so that its pipeline fills


def split_k_slices(M, N, K, sms, block_M=64, block_N=128, block_K=64):
    """How many K slices `matmul` cuts a product into: 1 (the one-kernel program) unless
    M <= 64 and the output tiles alone would leave SMs idle. The count is the one that
    brings tiles x slices nearest to two blocks per SM, at most one slice per 4 block_K
    steps, then lowered to the least count with the same slice length (no slice empty).

    Worked examples on 132 SMs with 64 x 128 x 64 tiles:
    16 x 4096 x 4096: 32 tiles, 64 steps -> 8 slices of 8 steps, 256 blocks;
    64 x 8192 x 8192: 64 tiles, 128 steps -> 4 slices of 32 steps, 256 blocks;
    33 x 1000 x 4100: 8 tiles, 65 steps -> 33 wanted, 16 allowed -> 5 steps a slice, 13 slices;
    16 x 4096 x 256: 4 steps -> 1 (too short to split);
    64 x 32768 x 4096: 256 tiles already cover the SMs twice -> 1."""
    if M > SPLIT_K_MAX_M:
        return 1
    tiles = -(-M // block_M) * -(-N // block_N)
    k_steps = -(-K // block_K)
    target = SPLIT_K_BLOCKS_PER_SM * sms
    splits = min((target + tiles // 2) // tiles, k_steps // SPLIT_K_MIN_STEPS)
    if splits < 2:
        return 1
    per_slice = -(-k_steps // splits)
    return -(-k_steps // per_slice)


def _default_sms():
    """The current GPU's SM count; an H100's where there is none (compiling only)."""
    if torch.cuda.is_available():
        return sm_count(torch.device("cuda", torch.cuda.current_device()))
    return 132


@functools.lru_cache(maxsize=None)
def kernel_for(M, N, K, dtype: torch.dtype, epilogue="none", mma_sync=False, path="auto", sms=None, **config):
    """The kernel for this shape: split-K for decode shapes (`split_k_slices` on `sms`
    SMs, default the current GPU's), else default_config's tile; config overrides the tile
    (and `splits=n` forces n K slices, 1 the one-kernel program). mma_sync holds T.gemm to
    mma.sync (and that path's default tile) even where wgmma exists; path is "auto" or
    "legacy" (see PATHS)."""
    if path not in PATHS:
        raise ValueError(f"kernel_for: path must be one of {tuple(PATHS)}, got {path!r}")
    splits = config.pop("splits", None)
    if splits is None or splits > 1:
        cfg = dict(SPLIT_K_CONFIG, **config)
        if splits is None:
            tile = {key: cfg[key] for key in ("block_M", "block_N", "block_K")}
            splits = split_k_slices(M, N, K, _default_sms() if sms is None else sms, **tile)
        if splits > 1:
            return _SPLIT_K[mma_sync, path](M, N, K, splits, dtype=dtype_name(dtype), epilogue=epilogue, **cfg)
    cfg = default_config(M, N, K, wgmma=False if mma_sync else None)
    cfg.update(config)
    return _TILED[mma_sync, path](M, N, K, dtype=dtype_name(dtype), epilogue=epilogue, **cfg)


HALF_DTYPES = (torch.float16, torch.bfloat16)


def _check_operands(op, a, b):
    """a (M, K) and b (K, N) of one 16-bit float dtype; returns (M, K, N)."""
    check_tensor(op, "a", a, dtypes=HALF_DTYPES)
    check_tensor(op, "b", b, dtypes=HALF_DTYPES, like=a, like_name="a")
    check_rank(op, "a", a, 2, "M, K")
    check_rank(op, "b", b, 2, "K, N")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{op}: b must have shape ({a.shape[1]}, N) (its rows matching the columns of a), "
                         f"got {describe(b)}")
    return a.shape[0], a.shape[1], b.shape[1]


def _empty_product(a, M, N, bias, activation):
    """What torch gives when an extent is 0: an empty (M, N), or for K = 0 the epilogue of a
    zero product (relu(0 + bias), ...), computed in float32 like the kernel's epilogue."""
    c = torch.zeros((M, N), dtype=torch.float32, device=a.device)
    if bias is not None:
        c = c + bias.float()
    if activation == "relu":
        c = torch.relu(c)
    elif activation == "gelu":
        c = torch.nn.functional.gelu(c, approximate="tanh")
    return c.to(a.dtype)


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none", *,
           path: str = "auto"):
    """a (M, K) @ b (K, N) [+ bias (N,)], then an optional activation ("relu", "gelu": the
    tanh form). CUDA float16/bfloat16; strided or misaligned views are copied first; empty
    extents give torch's result. NaN and inf propagate as in torch (relu keeps a NaN).
    M <= 64 runs split-K where the output tiles alone would leave SMs idle. path: the
    engine's code path, "auto" or "legacy" (for comparing them; see PATHS)."""
    op = "matmul"
    M, K, N = _check_operands(op, a, b)
    if not isinstance(activation, str) or activation not in ("none", "relu", "gelu"):
        raise ValueError(f"{op}: activation must be 'none', 'relu' or 'gelu', got {activation!r}")
    if bias is not None:
        check_tensor(op, "bias", bias, dtypes=HALF_DTYPES, like=a, like_name="a")
        if tuple(bias.shape) != (N,):
            raise ValueError(f"{op}: bias must have shape ({N},), got {describe(bias)}")
    if not isinstance(path, str) or path not in PATHS:
        raise ValueError(f"{op}: path must be one of {tuple(PATHS)}, got {path!r}")
    check_devices(op, ("a", a), ("b", b), *((("bias", bias),) if bias is not None else ()))
    if M == 0 or N == 0 or K == 0:
        return _empty_product(a, M, N, bias, activation)
    epilogue = activation if bias is None else ("bias" if activation == "none" else "bias_" + activation)
    dummy = launchable(bias) if bias is not None else a.new_empty(N)
    a, b, K, ldb = _aligned_operands(launchable(a), launchable(b))
    return kernel_for(M, N, K, a.dtype, epilogue, path=path, sms=sm_count(a.device), ldb=ldb)(a, b, dummy)


def _aligned_operands(a, b):
    """Rows of K or N elements that are not a multiple of 8 (16 bytes) cannot be loaded with
    16-byte cp.async: the kernel then falls back to element-wide loads, correct but slow.
    For problems large enough that a copy is cheap next to the GEMM, which re-reads every
    operand tile many times, the operands are copied once into rows padded with zeros to a
    multiple of 8: zero columns of A against zero rows of B add nothing, and B's padding
    columns are never stored. The time of the copy counts in every timing of matmul().
    Returns (a, b, K, ldb) for the kernel."""
    M, K = a.shape
    N = b.shape[1]
    if (K % 8 == 0 and N % 8 == 0) or M * N * K < (1 << 30):
        return a, b, K, N
    K8, N8 = -(-K // 8) * 8, -(-N // 8) * 8
    if K8 != K:
        a = torch.nn.functional.pad(a, (0, K8 - K))
    if K8 != K or N8 != N:
        b = torch.nn.functional.pad(b, (0, N8 - N, 0, K8 - K))
    return a, b, K8, N8


def _tuning_configs(M, N, K, **_):
    return [dict(block_M=bm, block_N=bn, block_K=bk, num_stages=s, threads=t)
            for bm, bn, bk, s, t in [(128, 128, 32, 3, 128), (128, 128, 64, 3, 128), (128, 128, 32, 4, 128),
                                     (128, 256, 64, 3, 256), (128, 256, 64, 4, 256), (256, 128, 64, 4, 256),
                                     (64, 128, 32, 3, 128), (64, 64, 32, 3, 128)]]


matmul_tuned_kernel = tegula.autotune(configs=_tuning_configs, warmup=5, rep=20)(
    tegula.jit(out_idx=[-1])(matmul_program))


def matmul_tuned(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with the tile configuration timed fastest for this shape on this GPU (tuned on
    the first call, then cached on disk per device and shape). Arguments as for `matmul`."""
    op = "matmul_tuned"
    M, K, N = _check_operands(op, a, b)
    check_devices(op, ("a", a), ("b", b))
    if M == 0 or N == 0 or K == 0:
        return _empty_product(a, M, N, None, "none")
    kernel = matmul_tuned_kernel(M, N, K, dtype=dtype_name(a.dtype))
    return kernel(launchable(a), launchable(b), a.new_empty(N))
