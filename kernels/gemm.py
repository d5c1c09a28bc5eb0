"""Matrix multiplication on tensor cores, written the TileLang way:

    C = epilogue(A @ B [+ bias])      A (M, K), B (K, N), fp16 or bf16, fp32 accumulation

The block tile goes through shared memory; T.gemm lowers to wgmma on sm_90a (reading the
swizzled tiles straight from shared memory) and to ldmatrix + mma.sync elsewhere. Ragged
M, N and K are masked by the copies (loads past the edge give zero, stores are skipped);
rows whose stride is not a multiple of 8 elements are loaded with narrower accesses.
"""
import functools

import torch

import tegula
import tegula.language as T

from ._common import check_devices, check_rank, check_tensor, describe, dtype_name, launchable, wgmma_gpu

EPILOGUES = ("none", "relu", "gelu", "bias", "bias_relu", "bias_gelu")


def matmul_program(M, N, K, block_M=128, block_N=128, block_K=64, num_stages=3, threads=128,
                   dtype="float16", accum_dtype="float32", epilogue="none", ldb=None, panel_size=4):
    """ldb: B's row length when its rows are padded past N (matmul() pads rows that would
    break 16-byte alignment); columns N..ldb are never stored. panel_size: T.use_swizzle's
    rasterisation panel, in tiles."""
    ldb = N if ldb is None else ldb
    has_bias = epilogue.startswith("bias")
    act = epilogue.replace("bias_", "").replace("bias", "none")

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
            for i, j in T.Parallel(block_M, block_N):
                v = C_local[i, j]
                if has_bias:
                    v = v + T.cast(Bias[bx * block_N + j], accum_dtype)
                if act == "relu":
                    v = T.max(v, 0.0)
                if act == "gelu":
                    u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
                    v = 0.5 * v * (2.0 - 2.0 / (T.exp(2.0 * u) + 1.0))  # 1 + tanh(u)
                C_local[i, j] = v
            T.copy(C_local, C[by * block_M, bx * block_N])

    return gemm


matmul_kernel = tegula.jit(out_idx=[-1])(matmul_program)
# The same program held to mma.sync on sm_90a too (for comparing the two paths).
matmul_kernel_mma_sync = tegula.jit(out_idx=[-1], pass_configs={tegula.PassConfigKey.TL_DISABLE_WGMMA: True})(
    matmul_program)


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


@functools.lru_cache(maxsize=None)
def kernel_for(M, N, K, dtype: torch.dtype, epilogue="none", mma_sync=False, **config):
    """The kernel for this shape: default_config's tile unless config overrides it; with
    mma_sync, held to mma.sync (and that path's default tile) even where wgmma exists."""
    cfg = default_config(M, N, K, wgmma=False if mma_sync else None)
    cfg.update(config)
    jit = matmul_kernel_mma_sync if mma_sync else matmul_kernel
    return jit(M, N, K, dtype=dtype_name(dtype), epilogue=epilogue, **cfg)


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


def matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"):
    """a (M, K) @ b (K, N) [+ bias (N,)], then an optional activation ("relu", "gelu": the
    tanh form). CUDA float16/bfloat16; strided or misaligned views are copied first; empty
    extents give torch's result. NaN and inf propagate as in torch (relu keeps a NaN)."""
    op = "matmul"
    M, K, N = _check_operands(op, a, b)
    if not isinstance(activation, str) or activation not in ("none", "relu", "gelu"):
        raise ValueError(f"{op}: activation must be 'none', 'relu' or 'gelu', got {activation!r}")
    if bias is not None:
        check_tensor(op, "bias", bias, dtypes=HALF_DTYPES, like=a, like_name="a")
        if tuple(bias.shape) != (N,):
            raise ValueError(f"{op}: bias must have shape ({N},), got {describe(bias)}")
    check_devices(op, ("a", a), ("b", b), *((("bias", bias),) if bias is not None else ()))
    if M == 0 or N == 0 or K == 0:
        return _empty_product(a, M, N, bias, activation)
    epilogue = activation if bias is None else ("bias" if activation == "none" else "bias_" + activation)
    dummy = launchable(bias) if bias is not None else a.new_empty(N)
    a, b, K, ldb = _aligned_operands(launchable(a), launchable(b))
    return kernel_for(M, N, K, a.dtype, epilogue, ldb=ldb)(a, b, dummy)


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
