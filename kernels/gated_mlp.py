"""SwiGLU, the gated activation of the Llama MLP, y = silu(gate) * up with
silu(v) = v / (1 + exp(-v)), and the MLP's gate and up projections with that activation
fused into their GEMM:

    swiglu(x)                    x (..., 2I), gate columns first   -> (..., I)
    swiglu(gate, up)             gate, up of one shape (..., I)    -> (..., I)
    swiglu_linear(x, wg, wu)     silu(x @ wgᵀ) * (x @ wuᵀ), wg and wu (I, K) as nn.Linear
    swiglu_linear(x, w)          the same with one weight (2I, K), gate rows first

The activation is computed in float32 and rounded once (torch's eager `F.silu(g) * u` in a
16-bit dtype rounds silu(g) first; torch.compile's fused kernel rounds once, as here).

swiglu is memory-bound: each block reads a tile of gate and up with 16-byte accesses and
writes the product. M (rows) is dynamic, the width I a compile-time constant.

swiglu_linear computes both products of the same output columns in one block: two
float32 accumulators, the gate and up tiles of the weights read in place as the GEMM's
`trans_b` operand (kernels/gemm.py, `operand_layout`), both products on tensor cores
(wgmma on sm_90a, mma.sync elsewhere), then silu(g)·u in registers; only the (M, I) result
is written: g and u never reach memory (torch.compile's two GEMMs and fused elementwise
kernel write and re-read them, 4·M·I·2 bytes; eager also writes and re-reads silu(g)).
Decode-shaped inputs (M <= 64) stream the weights
once and do little arithmetic per byte; when the output tiles alone would leave SMs idle
they run split-K (`swiglu_linear_splitk_program`), as kernels/gemm.py's matmul does.
`swiglu_linear_config` is the tile rule; benchmarks/bench_swiglu.py --sweep times others.
"""
import functools
import math

import torch

import tegula
import tegula.language as T

from ._common import (Output, check_devices, check_rank, check_tensor, describe, dtype_name, elem_bytes,
                      launchable, plan_tile)
from .gemm import HALF_DTYPES, MMA_SYNC, split_k_slices


@T.macro
def silu_times(g, u, rows, cols):
    """g = silu(g) * u over a (rows, cols) float32 tile, in place. exp(-g) overflows to inf
    for g < -88, which gives -0 (g / inf) as the limit does; g = -inf gives NaN, as torch."""
    for i, j in T.Parallel(rows, cols):
        g[i, j] = g[i, j] / (1.0 + T.exp(-g[i, j])) * u[i, j]


# ---- swiglu: the activation alone ----

def swiglu_program(N, dtype, joined, block_m, block_n, threads):
    """G, U → Y (M, N) = silu(G) * U. With `joined`, gate and up are one (M, 2N) tensor X,
    gate columns first, passed as both G and U: the up tile is read from column N on. A
    gate tile past column N then reads up columns, computed and never stored."""
    M = T.dynamic("m")
    cols = 2 * N if joined else N
    up0 = N if joined else 0

    @T.prim_func
    def swiglu_rows(
        G: T.Tensor((M, cols), dtype),
        U: T.Tensor((M, cols), dtype),
        Y: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=threads) as (bx, by):
            g = T.alloc_fragment((block_m, block_n), dtype)
            u = T.alloc_fragment((block_m, block_n), dtype)
            v = T.alloc_fragment((block_m, block_n), "float32")
            T.copy(G[by * block_m, bx * block_n], g)
            T.copy(U[by * block_m, up0 + bx * block_n], u)
            for i, j in T.Parallel(block_m, block_n):
                v[i, j] = T.cast(g[i, j], "float32")
                g[i, j] = T.cast(v[i, j] / (1.0 + T.exp(-v[i, j])) * T.cast(u[i, j], "float32"), dtype)
            T.copy(g, Y[by * block_m, bx * block_n])

    return swiglu_rows


