"""FlashAttention backward (tegula.kernels.flash_attention_bwd) against torch autograd of
float32 attention with an explicit mask, on the GPU.

The forward is ours (flash_attention with return_lse=True); the reference differentiates
softmax(q kᵀ · scale + mask) v in float32 from the same rounded inputs, with the
forward's mask (offset = Skv - Sq):

    visible(i, j) = (not causal or j <= i + offset) and (window is None or j > i + offset - window)

Gradients are compared by relative Frobenius error (<= 1e-2 fp16, 2e-2 bf16). Outputs land
in memory the caching allocator last held NaN in, so an element the kernels never write
shows up. A query that sees no key must get dq = 0, not NaN.
"""
import importlib
import math

import pytest
import torch

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import dtype_id, randn, rel_err, seed_of
except ImportError:
    from _util import dtype_id, randn, rel_err, seed_of

pytestmark = pytest.mark.gpu

fa = importlib.import_module("tegula.kernels.flash_attention")
bw = importlib.import_module("tegula.kernels.flash_attention_bwd")

FP16, BF16 = torch.float16, torch.bfloat16
GRAD_TOL = {FP16: 1e-2, BF16: 2e-2}


def _poison_allocator(*shapes):
    """Fills and frees blocks of these sizes, so that the next allocations of them (the
    kernels' outputs and workspaces) start as NaN rather than as zeros or old results."""
    blocks = [torch.full(s, float("nan"), dtype=torch.float32, device="cuda") for s in shapes]
    torch.cuda.synchronize()
    del blocks


