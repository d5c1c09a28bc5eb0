"""MLA decode (tegula.kernels.mla_decode) against a float64 reference on the GPU: ragged
cache lengths (0, not a multiple of the page, past the cache's end), contiguous and paged
caches, float16 and bfloat16, 16 to 128 query heads, NaN in the unused cache tail. Also
the program shape it relies on: several `with T.Kernel` blocks and `T.alloc_global`."""
import importlib
import math
import os
import sys

import pytest
import torch

try:
    from ._util import assert_close, randn, seed_of
except ImportError:
    from _util import assert_close, randn, seed_of

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lang_kernels as lk  # noqa: E402

pytestmark = pytest.mark.gpu

mla = importlib.import_module("tegula.kernels.mla_decode")
W, DV, PAGE = 576, 512, 64


def reference(q, kv, lens, sm_scale=None):
    """out (B, H, 512) and natural lse (B, H), float64; kv contiguous (B, S, 576)."""
    scale = sm_scale if sm_scale is not None else 1 / math.sqrt(W)
    B, H, _ = q.shape
    out = torch.zeros((B, H, DV), dtype=torch.float64)
    lse = torch.full((B, H), -math.inf, dtype=torch.float64)
    q64, kv64 = q.double().cpu(), kv.double().cpu()
    for b in range(B):
        n = min(int(lens[b]), kv.shape[1])
        if n == 0:
            continue
        s = q64[b] @ kv64[b, :n].T * scale
        lse[b] = torch.logsumexp(s, dim=-1)
        out[b] = torch.softmax(s, dim=-1) @ kv64[b, :n, :DV]
    return out, lse


def make_inputs(B, H, S, dtype, tag, paged=False):
    """A paged cache has whole pages: its length is S rounded up to one."""
    if paged:
        S = -(-S // PAGE) * PAGE
    seed = seed_of(B, H, S, dtype, tag)
    q = randn((B, H, W), dtype, seed)
    kv = randn((B, S, W), dtype, seed + 1)
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, S + 1, (B,), generator=gen, dtype=torch.int32)
    lens[0] = 0
    if B > 1:
        lens[1] = S                       # full
    if B > 2:
        lens[2] = max(1, S - 37)          # not a multiple of the page
    if B > 3:
        lens[3] = S + 500                 # past the cache: counts as S
    return q, kv, lens.cuda()


def poison_tail(kv, lens):
    for b in range(kv.shape[0]):
        n = min(int(lens[b]), kv.shape[1])
        kv[b, n:] = float("nan")


def to_paged(kv, seed):
    """Pages (num_pages, 64, 576) in a shuffled order and a block table that finds them."""
    B, S, _ = kv.shape
    per = -(-S // PAGE)
    padded = torch.full((B, per * PAGE, W), float("nan"), dtype=kv.dtype, device=kv.device)
    padded[:, :S] = kv
    pages = padded.reshape(B * per, PAGE, W)
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(B * per, generator=gen)
    shuffled = torch.empty_like(pages)
    shuffled[perm.cuda()] = pages
    table = perm.reshape(B, per).to(torch.int32).cuda()
    return shuffled, table


CASES = [(4, 128, 1000, torch.float16), (3, 64, 700, torch.bfloat16), (5, 16, 300, torch.float16),
         (2, 32, 129, torch.bfloat16), (4, 128, 4096, torch.bfloat16), (6, 96, 250, torch.float16)]


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"B{c[0]}-H{c[1]}-S{c[2]}-{str(c[3])[6:]}")
def test_mla_decode_matches_reference(case, paged):
    B, H, S, dtype = case
    q, kv, lens = make_inputs(B, H, S, dtype, paged, paged)
    ref_out, ref_lse = reference(q, kv, lens.cpu())
    poison_tail(kv, lens)
    if paged:
        pages, table = to_paged(kv, seed_of(case))
        out, lse = mla.mla_decode(q, pages, lens, block_table=table, return_lse=True)
    else:
        out, lse = mla.mla_decode(q, kv, lens, return_lse=True)
    assert out.shape == (B, H, DV) and out.dtype == dtype
    assert_close(out.cpu(), ref_out, dtype, f"mla_decode {case} paged={paged}")
    assert torch.equal(out[0].float().cpu(), torch.zeros(H, DV)), "a length-0 sequence gives zeros"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    assert (lse.cpu().double()[finite] - ref_lse[finite]).abs().max() < 1e-3


def test_mla_decode_split_invariance_and_scale():
    q, kv, lens = make_inputs(3, 128, 900, torch.float16, "split")
    ref_out, _ = reference(q, kv, lens.cpu(), sm_scale=0.05)
    outs = [mla.mla_decode(q, kv, lens, sm_scale=0.05, num_split=s) for s in (1, 3, 16)]
    for s, out in zip((1, 3, 16), outs):
        assert_close(out.cpu(), ref_out, torch.float16, f"mla_decode num_split={s}")


@pytest.mark.parametrize("bad, match", [
    (lambda q, kv, n: mla.mla_decode(q[..., :512], kv, n), r"\bq\b.*576"),
    (lambda q, kv, n: mla.mla_decode(q, kv.float(), n), r"kv_cache"),
    (lambda q, kv, n: mla.mla_decode(q, kv, n.long()), r"cache_seqlens"),
    (lambda q, kv, n: mla.mla_decode(q, kv, n, block_table=torch.zeros(2, 3, dtype=torch.int32, device="cuda")),
     r"kv_cache|block_table"),
])
def test_mla_decode_bad_arguments(bad, match):
    q, kv, lens = make_inputs(2, 16, 128, torch.float16, "bad")
    with pytest.raises(ValueError, match=match):
        bad(q, kv, lens)


def test_two_kernels_and_a_workspace_run_in_order():
    k = tegula.compile(lk.two_kernels_program(37, 300), out_idx=[-1])
    assert k.num_kernels == 2
    a = randn((37, 300), torch.float32, 7)
    c = k(a)
    torch.testing.assert_close(c, (a * 2).flip(1) + 1)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        c2 = k(a)
    stream.synchronize()
    torch.testing.assert_close(c2, c)
