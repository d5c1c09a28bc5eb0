"""The backward of kernels/gemm.py's matmul.

For C = act(Z), Z = A @ B [+ bias], with dC given:
    dZ = dC * act'(.)          relu: from the forward's output C; gelu: from Z, recomputed
    dA = dZ @ Bᵀ  (M, K)       NT: B (K, N) is read as Bᵀ in place (trans_b)
    dB = Aᵀ @ dZ  (K, N)       TN: A (M, K) is read as Aᵀ in place (trans_a)
    dbias = dZ's column sums   fp32 sums, rounded once
dZ and dbias come from one pass over dC (`activation_grad_program`): it writes dZ and
sums the very values it wrote, as torch sums its rounded dZ.

Kernel choice: each GEMM goes through kernel_for with its own (M, N, K), so the forward's
rules apply unchanged. dA has the forward's rows (tokens) and K of the hidden size; a
decode-shaped dA (M <= 64) runs split-K exactly like the forward. dB's inner extent is
the token count: usually large (a long, well-pipelined loop over output tiles the size of
the weight), but for a decode step it is a few tokens, and dB is an outer product whose
time is storing C. There a deep pipeline only takes shared memory (one or two k steps
fill no stages), so `backward_config` holds the pipeline to the steps there are and
uses the 128 x 128 tile of one warpgroup, which keeps more blocks per SM storing at once.
"""
import functools

import torch

import tegula
import tegula.language as T

from . import gemm
from ._common import check_grad_devices, check_rank, describe, dtype_name, launchable, sm_count
from .gemm import HALF_DTYPES, SPLIT_K_BLOCKS_PER_SM, SPLIT_K_MAX_M, _default_sms, _stored

GRAD_TILE = dict(block_M=32, block_N=256, threads=256)
GRAD_MIN_ROW_TILES = 8      # row tiles a slice of the column sums keeps at least
SHORT_K_STEPS = 2           # block_K steps up to which a backward GEMM counts as an outer product


@T.macro
def activation_derivative(dc, saved, dz, rows, cols, act, dtype):
    """dz = dc * act'(saved), computed in fp32 and rounded once, as torch's backward does.
    relu: saved is the forward's output, and the gradient passes where it is not <= 0 (so
    a NaN output passes it, as torch's threshold_backward does). gelu (tanh form): saved is
    the pre-activation x; with t = tanh(u), u = k (x + 0.044715 x³), k = sqrt(2/pi),
    gelu'(x) = (1 + t) / 2 + x (1 - t²) k (1 + 3 · 0.044715 x²) / 2."""
    for i, j in T.Parallel(rows, cols):
        g = T.cast(dc[i, j], "float32")
        x = T.cast(saved[i, j], "float32")
        if act == "relu":
            dz[i, j] = T.cast(T.if_then_else(x <= 0.0, 0.0, g), dtype)
        if act == "gelu":
            u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
            t = 1.0 - 2.0 / (T.exp(2.0 * u) + 1.0)  # tanh(u), +-1 where exp overflows or vanishes
            d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x * x)
            dz[i, j] = T.cast(g * d, dtype)


