"""FlashAttention backward without a GPU: the three-kernel program compiles for sm_90a (all
five gemms on wgmma, Q/dO/lse/Δ by bulk copies in a warp-specialised loop, dQ by atomics)
and sm_80 (mma.sync, cp.async), and small shapes run through the reference interpreter
(the program as written) and the SIMT simulator (the lowered code) against torch autograd
of float64 attention with the forward's masks. The entry point's argument checks that need
no GPU run here too."""
import functools
import importlib
import math

import re

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")
import tegula.testing as tt  # noqa: E402
from tegula import registers  # noqa: E402

bw = importlib.import_module("tegula.kernels.flash_attention_bwd")

TARGETS = ["sm_90a", "sm_80"]
PASS_CONFIGS = dict(bw.flash_attention_bwd_kernel.settings["pass_configs"])

# name -> arguments of flash_attention_bwd_program at production sizes (tiles from default_config).
COMPILE_VARIANTS = {
    "d64-causal-bshd": dict(batch=2, heads=16, kv_heads=16, seq_q=4096, seq_kv=4096, dim=64, is_causal=True),
    "d128-full-bhsd": dict(batch=2, heads=32, kv_heads=32, seq_q=4096, seq_kv=4096, dim=128, layout="bhsd"),
    "d128-causal-gqa-ragged-bf16": dict(batch=2, heads=8, kv_heads=2, seq_q=1000, seq_kv=777, dim=128,
                                        is_causal=True, dtype="bfloat16"),
    "d64-window-gqa-bhsd": dict(batch=1, heads=8, kv_heads=2, seq_q=1000, seq_kv=1000, dim=64, is_causal=True,
                                window=128, layout="bhsd"),
}


@functools.lru_cache(maxsize=None)
def _compile(name, target):
    args = COMPILE_VARIANTS[name]
    cfg = bw.default_config(args["dim"], args.get("is_causal", False), wgmma=target == "sm_90a")
    kernel = tegula.compile(bw.flash_attention_bwd_program(**args, **cfg), out_idx=[7, 8, 9], target=target,
                            pass_configs=PASS_CONFIGS)
    return kernel, kernel.get_kernel_source()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(COMPILE_VARIANTS))
def test_backward_compiles_to_three_kernels_on_tensor_cores(name, target):
    kernel, src = _compile(name, target)
    assert kernel.num_kernels == 3
    main = src[src.index("attention_bwd_kernel1_kernel"):src.index("attention_bwd_kernel2_kernel")]
    if target == "sm_90a":
        assert main.count("tegula::wgmma_ss<") == 3 and main.count("tegula::wgmma_rs<") == 2, \
            "the five gemms do not all run on wgmma (Sᵀ, dPᵀ, dQ from shared; dV, dK from registers)"
        assert "setmaxnreg" in main and "tma_load" in main, "the query loop is not warp specialised"
    else:
        assert main.count("tegula::gemm_ss<") == 3 and main.count("tegula::gemm_rs<") == 2
        assert "cp_async_16_pred" in main
    assert re.search(r"atomic_add(_x[24])?\(&dQ_acc\[", main), "dQ is not accumulated by atomics"
    for index in range(3):
        cubin = kernel.cubin(index)
        assert isinstance(cubin, (bytes, bytearray)) and len(cubin) > 1000
    # On Hopper the main kernel's default tiles fit the registers: a few bytes of stack at most.
    (_, stack), = registers.compiled_resources(kernel.cubin(1)).values()
    assert target != "sm_90a" or stack <= 64, f"the main kernel spills {stack} bytes a thread"


@pytest.mark.parametrize("name", list(COMPILE_VARIANTS))
def test_query_loop_is_bounded_by_the_mask(name):
    """Causal and windowed attention bound the query loop per key block (it depends on bx);
    full attention runs every block over all query blocks."""
    _, src = _compile(name, "sm_80")
    main = src[src.index("attention_bwd_kernel1_kernel"):]
    header = main[main.index("for (int t"):]
    header = header[:header.index("{")]
    variant = COMPILE_VARIANTS[name]
    heads_first = variant.get("heads_first")
    if heads_first is None:
        heads_first = variant.get("is_causal", False) or variant.get("window", 0) > 0
    key_block = "by" if heads_first else "bx"  # the grid index it is
    assert (key_block in header) == COMPILE_VARIANTS[name].get("is_causal", False), header


