"""What the attention kernels share: one key block of the online softmax, as a T.macro,
and the argument checks of their entry points.

NaN and inf take the IEEE path of the float32 softmax torch computes: T.reduce_max keeps a
NaN, so a NaN score (a NaN in the query row) makes the row max, the denominator and so the
row's output NaN; a +inf score makes its own probability inf - inf = NaN. Masked scores are
-inf and never NaN, so masking cannot start that. The callers tell a row that saw no key
(denominator exactly 0, output 0) from a NaN one by testing `logsum == 0`, not `> 0`.

Given the scores of a key block in acc_s (rows x cols, float32, already masked), it folds
their row maxima into scores_max, rescales the output accumulator and the running
denominator by exp2((old max - new max) * scale), and leaves the probabilities
P = exp2(S * scale - max * scale) in acc_s_cast, ready for `T.gemm(acc_s_cast, V, acc_o)`.
`scale` carries log2(e), so exp2 is exp. The maxima are subtracted before scaling: equal
maxima (a row that has seen no key yet, still at its -1e30 start) must give exactly 1,
which `m_prev * scale - m * scale` would not once compiled to a fused multiply-add.
With rescale_output=False the output accumulator is left alone: the caller rescales it by
scores_scale itself (FlashAttention-3's schedule does it a stage later, kernels/flash_attention.py).
"""
import math

import torch

import tegula.language as T

from ._common import check_rank, check_tensor, describe, refuse_grad


@T.macro
def online_softmax(acc_s, acc_s_cast, acc_o, scores_max, scores_max_prev, scores_scale, scores_sum, logsum,
                   scale, rows, cols, dim, rescale_output=True):
    T.copy(scores_max, scores_max_prev)
    T.reduce_max(acc_s, scores_max, dim=1, clear=False)
    for i in T.Parallel(rows):
        scores_scale[i] = T.exp2((scores_max_prev[i] - scores_max[i]) * scale)
    if rescale_output:
        for i, j in T.Parallel(rows, dim):
            acc_o[i, j] *= scores_scale[i]
    for i, j in T.Parallel(rows, cols):
        acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
    T.reduce_sum(acc_s, scores_sum, dim=1)
    for i in T.Parallel(rows):
        logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
    T.copy(acc_s, acc_s_cast)


def check_operand(op, name, t, ndim, layout=""):
    """t is a float16/bfloat16 tensor with `ndim` dimensions (any strides: the entry points
    copy what the kernels cannot read in place; devices are checked last)."""
    check_tensor(op, name, t, dtypes=(torch.float16, torch.bfloat16))
    check_rank(op, name, t, ndim, layout)


def check_like_q(op, name, t, q):
    refuse_grad(op, name, t)
    if t.dtype != q.dtype:
        raise ValueError(f"{op}: {name} must have q's dtype {str(q.dtype).replace('torch.', '')}, "
                         f"got {describe(t)}")


def check_heads(op, heads, kv_heads, dim, kv_names, kv_heads_of):
    """Head dim a multiple of 16 up to 256; query heads a multiple of the KV heads (GQA);
    no heads at all only on both sides."""
    if dim % 16 != 0 or dim > 256:
        raise ValueError(f"{op}: the head dimension (last dimension of q, {kv_names}) must be a multiple of 16 "
                         f"up to 256, got {dim}")
    if (kv_heads == 0 and heads != 0) or (kv_heads != 0 and heads % kv_heads != 0):
        raise ValueError(f"{op}: the heads of q ({heads}) must be a multiple of the heads of {kv_heads_of} ({kv_heads})")


def check_sm_scale(op, sm_scale):
    if sm_scale is not None and (isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float))
                                 or not 0 < sm_scale < math.inf):
        raise ValueError(f"{op}: sm_scale must be None or a positive finite number, got {sm_scale!r}")


def check_kv_scale(op, kv_scale, fp8_cache):
    """The dequantization scale of an FP8 KV cache: None (1.0) or a positive finite Python
    number (a float, so the op's schema and the kernel's scalar parameter take it as it
    is; a tensor would cost a device-to-host read each call). A 16-bit cache takes none:
    ignoring a scale the caller means to apply would be silently wrong."""
    if kv_scale is None:
        return
    if not fp8_cache:
        raise ValueError(f"{op}: kv_scale applies to a float8_e4m3fn kv_cache only; pass None with a 16-bit "
                         f"cache, got {kv_scale!r}")
    if isinstance(kv_scale, bool) or not isinstance(kv_scale, (int, float)):
        raise TypeError(f"{op}: kv_scale must be None or a Python float, got {type(kv_scale).__name__} "
                        f"{kv_scale!r}" + (" (pass float(t) for a one-element tensor)"
                                           if isinstance(kv_scale, torch.Tensor) else ""))
    if not 0 < kv_scale < math.inf:
        raise ValueError(f"{op}: kv_scale must be a positive finite number, got {kv_scale!r}")


def check_num_split(op, num_split):
    if num_split is not None and (isinstance(num_split, bool) or not isinstance(num_split, int) or num_split < 1):
        raise ValueError(f"{op}: num_split must be None or a positive int, got {num_split!r}")


def check_flag(op, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool, got {value!r}")