def reference_grads(q, k, v, do, causal, window, layout, sm_scale=None):
    """(dq, dk, dv) in float32 by autograd of masked attention, in q/k/v's layout."""
    if layout == "bshd":
        q, k, v, do = (t.transpose(1, 2) for t in (q, k, v, do))
    q, k, v = (t.float().requires_grad_() for t in (q, k, v))
    H, Hkv, Sq, Skv, D = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    group = H // Hkv
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ kk.transpose(-1, -2) * (sm_scale if sm_scale is not None else 1 / math.sqrt(D))
    i = torch.arange(Sq, device=q.device)[:, None]
    j = torch.arange(Skv, device=q.device)[None, :]
    visible = torch.ones(Sq, Skv, dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= i + Skv - Sq
    if window:
        visible &= j > i + Skv - Sq - window
    scores = scores.masked_fill(~visible, -math.inf)
    p = torch.softmax(scores, -1).nan_to_num(0.0)      # a row with no key: all zero
    dq, dk, dv = torch.autograd.grad(p @ vv, (q, k, v), do.float())
    if layout == "bshd":
        dq, dk, dv = (t.transpose(1, 2) for t in (dq, dk, dv))
    return dq, dk, dv


def _inputs(B, H, Hkv, Sq, Skv, D, layout, dtype, seed):
    q_shape = (B, Sq, H, D) if layout == "bshd" else (B, H, Sq, D)
    kv_shape = (B, Skv, Hkv, D) if layout == "bshd" else (B, Hkv, Skv, D)
    return [randn(s, dtype, seed + n) for n, s in enumerate((q_shape, kv_shape, kv_shape, q_shape))]


def _check(B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype, sm_scale=None, do_view=None, **config):
    q, k, v, do = _inputs(B, H, Hkv, Sq, Skv, D, layout, dtype, seed_of(B, H, Hkv, Sq, Skv, D, causal, window,
                                                                        layout, dtype_id(dtype)))
    if do_view is not None:
        do = do_view(do)
    out, lse = fa.flash_attention(q, k, v, causal=causal, window=window, layout=layout, sm_scale=sm_scale,
                                  return_lse=True)
    _poison_allocator(q.shape, k.shape, k.shape, (B, H, Sq + 128, D))
    dq, dk, dv = bw.flash_attention_backward(do, q, k, v, out, lse, causal=causal, window=window, layout=layout,
                                             sm_scale=sm_scale, **config)
    want = reference_grads(q, k, v, do, causal, window, layout, sm_scale)
    problems = []  # what differs from autograd; empty when dq, dk, dv all match
    for name, got, ref, like in (("dq", dq, want[0], q), ("dk", dk, want[1], k), ("dv", dv, want[2], v)):
        if got.shape != like.shape or got.dtype != like.dtype:
            problems.append(f"{name}: {got.dtype} {tuple(got.shape)}")
        elif torch.isnan(got).any():
            problems.append(f"{name} has NaN (unwritten elements?)")
        elif rel_err(got, ref) > GRAD_TOL[dtype]:
            problems.append(f"{name}: relative error {rel_err(got, ref):.3e} > {GRAD_TOL[dtype]:.0e}")
    return problems, q, lse, dq


# (B, H, Hkv, Sq, Skv, D, causal, window, layout)
CASES = [
    (2, 4, 4, 512, 512, 64, False, None, "bshd"),           # aligned, full
    (2, 4, 4, 512, 512, 128, True, None, "bhsd"),           # aligned, causal
    (1, 4, 4, 1000, 1000, 128, False, None, "bshd"),        # ragged, full
    (1, 4, 2, 777, 1000, 64, True, None, "bhsd"),           # Sq < Skv, GQA
    (1, 8, 2, 1000, 777, 128, True, None, "bshd"),          # Sq > Skv: queries that see no key, GQA 4
    (1, 4, 4, 1000, 1000, 64, True, 128, "bshd"),           # sliding window
    (1, 4, 1, 1000, 777, 128, True, 200, "bhsd"),           # window, Sq > Skv, MQA
    (2, 2, 2, 300, 300, 32, True, None, "bshd"),            # a head dimension other than 64/128
]


@pytest.mark.parametrize("dtype", [FP16, BF16], ids=dtype_id)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_backward_matches_autograd(case, dtype):
    B, H, Hkv, Sq, Skv, D, causal, window, layout = case
    problems, q, lse, dq = _check(B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype)
    assert not problems, problems
    blind = torch.isinf(lse)                        # (B, H, Sq): queries that saw no key
    if blind.any():
        dq_bhsd = dq if layout == "bhsd" else dq.transpose(1, 2)
        assert (dq_bhsd[blind] == 0).all(), "a query that saw no key has a nonzero gradient"


@pytest.mark.parametrize("path", ["auto", "legacy"])
def test_both_engine_paths_and_a_non_default_scale(path):
    problems, *_ = _check(1, 4, 2, 600, 600, 128, True, None, "bshd", FP16, sm_scale=0.05, path=path)
    assert not problems, problems


@pytest.mark.parametrize("config", bw.configs[1::3], ids=lambda c: "{block_M}x{block_N}-t{threads}-s{num_stages}".format(**c))
def test_sweep_configs_are_correct(config):
    problems, *_ = _check(1, 4, 2, 333, 517, 64, True, None, "bhsd", BF16, **config)
    assert not problems, problems


def test_grad_arriving_expanded_or_strided():
    """Autograd hands the backward grads of any strides: a broadcast (stride 0) one from a
    sum, a transposed one from a later op."""
    expanded, *_ = _check(1, 4, 4, 256, 256, 64, True, None, "bshd", FP16,
                          do_view=lambda do: do[:1, :1, :1].expand(do.shape))
    strided, *_ = _check(1, 4, 4, 256, 320, 128, False, None, "bhsd", FP16,
                         do_view=lambda do: do.transpose(2, 3).contiguous().transpose(2, 3))
    assert not expanded and not strided, (expanded, strided)


def test_empty_extents_give_zeros():
    q = torch.randn(1, 8, 2, 64, device="cuda", dtype=FP16)
    kv = torch.randn(1, 0, 2, 64, device="cuda", dtype=FP16)
    lse = torch.full((1, 2, 8), -math.inf, device="cuda")
    dq, dk, dv = bw.flash_attention_backward(torch.ones_like(q), q, kv, kv, torch.zeros_like(q), lse)
    assert dq.shape == q.shape and (dq == 0).all() and dk.shape == kv.shape and dv.shape == kv.shape
    q0 = torch.randn(1, 0, 2, 64, device="cuda", dtype=FP16)
    k = torch.randn(1, 16, 2, 64, device="cuda", dtype=FP16)
    dq, dk, dv = bw.flash_attention_backward(q0, q0, k, k.clone(), q0, torch.empty(1, 2, 0, device="cuda"))
    assert dq.shape == q0.shape and (dk == 0).all() and (dv == 0).all()