# ------------------------------------------------------------------------------ numerics

def attention_grads(q, k, v, do, causal, window, layout, sm_scale=None, dlse=None):
    """(out, lse, dq, dk, dv) of float64 attention with an explicit mask, by torch autograd
    of sum(out ∘ do) [+ sum(lse ∘ dlse) over the rows that see a key]. Rows that see no key:
    out 0, lse -inf, no gradient."""
    if layout == "bshd":
        q, k, v, do = (t.transpose(1, 2) for t in (q, k, v, do))
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    H, Hkv, Sq, Skv, D = q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    group = H // Hkv
    kk, vv = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ kk.transpose(-1, -2) * (sm_scale or 1 / math.sqrt(D))
    i, j = torch.arange(Sq)[:, None], torch.arange(Skv)[None, :]
    visible = torch.ones(Sq, Skv, dtype=torch.bool)
    if causal:
        visible &= j <= i + Skv - Sq
    if window:
        visible &= j > i + Skv - Sq - window
    scores = scores.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(scores, -1)
    p = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    out = p @ vv
    loss = (out * do.double()).sum()
    if dlse is not None:
        loss = loss + torch.where(torch.isinf(lse), 0.0, lse * dlse.double()).sum()
    grads = torch.autograd.grad(loss, (q, k, v))
    out, lse = out.detach(), lse.detach().float()
    if layout == "bshd":
        out, grads = out.transpose(1, 2), [g.transpose(1, 2) for g in grads]
    return (out, lse, *grads)


def rel_err(got, want):
    return ((got.double() - want).norm() / want.norm().clamp(min=1e-30)).item()


# (B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype, tiles or None for default_config)
NUMERIC_CASES = {
    "causal-sq<skv-gqa": (1, 2, 1, 40, 72, 64, True, 0, "bshd", torch.float16, None),
    "causal-window-sq>skv-bhsd": (1, 2, 1, 72, 40, 32, True, 16, "bhsd", torch.float16, None),
    "full-ragged-bf16": (1, 2, 2, 100, 72, 64, False, 0, "bhsd", torch.bfloat16, None),
    "causal-d128-several-blocks": (1, 2, 1, 136, 136, 128, True, 0, "bshd", torch.float16,
                                   dict(block_M=64, block_N=64, threads=128, num_stages=2)),
    # No mask: each key block starts at its own query tile (stagger) and wraps around.
    "full-staggered-gqa": (1, 4, 2, 150, 200, 64, False, 0, "bshd", torch.float16,
                           dict(block_M=64, block_N=64, threads=128, num_stages=2)),
    # dQ's atomics issued from a shared-memory copy of the tile (dq_staged).
    "causal-dq-staged": (1, 2, 1, 136, 136, 64, True, 0, "bshd", torch.float16,
                         dict(block_M=64, block_N=64, threads=128, num_stages=2, dq_staged=True)),
    "window-several-blocks": (1, 4, 2, 150, 150, 64, True, 40, "bshd", torch.bfloat16,
                              dict(block_M=64, block_N=64, threads=128, num_stages=2)),
    # Keys 0..94 are seen by no query: the first key block's loop is empty, dk = dv = 0.
    "window-unseen-key-block": (1, 2, 1, 40, 150, 64, True, 16, "bhsd", torch.float16,
                                dict(block_M=64, block_N=64, threads=128, num_stages=2)),
}
TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


