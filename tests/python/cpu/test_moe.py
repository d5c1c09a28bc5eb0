"""The MoE routing kernels (kernels/moe.py) without a GPU: moe_align_block_size's three
kernels, simulated thread by thread, give exactly a stable argsort's layout (vLLM's
semantics, dropped ids, chunks of several tiles, int64 ids); moe_permute and moe_combine
match torch, simulated and interpreted; all compile for sm_90a and sm_80 with 16-byte
accesses; and the entry points check their arguments by name."""
import importlib
import re

import pytest
import torch
import torch.nn.functional as F

import tegula
import tegula.testing as tt

moe = importlib.import_module("tegula.kernels.moe")
from tegula.kernels._common import plan_rows  # noqa: E402

TARGETS = ["sm_90a", "sm_80"]


def torch_align(ids, E, B):
    """vLLM's layout from a stable argsort: (sorted_ids, expert_ids, num_post, offsets,
    positions), ids outside [0, E) dropped."""
    flat = ids.flatten().long()
    n = flat.numel()
    slots = n + E * (B - 1)
    key = torch.where((flat >= 0) & (flat < E), flat, E)
    order = torch.argsort(key, stable=True)
    counts = torch.zeros(E + 1, dtype=torch.long).scatter_add_(0, key, torch.ones_like(key))[:E]
    offsets = F.pad(((counts + B - 1) // B * B).cumsum(0), (1, 0))
    starts = F.pad(counts.cumsum(0), (1, 0))
    sorted_key = key[order]
    expert = sorted_key.clamp(max=E - 1)
    slot = torch.where(sorted_key < E, offsets[expert] + torch.arange(n) - starts[expert], -1)
    sorted_ids = torch.full((slots + 1,), n, dtype=torch.long)
    sorted_ids[torch.where(slot >= 0, slot, slots)] = order
    positions = torch.full((n,), -1, dtype=torch.long)
    positions[order] = slot
    block_starts = torch.arange(-(-slots // B)) * B
    expert_ids = torch.searchsorted(offsets[1:], block_starts, right=True)
    expert_ids = torch.where(block_starts < offsets[E], expert_ids, -1)
    return sorted_ids[:slots], expert_ids, offsets[E:], offsets, positions.view(ids.shape)


def routed_ids(T_, k, E, seed, dropped=False):
    g = torch.Generator().manual_seed(seed)
    if k <= E:
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T_)])
    else:
        ids = torch.randint(0, E, (T_, k), generator=g)
    if dropped:
        ids.view(-1)[::5] = -1
        ids.view(-1)[::7] = E + 3
    return ids.int()


def simulate_align(target, ids, E, B, chunks, threads=64):
    kernel = tegula.jit(target=target)(moe.moe_align_program)(E, B, ids_dtype=str(ids.dtype)[6:], threads=threads,
                                                             scan_threads=64)
    n = ids.numel()
    slots = n + E * (B - 1)
    outs = [tt.poison(torch.empty(size, dtype=torch.int32)) for size in (slots, -(-slots // B), 1, E + 1, n)]
    tt.simulate(kernel, ids.flatten(), torch.zeros(E, chunks, dtype=torch.int32), *outs)
    return outs


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("T_,k,E,B,chunks,dropped", [
    (50, 2, 8, 16, 3, False),     # chunks of one tile
    (250, 2, 8, 16, 3, True),     # chunks of three tiles of 64, the last chunk short; dropped ids
    (100, 4, 130, 4, 5, True),    # more experts than threads
    (37, 3, 5, 1, 1, False),      # block_size 1: no padding
    (37, 1, 1, 64, 2, True),      # one expert
    (1, 1, 3, 8, 1, False),
])
def test_simulated_alignment_is_a_stable_argsort(target, T_, k, E, B, chunks, dropped):
    ids = routed_ids(T_, k, E, seed=T_ * k + E, dropped=dropped)
    sorted_ids, expert_ids, num_post, offsets, positions = simulate_align(target, ids, E, B, chunks)
    ref = torch_align(ids, E, B)
    assert torch.equal(offsets.long(), ref[3])
    assert num_post.item() == ref[2].item()
    assert torch.equal(sorted_ids.long(), ref[0])
    assert torch.equal(expert_ids.long(), ref[1])
    assert torch.equal(positions.long(), ref[4].flatten())


def test_int64_ids():
    ids = routed_ids(40, 2, 6, seed=3).long()
    ids[0, 0] = 1 << 40    # out of range in int64, in range if truncated to int32: dropped
    sorted_ids, _, _, offsets, positions = simulate_align("sm_90a", ids, 6, 8, 2)
    ref = torch_align(ids, 6, 8)
    assert torch.equal(sorted_ids.long(), ref[0]) and torch.equal(offsets.long(), ref[3])
    assert positions[0].item() == -1


def test_align_compiles_for_both_targets():
    for target in TARGETS:
        k = tegula.jit(target=target)(moe.moe_align_program)(8, 64)
        assert k.num_kernels == 3
        assert all(len(k.cubin(i)) > 0 for i in range(3))


def test_chunk_counts():
    assert moe.max_chunks(8) == 256 and moe.max_chunks(256) == 64 and moe.max_chunks(1024) == 16
    assert moe.align_chunks(8192, 8) == 32
    assert moe.align_chunks(524288, 8) == 256
    assert moe.align_chunks(1, 256) == 1


def kernels_for(H, k, dtype, target):
    plan = plan_rows(H, torch.finfo(dtype).bits // 8)
    name = str(dtype)[6:]
    args = (plan.blk_m, plan.threads, plan.n_pad, plan.chunks)
    permute = tegula.jit(out_idx=[-1], target=target)(moe.moe_permute_program)(H, k, name, *args)
    combine = tegula.jit(out_idx=[-1], target=target)(moe.moe_combine_program)(H, k, name, "float32", *args)
    return permute, combine


def torch_permute(x, sorted_ids, k):
    src = torch.where((sorted_ids >= 0) & (sorted_ids < x.shape[0] * k), sorted_ids // k, -1).long()
    return torch.where((src >= 0)[:, None], x[src.clamp(min=0)].double(), 0.0)


def torch_combine(y, w, pos):
    out = torch.zeros(w.shape[0], y.shape[1], dtype=torch.float64)
    for j in range(w.shape[1]):
        row = torch.where((pos[:, j] >= 0)[:, None], y[pos[:, j].clamp(min=0).long()].double(), 0.0)
        out += torch.where((pos[:, j] >= 0)[:, None], w[:, j:j + 1].double(), 0.0) * row
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("H,k,T_,dtype", [(64, 2, 10, torch.float16), (100, 3, 5, torch.bfloat16),
                                          (4096, 2, 3, torch.float16)])
def test_permute_and_combine_match_torch(target, H, k, T_, dtype):
    permute, combine = kernels_for(H, k, dtype, target)
    g = torch.Generator().manual_seed(H + k)
    slots = T_ * k + 13
    x = torch.randn(T_, H, generator=g).to(dtype)
    sorted_ids = torch.randint(0, T_ * k + 1, (slots,), generator=g).int()
    sorted_ids[::3] = T_ * k    # padding
    sorted_ids[1] = -5
    ys = tt.simulate(permute, x, sorted_ids)
    assert torch.equal(ys.double(), torch_permute(x, sorted_ids, k))
    y = torch.randn(slots, H, generator=g).to(dtype)
    w = torch.rand(T_, k, generator=g)
    pos = torch.randint(0, slots, (T_, k), generator=g).int()
    pos[0, 0] = -1
    out = tt.simulate(combine, y, w, pos)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(out.double(), torch_combine(y, w, pos), rtol=tol, atol=tol)
    assert torch.equal(tt.reference(combine, y, w, pos), out)


def test_combine_propagates_nan():
    permute, combine = kernels_for(64, 2, torch.float16, "sm_90a")
    y = torch.randn(8, 64).half()
    y[3, 5] = float("nan")
    pos = torch.tensor([[3, 1], [-1, 2]], dtype=torch.int32)
    out = tt.simulate(combine, y, torch.full((2, 2), 0.5), pos)
    assert torch.isnan(out[0, 5]) and torch.isnan(out).sum() == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_permute_and_combine_use_16_byte_vectors(dtype):
    for target in TARGETS:
        for kernel in kernels_for(4096, 2, dtype, target) + kernels_for(256, 8, dtype, target):
            widths = set(re.findall(r"Vec<\w+, (\d+)>", kernel.get_kernel_source()))
            assert widths == {"8"}, widths
            assert len(kernel.cubin()) > 0


ids = torch.zeros(4, 2, dtype=torch.int32)
x16 = torch.randn(4, 64).half()
sid = torch.zeros(10, dtype=torch.int32)
w32 = torch.rand(4, 2)


ALIGN = "moe_align_block_size"


@pytest.mark.parametrize("call,exc,pattern", [
    (lambda: moe.moe_align_block_size(ids.float(), 8, 16), ValueError, ALIGN + r": topk_ids must be an int32"),
    (lambda: moe.moe_align_block_size(ids.tolist(), 8, 16), TypeError, ALIGN + r": topk_ids must be a torch"),
    (lambda: moe.moe_align_block_size(ids[0], 8, 16), ValueError, r"moe_align_block_size: topk_ids must be 2-D"),
    (lambda: moe.moe_align_block_size(ids, 0, 16), ValueError, r"moe_align_block_size: num_experts must be an int"),
    (lambda: moe.moe_align_block_size(ids, 8, 16.0), ValueError, r"moe_align_block_size: block_size must be an int"),
    (lambda: moe.moe_align_block_size(ids, 8, 16), ValueError, r"moe_align_block_size: topk_ids must be a CUDA"),
    (lambda: moe.moe_permute(x16.int(), sid, 2), ValueError, r"moe_permute: x must be a tensor of float16"),
    (lambda: moe.moe_permute(x16, sid.long(), 2), ValueError, r"moe_permute: sorted_token_ids must be an int32"),
    (lambda: moe.moe_permute(x16, sid.view(2, 5), 2), ValueError, r"moe_permute: sorted_token_ids must be 1-D"),
    (lambda: moe.moe_permute(x16, sid, 0), ValueError, r"moe_permute: top_k must be an int"),
    (lambda: moe.moe_permute(x16, sid, 2), ValueError, r"moe_permute: x must be a CUDA tensor"),
    (lambda: moe.moe_combine(x16, w32.double(), ids), ValueError, r"moe_combine: topk_weights must be a tensor of"),
    (lambda: moe.moe_combine(x16, w32.bfloat16(), ids), ValueError, r"moe_combine: topk_weights must be a float32"),
    (lambda: moe.moe_combine(x16, w32, ids.long()), ValueError, r"moe_combine: token_positions must be an int32"),
    (lambda: moe.moe_combine(x16, w32, ids[:3]), ValueError, r"moe_combine: token_positions must have the shape"),
    (lambda: moe.moe_combine(x16[0], w32, ids), ValueError, r"moe_combine: y must be 2-D"),
    (lambda: moe.moe_combine(x16, w32, ids), ValueError, r"moe_combine: y must be a CUDA tensor"),
])
def test_argument_errors_name_the_argument(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()
