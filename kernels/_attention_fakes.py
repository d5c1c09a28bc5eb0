"""What the attention operators return on meta tensors (torch.library's fake
implementations, registered by kernels/_ops.py): each checks its arguments as the entry
point does, then gives outputs of the right shape and dtype without computing."""
from __future__ import annotations

import torch

from . import flash_attention as _fa, flash_decoding as _fd, mla_decode as _mla


def _flash_attention_fake(q, k, v, causal, window, layout, sm_scale):
    _fa.check_flash_attention_args("flash_attention", q, k, v, causal, window, layout, sm_scale)
    if layout == "bshd":
        B, Sq, H = q.shape[0], q.shape[1], q.shape[2]
    else:
        B, H, Sq = q.shape[0], q.shape[1], q.shape[2]
    return (torch.empty_like(q, memory_format=torch.contiguous_format),
            q.new_empty((B, H, Sq), dtype=torch.float32))


def _flash_attention_backward_fake(dout, q, k, v, out, lse, dlse, causal, window, layout, sm_scale):
    from .flash_attention_bwd import check_flash_attention_backward_args

    check_flash_attention_backward_args(dout, q, k, v, out, lse, causal, window, layout, sm_scale, dlse)
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _flash_decode_fake(q, k_cache, v_cache, cache_seqlens, sm_scale, num_split, check_indices=None):
    _fd.check_flash_decode_args("flash_decode", q, k_cache, v_cache, cache_seqlens, sm_scale, num_split)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _mla_decode_fake(q, kv_cache, cache_seqlens, block_table, sm_scale, num_split, check_indices=None,
                     kv_scale=None):
    _mla.check_mla_decode_args("mla_decode", q, kv_cache, cache_seqlens, block_table, sm_scale, num_split,
                               kv_scale)
    B, H = q.shape[0], q.shape[1]
    return q.new_empty((B, H, _mla.DIM)), q.new_empty((B, H), dtype=torch.float32)