def _run_case(name, target, method):
    B, H, Hkv, Sq, Skv, D, causal, window, layout, dtype, tiles = NUMERIC_CASES[name]
    gen = torch.Generator().manual_seed(0)
    q_shape = (B, Sq, H, D) if layout == "bshd" else (B, H, Sq, D)
    kv_shape = (B, Skv, Hkv, D) if layout == "bshd" else (B, Hkv, Skv, D)
    q, k, v, do = (torch.randn(s, generator=gen).to(dtype) for s in (q_shape, kv_shape, kv_shape, q_shape))
    # A loss on the log-sum-exp too, as a caller using return_lse may have.
    dlse = torch.randn((B, H, Sq), generator=gen)
    out, lse, *want = attention_grads(q, k, v, do, causal, window, layout, dlse=dlse)
    cfg = tiles or bw.default_config(D, causal, wgmma=target == "sm_90a")
    kernel = tegula.compile(bw.flash_attention_bwd_program(B, H, Hkv, Sq, Skv, D, is_causal=causal, window=window,
                                                           layout=layout, dtype=bw.dtype_name(dtype), **cfg),
                            out_idx=[7, 8, 9], target=target, pass_configs=PASS_CONFIGS)
    got = getattr(tt, method)(kernel, q, k, v, out.to(dtype), do, lse, dlse)
    return got, want, lse, TOL[dtype]


@pytest.mark.parametrize("name", list(NUMERIC_CASES))
def test_reference_gradients_match_autograd(name):
    got, want, _, tol = _run_case(name, "sm_90a", "reference")
    for label, g, w in zip(("dq", "dk", "dv"), got, want):
        assert not g.isnan().any(), f"{label} has NaN"
        assert rel_err(g, w) <= tol, f"{label}: relative error {rel_err(g, w):.2e}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(NUMERIC_CASES))
def test_simulated_gradients_match_autograd(name, target):
    got, want, lse, tol = _run_case(name, target, "simulate")
    for label, g, w in zip(("dq", "dk", "dv"), got, want):
        assert not g.isnan().any(), f"{label} has NaN"
        assert rel_err(g, w) <= tol, f"{label}: relative error {rel_err(g, w):.2e}"
    # A query that saw no key (causal with Sq > Skv) gets exactly zero, not NaN.
    blind = torch.isinf(lse)
    if blind.any():
        dq = got[0] if NUMERIC_CASES[name][8] == "bhsd" else got[0].transpose(1, 2)
        assert (dq[blind] == 0).all()
    if name == "window-unseen-key-block":
        assert (got[1][:, :, :64] == 0).all() and (got[2][:, :, :64] == 0).all()


# ------------------------------------------------------------------------ argument checks

def _cpu_args(layout="bshd"):
    q = torch.randn(1, 16, 4, 64).half()
    k = torch.randn(1, 16, 2, 64).half()
    lse = torch.zeros(1, 4, 16)
    return q.clone(), q, k, k.clone(), q.clone(), lse


def test_backward_rejects_cpu_tensors_naming_the_argument():
    with pytest.raises(ValueError, match=r"flash_attention_backward: do must be a CUDA tensor"):
        bw.flash_attention_backward(*_cpu_args())


def test_backward_checks_shapes_dtypes_and_options():
    do, q, k, v, out, lse = _cpu_args()
    with pytest.raises(ValueError, match=r"lse must be a float32 tensor of shape \(1, 4, 16\)"):
        bw.flash_attention_backward(do, q, k, v, out, lse[:, :2])
    with pytest.raises(ValueError, match=r"do must have q's shape"):
        bw.flash_attention_backward(do[:, :8], q, k, v, out, lse)
    with pytest.raises(ValueError, match=r"out must have q's dtype float16"):
        bw.flash_attention_backward(do, q, k, v, out.bfloat16(), lse)
    with pytest.raises(TypeError, match=r"\bq must be a torch\.Tensor"):
        bw.flash_attention_backward(do, q.tolist(), k, v, out, lse)
    with pytest.raises(ValueError, match=r"layout"):
        bw.flash_attention_backward(do, q, k, v, out, lse, layout="sbhd")
    with pytest.raises(ValueError, match=r"pass causal=True"):
        bw.flash_attention_backward(do, q, k, v, out, lse, window=8)
    with pytest.raises(ValueError, match=r"multiple of the heads of k and v"):
        bw.flash_attention_backward(do, q, k[:, :, :1].expand(1, 16, 3, 64), v[:, :, :1].expand(1, 16, 3, 64),
                                    out, lse)
