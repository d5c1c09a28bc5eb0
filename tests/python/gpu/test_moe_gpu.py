"""The MoE routing kernels (tegula.kernels.moe) on the GPU: moe_align_block_size equal to a
stable argsort's layout (vLLM's semantics) up to 65536 tokens x top 8; moe_permute and
moe_combine against torch; and Mixtral's sparse MoE block chained through align ->
permute -> grouped_gemm -> SiLU * up (torch) -> grouped_gemm -> combine against a
per-expert torch reference, in fp16 and bf16."""
import importlib

import pytest
import torch
import torch.nn.functional as F

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import assert_close, dtype_id, randn, seed_of
except ImportError:
    from _util import assert_close, dtype_id, randn, seed_of

pytestmark = pytest.mark.gpu

moe = importlib.import_module("tegula.kernels.moe")
gg = importlib.import_module("tegula.kernels.expert_gemm")

DTYPES = [torch.float16, torch.bfloat16]


def torch_align(ids, E, B):
    """vLLM's layout from a stable argsort (ids outside [0, E) dropped): the five outputs of
    moe_align_block_size, int64."""
    flat = ids.flatten().long()
    n = flat.numel()
    slots = n + E * (B - 1)
    key = torch.where((flat >= 0) & (flat < E), flat, E)
    order = torch.argsort(key, stable=True)
    counts = torch.zeros(E + 1, dtype=torch.long, device=ids.device).scatter_add_(0, key, torch.ones_like(key))[:E]
    offsets = F.pad(((counts + B - 1) // B * B).cumsum(0), (1, 0))
    starts = F.pad(counts.cumsum(0), (1, 0))
    sorted_key = key[order]
    expert = sorted_key.clamp(max=E - 1)
    slot = torch.where(sorted_key < E, offsets[expert] + torch.arange(n, device=ids.device) - starts[expert], -1)
    sorted_ids = torch.full((slots + 1,), n, dtype=torch.long, device=ids.device)
    sorted_ids[torch.where(slot >= 0, slot, slots)] = order
    positions = torch.full((n,), -1, dtype=torch.long, device=ids.device)
    positions[order] = slot
    block_starts = torch.arange(-(-slots // B), device=ids.device) * B
    expert_ids = torch.searchsorted(offsets[1:], block_starts, right=True)
    expert_ids = torch.where(block_starts < offsets[E], expert_ids, -1)
    return sorted_ids[:slots], expert_ids, offsets[E:], offsets, positions.view(ids.shape)


def routed(T_, k, E, seed, skew=0.0):
    """topk ids as a router gives them: k distinct experts a token; skew > 0 favours the
    low experts (unbalanced routing)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(T_, E, generator=g, device="cuda") - skew * torch.arange(E, device="cuda")
    return torch.topk(logits, k, dim=-1).indices.int()


@pytest.mark.parametrize("T_,k,E,B", [(1, 1, 8, 64), (7, 2, 8, 16), (4096, 2, 8, 64), (1000, 6, 64, 16),
                                      (333, 8, 256, 32), (65536, 8, 256, 64), (65536, 8, 8, 128),
                                      (5000, 4, 1024, 8), (64, 2, 8, 1)])
def test_alignment_equals_stable_argsort(T_, k, E, B):
    ids = routed(T_, k, E, seed_of("align", T_, k, E, B), skew=0.3)
    out = moe.moe_align_block_size(ids, E, B)
    ref = torch_align(ids, E, B)
    names = ("sorted_token_ids", "expert_ids", "num_tokens_post_padded", "expert_offsets", "token_positions")
    for name, ours, want in zip(names, out, ref):
        assert ours.dtype == torch.int32, name
        assert torch.equal(ours.long(), want), f"{name} differs at T={T_} k={k} E={E} B={B}"


def test_alignment_int64_dropped_ids_and_no_host_synchronisation():
    ids = routed(300, 2, 16, 11).long()
    ids[::9, 0] = -1          # another rank's experts (vLLM's expert-parallel -1)
    ids[5, 1] = 99
    moe.moe_align_block_size(ids, 16, 32)    # compiles outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = moe.moe_align_block_size(ids, 16, 32)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ref = torch_align(ids, 16, 32)
    for ours, want in zip(out, ref):
        assert torch.equal(ours.long(), want)
    assert (out.token_positions[::9, 0] == -1).all() and out.token_positions[5, 1] == -1


@pytest.mark.parametrize("dtype", DTYPES + [torch.float32], ids=dtype_id)
@pytest.mark.parametrize("T_,H,k", [(4096, 4096, 2), (37, 1000, 3), (5, 64, 8), (3, 24576, 2)])
def test_permute(T_, H, k, dtype):
    x = randn((T_, H), dtype, seed_of("x", T_, H, k, dtype))
    ids = routed(T_, k, 8, seed_of("ids", T_, H, k))
    align = moe.moe_align_block_size(ids, 8, 16)
    xs = moe.moe_permute(x, align.sorted_token_ids, k)
    src = align.sorted_token_ids.long() // k
    ref = F.pad(x, (0, 0, 0, 1))[src.clamp(max=T_)]     # padding entries T k -> the zero row T
    assert xs.shape == (align.sorted_token_ids.shape[0], H)
    assert torch.equal(xs, ref)


@pytest.mark.parametrize("dtype", DTYPES + [torch.float32], ids=dtype_id)
@pytest.mark.parametrize("weights_dtype", ["float32", "same"])
@pytest.mark.parametrize("T_,H,k", [(4096, 4096, 2), (37, 1000, 3), (5, 64, 8), (3, 24576, 2)])
def test_combine(T_, H, k, weights_dtype, dtype):
    R = T_ * k + 100
    y = randn((R, H), dtype, seed_of("y", T_, H, k, dtype))
    w = torch.rand(T_, k, device="cuda", dtype=torch.float32 if weights_dtype == "float32" else dtype)
    pos = torch.randperm(R, device="cuda")[:T_ * k].view(T_, k).int()
    pos[0, -1] = -1
    out = moe.moe_combine(y, w, pos)
    valid = (pos >= 0).unsqueeze(-1)
    ref = (torch.where(valid, y[pos.clamp(min=0).long()].double(), 0.0) * w.double().unsqueeze(-1)).sum(1)
    assert out.shape == (T_, H) and out.dtype == dtype
    assert_close(out, ref, dtype, f"moe_combine {T_}x{H} k={k}")


def test_empty_extents():
    ids = torch.empty(0, 2, dtype=torch.int32, device="cuda")
    align = moe.moe_align_block_size(ids, 4, 8)
    assert torch.equal(align.sorted_token_ids, torch.zeros(28, dtype=torch.int32, device="cuda"))
    assert align.num_tokens_post_padded.item() == 0 and (align.expert_ids == -1).all()
    x = torch.empty(0, 64, dtype=torch.float16, device="cuda")
    assert torch.equal(moe.moe_permute(x, align.sorted_token_ids, 2), torch.zeros(28, 64, dtype=torch.float16,
                                                                                     device="cuda"))
    out = moe.moe_combine(torch.randn(4, 64, device="cuda").half(), torch.empty(0, 2, device="cuda"),
                          torch.empty(0, 2, dtype=torch.int32, device="cuda"))
    assert out.shape == (0, 64)


def mixtral_reference(x, logits, w13, w2, top_k):
    """Mixtral's sparse MoE block in float32 per expert, rounding where the chained kernels
    round (the expert GEMMs' outputs and the SiLU product in x's dtype)."""
    dt = x.dtype
    probs = torch.softmax(logits.float(), dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    weights = (weights / weights.sum(-1, keepdim=True)).to(dt)
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(w13.shape[0]):
        tok, slot = torch.where(experts == e)
        if tok.numel() == 0:
            continue
        h = (x[tok].float() @ w13[e].float().t()).to(dt).float()
        act = (F.silu(h[:, :inter]) * h[:, inter:]).to(dt).float()
        y = (act @ w2[e].float().t()).to(dt)
        out.index_add_(0, tok, y.double() * weights[tok, slot].double().unsqueeze(-1))
    return out, weights, experts.int()


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("T_,H,inter,E,top_k,B", [(100, 256, 512, 8, 2, 64), (37, 192, 320, 6, 3, 16)])
def test_mixtral_moe_block_chained(T_, H, inter, E, top_k, B, dtype):
    x = randn((T_, H), dtype, seed_of("x", T_, H, dtype))
    logits = randn((T_, E), torch.float32, seed_of("router", T_, E))
    w13 = randn((E, 2 * inter, H), dtype, seed_of("w13", E, H, inter, dtype), scale=H ** -0.5)
    w2 = randn((E, H, inter), dtype, seed_of("w2", E, H, inter, dtype), scale=inter ** -0.5)
    ref, weights, experts = mixtral_reference(x, logits, w13, w2, top_k)

    align = moe.moe_align_block_size(experts, E, B)
    xs = moe.moe_permute(x, align.sorted_token_ids, top_k)
    h = gg.grouped_gemm(xs, w13, align.expert_offsets, trans_w=True)
    act = (F.silu(h[:, :inter].float()) * h[:, inter:].float()).to(dtype)
    ys = gg.grouped_gemm(act, w2, align.expert_offsets, trans_w=True)
    out = moe.moe_combine(ys, weights, align.token_positions)
    assert out.shape == (T_, H) and out.dtype == dtype
    assert_close(out, ref, dtype, f"Mixtral MoE block {T_}x{H} E={E} top{top_k}")
