"""What the attention kernels share: one key block of the online softmax, as a T.macro,
and the argument checks of their entry points.

Given the scores of a key block in acc_s (rows x cols, float32, already masked), it folds
their row maxima into scores_max, rescales the output accumulator and the running
denominator by exp2((old max - new max) * scale), and leaves the probabilities
P = exp2(S * scale - max * scale) in acc_s_cast, ready for `T.gemm(acc_s_cast, V, acc_o)`.
`scale` carries log2(e), so exp2 is exp. The maxima are subtracted before scaling: equal
maxima (a row that has seen no key yet, still at its -1e30 start) must give exactly 1,
which `m_prev * scale - m * scale` would not once compiled to a fused multiply-add.
"""
import torch

import tegula.language as T

from ._common import describe


@T.macro
def online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum, logsum,
                   scale, rows, cols, dim):
    T.copy(scores_max, scores_max_prev)
    T.reduce_max(acc_s, scores_max, dim=1, clear=False)
    for i in T.Parallel(rows):
        scores_scale[i] = T.exp2((scores_max_prev[i] - scores_max[i]) * scale)
    for i, j in T.Parallel(rows, dim):
        acc_o[i, j] *= scores_scale[i]
    for i, j in T.Parallel(rows, cols):
        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
    T.reduce_sum(acc_s, scores_sum, dim=1)
    for i in T.Parallel(rows):
        logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
    T.copy(acc_s, acc_s_cast)


def check_operand(op, name, t, ndim, layout=""):
    """t is a CUDA float16/bfloat16 tensor with `ndim` dimensions and a contiguous last one."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {describe(t)}")
    if t.device.type != "cuda" or t.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"{op}: {name} must be a CUDA tensor of float16/bfloat16, got {describe(t)}")
    if t.dim() != ndim:
        raise ValueError(f"{op}: {name} must be {ndim}-D{f' ({layout})' if layout else ''}, got {describe(t)}")
    if t.stride(-1) != 1:
        raise ValueError(f"{op}: the last dimension of {name} must be contiguous (stride 1), got {describe(t)}")


def check_like_q(op, name, t, q):
    if t.dtype != q.dtype or t.device != q.device:
        raise ValueError(f"{op}: {name} must have q's dtype and device ({q.dtype}, {q.device}), got {describe(t)}")


def check_heads(op, heads, kv_heads, dim, kv_names, kv_heads_of):
    """Head dim a multiple of 16 up to 256; query heads a multiple of the KV heads (GQA)."""
    if dim % 16 != 0 or dim > 256:
        raise ValueError(f"{op}: the head dimension (last dimension of q, {kv_names}) must be a multiple of 16 "
                         f"up to 256, got {dim}")
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"{op}: the heads of q ({heads}) must be a multiple of the heads of {kv_heads_of} ({kv_heads})")


def check_sm_scale(op, sm_scale):
    if sm_scale is not None and not sm_scale > 0:
        raise ValueError(f"{op}: sm_scale must be a positive number, got {sm_scale!r}")