swiglu_kernel = tegula.jit(out_idx=[-1])(swiglu_program)
_swiglu_into = tegula.jit(swiglu_program)


@functools.lru_cache(maxsize=None)
def kernel_for(n: int, dtype: torch.dtype, joined: bool, allocates_output: bool = False):
    """The jit kernel for outputs of n columns: kernel(g, u, y), or kernel(g, u) → y with
    `allocates_output`. Joined: g and u are the same (rows, 2n) tensor."""
    plan = plan_tile(n, elem_bytes(dtype))
    jit = swiglu_kernel if allocates_output else _swiglu_into
    return jit(n, dtype_name(dtype), bool(joined), plan.block_m, plan.block_n, plan.threads)


def check_swiglu_args(op, x, up) -> int:
    """The arguments of swiglu (its operator's fake checks them too); returns I, the
    width of the result."""
    check_tensor(op, "x", x)
    joined = up is None
    if not joined:
        check_tensor(op, "up", up, like=x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    if joined:
        if x.shape[-1] % 2:
            raise ValueError(f"{op}: x alone must hold gate and up side by side, a last dimension of even "
                             f"size 2I, got {describe(x)}")
        n = x.shape[-1] // 2
    else:
        if up.shape != x.shape:
            raise ValueError(f"{op}: up must have the shape {tuple(x.shape)} of x (the gate), got {describe(up)}")
        n = x.shape[-1]
    check_devices(op, ("x", x), *(() if joined else (("up", up),)))
    return n


def swiglu(x: torch.Tensor, up: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(gate) * up, computed in float32 and rounded once.

    One tensor x (..., 2I): gate = x[..., :I], up = x[..., I:] (the output of a fused
    gate/up projection), result (..., I). Two tensors x and up of one shape (..., I): gate
    is x. CUDA float16/bfloat16/float32, one dtype; any I >= 1 (widths that are not a
    multiple of 16 bytes use narrower accesses); strided or misaligned views are copied
    first; out (optional): the result's shape, dtype and device. NaN and inf propagate as
    in torch (silu(-inf) is NaN, silu(inf) is inf).
    """
    op = "swiglu"
    n = check_swiglu_args(op, x, up)
    joined = up is None
    shape = (*x.shape[:-1], n)
    dst = Output(op, out, shape, x)
    if dst.tensor.numel() == 0:
        return dst.result()
    rows = math.prod(x.shape[:-1])
    g = launchable(x).view(rows, x.shape[-1])
    u = g if joined else launchable(up).view(rows, n)
    kernel_for(n, x.dtype, joined)(g, u, dst.tensor.view(rows, n))
    return dst.result()


# ---- swiglu_linear: the gate and up projections with the activation fused ----

@T.macro
def load_gate_up(A, Wg, Wu, A_shared, G_shared, U_shared, row0, col0, k0):
    """The k step at k0 of the output tile at (row0, col0): A (M, K) rows, and the same
    rows of both weights, read as Bᵀ in place (gemm.load_operands with trans_b)."""
    T.copy(A[row0, k0], A_shared)
    T.copy(Wg[col0, k0], G_shared)
    T.copy(Wu[col0, k0], U_shared)


def swiglu_linear_program(N, K, block_M=128, block_N=128, block_K=64, num_stages=4, threads=256,
                          dtype="bfloat16", panel_size=8, stage_c=False):
    """A (M, K), Wg and Wu (N, K) → C (M, N) = silu(A Wgᵀ) * (A Wuᵀ). M is dynamic.

    Per k step a block loads one A tile and the gate and up tiles of its block_N output
    columns, and runs two tensor-core GEMMs into two float32 accumulators of one layout,
    so the epilogue pairs their elements within each thread. Two accumulators of
    block_M x block_N cost 2·block_M·block_N/threads registers a thread: 128 for 128 x 128
    on 256 threads. Ragged M, N and K are masked by the copies."""
    M = T.dynamic("m")

    @T.prim_func
    def swiglu_linear(A: T.Tensor((M, K), dtype), Wg: T.Tensor((N, K), dtype), Wu: T.Tensor((N, K), dtype),
                      C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            G_shared = T.alloc_shared((block_N, block_K), dtype)
            U_shared = T.alloc_shared((block_N, block_K), dtype)
            g = T.alloc_fragment((block_M, block_N), "float32")
            u = T.alloc_fragment((block_M, block_N), "float32")
            T.use_swizzle(panel_size=panel_size)
            T.clear(g)
            T.clear(u)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                load_gate_up(A, Wg, Wu, A_shared, G_shared, U_shared, by * block_M, bx * block_N, k * block_K)
                T.gemm(A_shared, G_shared, g, transpose_B=True)
                T.gemm(A_shared, U_shared, u, transpose_B=True)
            silu_times(g, u, block_M, block_N)
            if stage_c:
                # Through a shared tile, stored swizzled, then whole rows (gemm.matmul_program).
                C_shared = T.alloc_shared((block_M, block_N), dtype)
                T.copy(g, C_shared)
                T.copy(C_shared, C[by * block_M, bx * block_N])
            else:
                T.copy(g, C[by * block_M, bx * block_N])

    return swiglu_linear


def swiglu_linear_splitk_program(N, K, splits, block_M=64, block_N=64, block_K=64, num_stages=4, threads=128,
                                 dtype="bfloat16", combine_M=16, combine_N=128, combine_threads=128):
    """swiglu_linear_program with K cut into `splits` slices of whole block_K steps (every
    slice non-empty), for decode shapes. Kernel 1, one block per (N tile, M tile, slice),
    writes its two float32 partial products to the workspace Partial (2, splits, M, N):
    gate at [0], up at [1]. Kernel 2, one block per combine_M x combine_N tile of C, sums
    the slices of each in slice order (the result does not depend on block scheduling),
    applies silu(g)·u and stores C."""
    k_steps = -(-K // block_K)
    per_slice = -(-k_steps // splits) if splits >= 1 else 0
    if splits < 1 or (splits - 1) * per_slice >= k_steps:
        raise ValueError(f"swiglu_linear_splitk_program: splits must leave every slice at least one of the "
                         f"{k_steps} block_K={block_K} steps of K={K}, got splits={splits}")
    M = T.dynamic("m")

    @T.prim_func
    def swiglu_linear_splitk(A: T.Tensor((M, K), dtype), Wg: T.Tensor((N, K), dtype), Wu: T.Tensor((N, K), dtype),
                             C: T.Tensor((M, N), dtype)):
        Partial = T.alloc_global((2, splits, M, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            G_shared = T.alloc_shared((block_N, block_K), dtype)
            U_shared = T.alloc_shared((block_N, block_K), dtype)
            g = T.alloc_fragment((block_M, block_N), "float32")
            u = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(g)
            T.clear(u)
            first = bz * per_slice
            # The last slice may be shorter when the steps do not divide evenly.
            for k in T.Pipelined(T.min(per_slice, k_steps - first), num_stages=num_stages):
                load_gate_up(A, Wg, Wu, A_shared, G_shared, U_shared, by * block_M, bx * block_N,
                             (first + k) * block_K)
                T.gemm(A_shared, G_shared, g, transpose_B=True)
                T.gemm(A_shared, U_shared, u, transpose_B=True)
            T.copy(g, Partial[0, bz, by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])
            T.copy(u, Partial[1, bz, by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N])

        # The partials were just written, so they are read from L2; the slice loop is
        # unrolled, so every slice's loads are issued before the sums.
        with T.Kernel(T.ceildiv(N, combine_N), T.ceildiv(M, combine_M), threads=combine_threads) as (bx, by):
            part = T.alloc_fragment((combine_M, combine_N), "float32")
            g = T.alloc_fragment((combine_M, combine_N), "float32")
            u = T.alloc_fragment((combine_M, combine_N), "float32")
            T.clear(g)
            T.clear(u)
            for s in T.unroll(splits):
                T.copy(Partial[0, s, by * combine_M:(by + 1) * combine_M, bx * combine_N:(bx + 1) * combine_N], part)
                for i, j in T.Parallel(combine_M, combine_N):
                    g[i, j] += part[i, j]
                T.copy(Partial[1, s, by * combine_M:(by + 1) * combine_M, bx * combine_N:(bx + 1) * combine_N], part)
                for i, j in T.Parallel(combine_M, combine_N):
                    u[i, j] += part[i, j]
            silu_times(g, u, combine_M, combine_N)
            T.copy(g, C[by * combine_M, bx * combine_N])

    return swiglu_linear_splitk


# Tiles (benchmarks/bench_swiglu.py --sweep times these and others on the GPU at hand).
# Large M: a 128 x 128 output tile of both products on 256 threads, 128 accumulator
# registers a thread, 0 bytes of stack; on wgmma that is the work per k step of
# matmul's 128 x 256 tile, and its shared memory: 48 KiB a stage (A 16, gate 16, up 16),
# 3 stages, and the epilogue through a shared tile of the output (32 KiB; H200,
# 8192 x 14336 x 4096: 0.99x -> 1.01x torch's two cuBLAS GEMMs, where 4 stages stored
# each thread's column pairs straight to global memory, as gemm.default_config says).
# mma.sync parts (A100: 163 KiB a block) take 3 stages and store from registers.
TILED_CONFIG = dict(block_M=128, block_N=128, block_K=64, num_stages=3, threads=256, panel_size=8, stage_c=True)
TILED_CONFIG_MMA = dict(TILED_CONFIG, num_stages=3, stage_c=False)
# Decode (M <= 64) and outputs of few 128 x 128 tiles: 64 x 64 tiles on one warpgroup,
# 24 KiB a stage, 4 stages: 96 KiB, two blocks an SM, as matmul's split-K tile.
THIN_CONFIG = dict(block_M=64, block_N=64, block_K=64, num_stages=4, threads=128)
SPLIT_K_MAX_M = 64
MIN_WAVES = 2    # blocks of the large tile, in SMs, below which the thin tile is taken


@functools.lru_cache(maxsize=None)
def gpu_facts(device: torch.device):
    """(whether the GEMMs run on wgmma, SMs, a block's shared memory limit in bytes) of a
    CUDA device, read once."""
    props = torch.cuda.get_device_properties(device)
    return props.major == 9, props.multi_processor_count, props.shared_memory_per_block_optin


def stage_bytes(block_M, block_N, block_K, elem=2):
    """Shared memory of one pipeline stage: the A tile and the gate and up tiles."""
    return (block_M + 2 * block_N) * block_K * elem


def shared_bytes(cfg, elem=2):
    """Shared memory of a tile config: its stages, and the output tile of stage_c."""
    out = cfg["block_M"] * cfg["block_N"] * elem if cfg.get("stage_c") else 0
    return cfg["num_stages"] * stage_bytes(cfg["block_M"], cfg["block_N"], cfg["block_K"], elem) + out


def swiglu_linear_config(M, N, K, wgmma=None, sms=None, max_shared=None):
    """The tile for x (M, K) against weights of N rows: a dict of swiglu_linear_program's
    arguments plus `splits` (K slices; 1 runs the one-kernel program). wgmma: whether the
    GEMMs run on wgmma (default: whether this GPU is an sm_90 part); sms: the GPU's SMs
    (default this GPU's, 132 without one); max_shared: a block's shared memory limit in
    bytes (default this GPU's; 227 KiB with wgmma, 163 KiB without, when there is none).

    M <= 64: the thin tile, split-K by kernels/gemm.py's rule (`split_k_slices`) on its
    64 x 64 tiles; Llama-8B's 8 x 14336 x 4096 is 224 tiles, already 1.7 blocks an SM on
    132 SMs, so 1 slice. Larger M: the 128 x 128 tile, unless its tiles would not give
    every SM MIN_WAVES blocks (M = 256, N = 14336: 224 tiles), then the thin tile. The
    stages are lowered while they do not fit max_shared."""
    if torch.cuda.is_available():
        here = gpu_facts(torch.device("cuda", torch.cuda.current_device()))
    else:
        here = (False, 132, None)
    wgmma = here[0] if wgmma is None else wgmma
    sms = here[1] if sms is None else sms
    if max_shared is None:
        max_shared = here[2] or (227 if wgmma else 163) * 1024
    if M <= SPLIT_K_MAX_M:
        cfg = dict(THIN_CONFIG)
        cfg["splits"] = split_k_slices(M, N, K, sms, cfg["block_M"], cfg["block_N"], cfg["block_K"])
    elif -(-M // 128) * -(-N // 128) < MIN_WAVES * sms:
        cfg = dict(THIN_CONFIG, panel_size=8, splits=1)
    else:
        cfg = dict(TILED_CONFIG if wgmma else TILED_CONFIG_MMA, splits=1)
    # A little is kept back for the pipeline's mbarriers.
    while cfg["num_stages"] > 2 and shared_bytes(cfg) > max_shared - 1024:
        cfg["num_stages"] -= 1
    return cfg


def sweep_configs(M, N, K, wgmma=None, max_shared=None):
    """The tiles benchmarks/bench_swiglu.py --sweep times for this shape, swiglu_linear_config's
    first, each a dict of the same form; those whose stages do not fit max_shared (default
    as in swiglu_linear_config) or that would leave a K slice empty are left out. Every one
    keeps its accumulators in registers (tests/python/cpu/test_swiglu.py compiles them)."""
    chosen = swiglu_linear_config(M, N, K, wgmma=wgmma, max_shared=max_shared)
    if max_shared is None:
        max_shared = (gpu_facts(torch.device("cuda", torch.cuda.current_device()))[2]
                      if torch.cuda.is_available() else (227 if wgmma else 163) * 1024)
    thin = dict(THIN_CONFIG)
    if M <= SPLIT_K_MAX_M:
        tiles = [dict(thin, splits=s) for s in (1, 2, 4, 8)]
        tiles += [dict(thin, num_stages=6, splits=1), dict(thin, block_N=128, num_stages=3, splits=1),
                  dict(thin, block_N=128, num_stages=3, splits=2), dict(thin, block_K=128, num_stages=3, splits=1)]
    else:
        big = dict(TILED_CONFIG, splits=1)
        # Four stages leave no room for the staged output tile.
        tiles = [dict(big, num_stages=s, panel_size=p, stage_c=s == 3) for s in (3, 4) for p in (4, 8, 16)]
        tiles += [dict(big, block_K=32, num_stages=s, stage_c=False) for s in (4, 6)]
        tiles += [dict(big, block_M=256, block_N=64), dict(big, block_N=64, threads=128),
                  dict(big, block_M=64, threads=128), dict(thin, panel_size=8, splits=1)]

    def usable(t):
        steps = -(-K // t["block_K"])
        fits = shared_bytes(t) <= max_shared - 1024
        return fits and (t["splits"] - 1) * -(-steps // t["splits"]) < steps   # no empty slice

    return [chosen] + [t for t in tiles if usable(t) and t != chosen]


def _jits(program):
    """mma_sync -> the jit object of `program`, held to mma.sync when True."""
    return {mma: tegula.jit(out_idx=[-1], pass_configs=MMA_SYNC if mma else None)(program) for mma in (False, True)}


_TILED, _SPLIT_K = _jits(swiglu_linear_program), _jits(swiglu_linear_splitk_program)
swiglu_linear_kernel = _TILED[False]
swiglu_linear_splitk_kernel = _SPLIT_K[False]


@functools.lru_cache(maxsize=None)
def linear_kernel_for(N, K, dtype: torch.dtype, splits=1, mma_sync=False, **tile):
    """kernel(a (M, K), w_gate (N, K), w_up (N, K)) → c (M, N) for any M: the split-K
    program for splits > 1, else the one-kernel program, with `tile`'s arguments (a
    swiglu_linear_config without its `splits`). mma_sync holds the GEMMs to mma.sync
    even where wgmma exists."""
    if splits > 1:
        tile = {key: value for key, value in tile.items() if key != "panel_size"}
        return _SPLIT_K[mma_sync](N, K, splits, dtype=dtype_name(dtype), **tile)
    return _TILED[mma_sync](N, K, dtype=dtype_name(dtype), **tile)


def _weights(op, x, w_gate, w_up):
    """(N, gate, up): the output width and the two (N, K) weights as the kernel reads them,
    after the checks of shapes (x's and the weights' types and dtypes come first). One
    weight (2N, K) is cut into its two halves, views read in place."""
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension (..., K), got {describe(x)}")
    K = x.shape[-1]
    if w_up is None:
        check_rank(op, "w_gate", w_gate, 2, "2I, K: the gate rows, then the up rows")
        if w_gate.shape[0] % 2 or w_gate.shape[1] != K:
            raise ValueError(f"{op}: a single weight must have shape (2I, {K}): I gate rows, then I up rows, "
                             f"each of the {K} columns of x; got {describe(w_gate)}")
        n = w_gate.shape[0] // 2
        return n, w_gate[:n], w_gate[n:]
    check_rank(op, "w_gate", w_gate, 2, "I, K")
    if w_gate.shape[1] != K:
        raise ValueError(f"{op}: w_gate must have shape (I, {K}) (nn.Linear's weight: a row of the {K} columns "
                         f"of x for each output), got {describe(w_gate)}")
    if w_up.shape != w_gate.shape:
        raise ValueError(f"{op}: w_up must have the shape {tuple(w_gate.shape)} of w_gate, got {describe(w_up)}")
    return w_gate.shape[0], w_gate, w_up


def check_swiglu_linear_args(op, x, w_gate, w_up):
    """The arguments of swiglu_linear (its operator's fake checks them too); returns
    `_weights`'s (N, gate, up)."""
    check_tensor(op, "x", x, dtypes=HALF_DTYPES)
    check_tensor(op, "w_gate", w_gate, dtypes=HALF_DTYPES, like=x)
    if w_up is not None:
        check_tensor(op, "w_up", w_up, dtypes=HALF_DTYPES, like=x)
    n, gate, up = _weights(op, x, w_gate, w_up)
    check_devices(op, ("x", x), ("w_gate", w_gate), *(() if w_up is None else (("w_up", w_up),)))
    return n, gate, up


def swiglu_linear(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor | None = None) -> torch.Tensor:
    """silu(x @ w_gateᵀ) * (x @ w_upᵀ) in one GEMM kernel (two for decode shapes that run
    split-K), the activation applied to the float32 products and rounded once.

    x (..., K): the leading dimensions flatten into rows. w_gate, w_up (I, K): nn.Linear
    weights (gate_proj.weight, up_proj.weight), read in place; or w_gate alone (2I, K), the
    gate rows first, then the up rows (a fused gate_up_proj.weight). Result (..., I) in x's
    dtype. CUDA float16/bfloat16, one dtype. Strided or misaligned operands are copied
    first (so is a half of a single weight whose rows of I x K elements do not end on a
    16-byte boundary). An empty extent gives torch's result (K = 0: zeros). NaN and inf
    propagate as in torch.
    """
    op = "swiglu_linear"
    n, gate, up = check_swiglu_linear_args(op, x, w_gate, w_up)
    K = x.shape[-1]
    shape = (*x.shape[:-1], n)
    m = math.prod(x.shape[:-1])
    if m == 0 or n == 0 or K == 0:
        return torch.zeros(shape, dtype=x.dtype, device=x.device)
    a = launchable(x).view(m, K)
    config = swiglu_linear_config(m, n, K, *gpu_facts(x.device))
    c = linear_kernel_for(n, K, x.dtype, **config)(a, launchable(gate), launchable(up))
    return c.view(shape)