def activation_grad_program(M, N, activation, bias_grad, splits, dtype="float16", block_M=32, block_N=256,
                            threads=256, combine_N=256, combine_threads=128):
    """DC (M, N), Saved (M, N) -> DZ (M, N) = DC * act'(Saved) (relu: Saved is the forward's
    output; gelu: the pre-activation), and with bias_grad DBias (N,) = DZ's column sums
    (DC's for activation "none", which writes no DZ and reads no Saved: pass DC for both).

    One block per (block_N columns, slice of rows); a block walks its slice's block_M-row
    tiles, writes each dZ tile and adds it into an fp32 tile, which it reduces over rows
    at the end. With splits > 1 the slices' sums go to a workspace (splits, N) and a second
    kernel adds them in slice order (the result does not depend on block scheduling).
    Ragged edges are masked by the copies: rows past M load as zero and add nothing."""
    if activation not in ("none", "relu", "gelu"):
        raise ValueError(f"activation_grad_program: activation must be 'none', 'relu' or 'gelu', got {activation!r}")
    if activation == "none" and not bias_grad:
        raise ValueError("activation_grad_program: activation 'none' without bias_grad computes nothing")
    row_tiles = -(-M // block_M)
    per_slice = -(-row_tiles // splits) if splits >= 1 else 0
    if splits < 1 or (splits - 1) * per_slice >= row_tiles:
        raise ValueError(f"activation_grad_program: splits must leave every slice at least one of the {row_tiles} "
                         f"block_M={block_M} row tiles of M={M}, got splits={splits}")
    act = activation

    @T.prim_func
    def activation_grad(DC: T.Tensor((M, N), dtype), Saved: T.Tensor((M, N), dtype), DZ: T.Tensor((M, N), dtype),
                        DBias: T.Tensor((N,), dtype)):
        Partial = T.alloc_global((splits, N), "float32")
        with T.Kernel(T.ceildiv(N, block_N), splits, threads=threads) as (bx, bz):
            dc = T.alloc_fragment((block_M, block_N), dtype)
            saved = T.alloc_fragment((block_M, block_N), dtype)
            dz = T.alloc_fragment((block_M, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            sums = T.alloc_fragment((block_N,), "float32")
            T.clear(acc)
            first = bz * per_slice
            # The last slice may be shorter when the tiles do not divide evenly.
            for r in T.serial(T.min(per_slice, row_tiles - first)):
                T.copy(DC[(first + r) * block_M, bx * block_N], dc)
                if act == "none":
                    for i, j in T.Parallel(block_M, block_N):
                        acc[i, j] += T.cast(dc[i, j], "float32")
                else:
                    T.copy(Saved[(first + r) * block_M, bx * block_N], saved)
                    activation_derivative(dc, saved, dz, block_M, block_N, act, dtype)
                    T.copy(dz, DZ[(first + r) * block_M, bx * block_N])
                    if bias_grad:
                        for i, j in T.Parallel(block_M, block_N):
                            acc[i, j] += T.cast(dz[i, j], "float32")
            if bias_grad:
                T.reduce_sum(acc, sums, dim=0)
                if splits == 1:
                    T.copy(sums, DBias[bx * block_N])
                else:
                    T.copy(sums, Partial[bz, bx * block_N:(bx + 1) * block_N])

        if bias_grad and splits > 1:
            with T.Kernel(T.ceildiv(N, combine_N), threads=combine_threads) as bx:
                part = T.alloc_fragment((combine_N,), "float32")
                total = T.alloc_fragment((combine_N,), "float32")
                T.clear(total)
                for s in T.serial(splits):
                    T.copy(Partial[s, bx * combine_N:(bx + 1) * combine_N], part)
                    for j in T.Parallel(combine_N):
                        total[j] += part[j]
                T.copy(total, DBias[bx * combine_N])

    return activation_grad


# The outputs are passed in (DZ, DBias), so no out_idx.
activation_grad_kernel = tegula.jit(activation_grad_program)


def grad_row_splits(M, N, sms, block_M=32, block_N=256):
    """How many row slices `activation_grad_program` cuts dC into: the count that brings
    column tiles x slices nearest to two blocks per SM, each slice keeping at least
    GRAD_MIN_ROW_TILES row tiles, then lowered to the least count with the same slice
    length. 8192 x 4096 on 132 SMs: 16 column tiles, 256 row tiles -> 17 wanted, whose
    slices of 16 tiles make 16; 64 x 4096: 2 row tiles -> 1."""
    col_tiles = -(-N // block_N)
    row_tiles = -(-M // block_M)
    splits = min((SPLIT_K_BLOCKS_PER_SM * sms + col_tiles // 2) // col_tiles, row_tiles // GRAD_MIN_ROW_TILES)
    if splits < 2:
        return 1
    per_slice = -(-row_tiles // splits)
    return -(-row_tiles // per_slice)


@functools.lru_cache(maxsize=None)
def activation_grad_kernel_for(M, N, dtype: torch.dtype, activation, bias_grad, sms=None):
    splits = grad_row_splits(M, N, _default_sms() if sms is None else sms, GRAD_TILE["block_M"],
                             GRAD_TILE["block_N"])
    return activation_grad_kernel(M, N, activation, bool(bias_grad), splits, dtype=dtype_name(dtype), **GRAD_TILE)


def backward_config(M, N, K):
    """kernel_for's tile overrides for a backward GEMM of output (M, N) and inner extent K
    (after padding): none, except for an outer product (see the note above)."""
    k_steps = -(-K // 64)
    if M > SPLIT_K_MAX_M and k_steps <= SHORT_K_STEPS:
        return dict(block_M=128, block_N=128, block_K=64, num_stages=k_steps, threads=128, panel_size=4)
    return {}


def _product(x, y, bias, sms):
    """x (M, K) @ y (K, N) [+ bias] in x's dtype, for extents > 0, on `sms` SMs; each operand
    read in place where its layout allows (`_stored`), padded as `_aligned_operands` decides."""
    M, N = x.shape[0], y.shape[1]
    a, trans_a = _stored(x)
    b, trans_b = _stored(y)
    a, b, K, layout = gemm._aligned_operands(a, b, trans_a, trans_b)
    dummy = launchable(bias) if bias is not None else x.new_empty(N)
    kernel = gemm.kernel_for(M, N, K, x.dtype, "none" if bias is None else "bias", sms=sms,
                        **layout, **backward_config(M, N, K))
    return kernel(a, b, dummy)


def _grad_operand(op, name, t, like, shape, what):
    """A backward argument: a tensor of like's dtype (like None: fp16/bf16) of `shape`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor ({what}), got {describe(t)}")
    if like is None and t.dtype not in HALF_DTYPES:
        raise ValueError(f"{op}: {name} must be a float16/bfloat16 tensor, got {describe(t)}")
    if like is not None and t.dtype != like.dtype:
        raise ValueError(f"{op}: {name} must be a {str(like.dtype).replace('torch.', '')} tensor (the dtype of a), "
                         f"got {describe(t)}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} must have shape {tuple(shape)} ({what}), got {describe(t)}")


def check_matmul_backward_args(op, dc, a, b, bias_needed, activation, c, bias, needs):
    """The arguments of matmul_backward, in the entry points' order (types and dtypes, shapes,
    devices); returns (M, K, N) and needs as three bools."""
    _grad_operand(op, "a", a, None, None, "the forward's a")
    check_rank(op, "a", a, 2, "M, K")
    M, K = a.shape
    _grad_operand(op, "b", b, a, None, "the forward's b")
    check_rank(op, "b", b, 2, "K, N")
    if b.shape[0] != K:
        raise ValueError(f"{op}: b must have shape ({K}, N) (its rows matching the columns of a), got {describe(b)}")
    N = b.shape[1]
    _grad_operand(op, "dc", dc, a, (M, N), "the gradient of the output")
    if not isinstance(activation, str) or activation not in ("none", "relu", "gelu"):
        raise ValueError(f"{op}: activation must be 'none', 'relu' or 'gelu', got {activation!r}")
    if not isinstance(bias_needed, bool):
        raise TypeError(f"{op}: bias_needed must be a bool (whether the forward added a bias), got {bias_needed!r}")
    if not (isinstance(needs, (tuple, list)) and len(needs) == 3 and all(isinstance(n, bool) for n in needs)):
        raise ValueError(f"{op}: needs must be three bools (whether da, db and dbias are wanted), got {needs!r}")
    named = [("a", a), ("b", b), ("dc", dc)]
    if activation == "relu":
        if c is None:
            raise ValueError(f"{op}: activation 'relu' needs c, the forward's output (its sign gates the gradient)")
        _grad_operand(op, "c", c, a, (M, N), "the forward's output")
        named.append(("c", c))
    if activation == "gelu" and bias_needed:
        if bias is None:
            raise ValueError(f"{op}: activation 'gelu' with a bias needs bias, the forward's bias, to recompute the "
                             f"pre-activation a @ b + bias")
        _grad_operand(op, "bias", bias, a, (N,), "the forward's bias")
        named.append(("bias", bias))
    check_grad_devices(op, named)
    return M, K, N, tuple(needs)


def _empty_backward(dc, a, b, bias, activation, c, need_a, need_b, need_bias):
    """torch's gradients when an extent is 0: da and db are products with an empty inner
    extent or empty themselves (zeros); dbias needs dZ only when K = 0, where Z is the bias
    (or 0) in every row, computed in float32."""
    M, K = a.shape
    N = b.shape[1]
    da = a.new_zeros((M, K)) if need_a else None
    db = a.new_zeros((K, N)) if need_b else None
    if not need_bias:
        return da, db, None
    g = dc.float()
    if activation == "relu":
        g = torch.where(c.float() <= 0, torch.zeros_like(g), g)
    elif activation == "gelu":
        z = (bias.float() if bias is not None else g.new_zeros(N)).expand(M, N)
        g = torch.ops.aten.gelu_backward(g, z, approximate="tanh")
    return da, db, g.to(a.dtype).float().sum(0).to(a.dtype)


def matmul_backward(dc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias_needed: bool, activation: str = "none",
                    c: torch.Tensor | None = None, *, bias: torch.Tensor | None = None, needs=(True, True, True)):
    """The gradients of c = matmul(a, b, bias, activation) for the output's gradient dc:
    (da (M, K), db (K, N), dbias (N,)), each in a's dtype, None where not wanted.

    bias_needed: whether the forward added a bias (dbias is returned only then). activation:
    the forward's; "relu" needs c (the forward's output), "gelu" recomputes the
    pre-activation a @ b [+ bias] and so needs bias (the forward's) when bias_needed.
    needs: (da, db, dbias) wanted, as autograd's needs_input_grad; a GEMM not wanted is not
    run. Tensors of any strides (dc may be a stride-0 expansion); the forward's checks are
    not repeated, and grad mode is not consulted. dbias sums dZ in fp32 and rounds once;
    dA and dB accumulate in fp32 on tensor cores as the forward does."""
    op = "matmul_backward"
    M, K, N, needs = check_matmul_backward_args(op, dc, a, b, bias_needed, activation, c, bias, needs)
    return _backward(dc, a, b, bias_needed, activation, c, bias, needs, sm_count(a.device))


def _backward(dc, a, b, bias_needed, activation, c, bias, needs, sms):
    """matmul_backward past its checks, on a GPU of `sms` SMs."""
    M, K = a.shape
    N = b.shape[1]
    need_a, need_b, need_bias = needs[0], needs[1], needs[2] and bias_needed
    if not (need_a or need_b or need_bias):
        return None, None, None
    if M == 0 or N == 0 or K == 0:
        return _empty_backward(dc, a, b, bias if bias_needed else None, activation, c, need_a, need_b, need_bias)
    dbias = a.new_empty(N) if need_bias else None
    dz = dc
    if activation != "none" or need_bias:
        dz = dc = launchable(dc)
        if activation == "none":
            saved = out = dc          # read as dC only; nothing is written there
        else:
            saved = launchable(c) if activation == "relu" else _product(a, b, bias if bias_needed else None, sms)
            out = dz = torch.empty((M, N), dtype=a.dtype, device=a.device)
        kernel = activation_grad_kernel_for(M, N, a.dtype, activation, need_bias, sms)
        kernel(dc, saved, out, dbias if need_bias else a.new_empty(N))
    da = _product(dz, b.t(), None, sms) if need_a else None    # NT: b (K, N) read as bᵀ (N, K) in place
    db = _product(a.t(), dz, None, sms) if need_b else None    # TN: a (M, K) read as aᵀ (K, M) in place
    return da, db, dbias
