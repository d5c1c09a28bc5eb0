"""The warp-specialised TMA path on the GPU (sm_90 only): every operand layout and ragged
shape (rows whose byte strides are multiples of 16: others keep cp.async, see
cpu/test_hopper_async.py), against a float32 torch reference and against the same program compiled with the
path off (tl.disable_tma_lower), outputs poisoned with NaN before each run."""
import importlib
import os
import sys

import pytest
import torch

import tegula
import tegula.env

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from lang_kernels import gemm_relu_program, gemm_variant_program  # noqa: E402

from _util import poison, randn, rel_err, seed_of  # noqa: E402

fa = importlib.import_module("tegula.kernels.flash_attention")
gemm = importlib.import_module("tegula.kernels.gemm")
common = importlib.import_module("tegula.kernels._common")

OFF = {"tl.disable_tma_lower": True}


@pytest.fixture(autouse=True)
def _hopper():
    if not torch.cuda.is_available() or not common.wgmma_gpu():
        pytest.skip("the bulk-copy path needs an sm_90 GPU")


def _both(program, out_idx=None):
    new = tegula.compile(program, out_idx=out_idx)
    old = tegula.compile(program, out_idx=out_idx, pass_configs=OFF)
    assert new._lowered.warp_specialized and not old._lowered.warp_specialized
    return new, old


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("M,N,K,tile", [(512, 384, 256, (128, 128, 64, 3, 128)), (296, 264, 200, (64, 64, 32, 2, 128)),
                                        (264, 520, 328, (128, 256, 64, 4, 256)), (64, 128, 1024, (64, 128, 64, 1, 128))])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_operand_layouts(ta, tb, M, N, K, tile, dtype):
    bm, bn, bk, stages, threads = tile
    name = "float16" if dtype == torch.float16 else "bfloat16"
    prog = gemm_variant_program(M, N, K, bm, bn, bk, transpose_A=ta, transpose_B=tb, dtype=name, threads=threads,
                                num_stages=stages)
    new, old = _both(prog)
    s = seed_of(ta, tb, M, N, K, tile, dtype)
    a = randn((K, M) if ta else (M, K), dtype, s)
    b = randn((N, K) if tb else (K, N), dtype, s + 1)
    ref = (a.float().T if ta else a.float()) @ (b.float().T if tb else b.float())
    outs = []
    for k in (new, old):
        c = poison((M, N), dtype)
        k(a, b, c)
        outs.append(c)
    tol = 1e-3 if dtype == torch.float16 else 8e-3
    assert rel_err(outs[0], ref) < tol and rel_err(outs[1], ref) < tol
    # The same instructions in the same order on the same tiles: the same numbers.
    assert torch.equal(outs[0], outs[1])


def test_register_a_operand():
    M, N, K = 192, 128, 160
    prog = gemm_variant_program(M, N, K, 64, 64, 32, a_in_registers=True)
    new, old = _both(prog)
    a, b = randn((M, K), torch.float16, 1), randn((K, N), torch.float16, 2)
    c = poison((M, N), torch.float16)
    new(a, b, c)
    assert rel_err(c, a.float() @ b.float()) < 1e-3


def test_tensor_maps_follow_the_tensors_of_each_call():
    """Maps are cached per pointer and sizes: new tensors, the same tensor rewritten, and
    a CUDA graph replay all read what the call names."""
    M = N = K = 256
    k = tegula.compile(gemm_relu_program(M, N, K, 128, 128, 32), out_idx=[-1])
    assert k._lowered.warp_specialized
    for seed in range(3):
        a, b = randn((M, K), torch.float16, seed), randn((K, N), torch.float16, seed + 10)
        assert rel_err(k(a, b), torch.relu(a.float() @ b.float())) < 1e-3
    a.copy_(randn((M, K), torch.float16, 99))
    assert rel_err(k(a, b), torch.relu(a.float() @ b.float())) < 1e-3
    out = k(a, b)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = k(a, b)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, out)


def test_a_misaligned_view_is_refused_by_name():
    M = N = K = 256
    k = tegula.compile(gemm_relu_program(M, N, K, 128, 128, 32), out_idx=[-1])
    big = randn((M * K + 4,), torch.float16, 3)
    a = big[4:].view(M, K)  # 8 bytes past a 16-byte boundary
    b = randn((K, N), torch.float16, 4)
    with pytest.raises(tegula.env.native().ArgumentError, match=r"'A'.*aligned to 16 bytes"):
        k(a, b)
    # The context is alive and the kernel still runs.
    assert rel_err(k(a.clone(), b), torch.relu(a.float() @ b.float())) < 1e-3


def _sdpa_ref(q, k, v, causal, window, layout):
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = q.float(), k.float(), v.float()
    h, hk = q.shape[1], k.shape[1]
    k = k.repeat_interleave(h // hk, 1)
    v = v.repeat_interleave(h // hk, 1)
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    sq, skv = s.shape[-2], s.shape[-1]
    i = torch.arange(sq, device=q.device)[:, None] + (skv - sq)
    j = torch.arange(skv, device=q.device)[None, :]
    mask = torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    if causal:
        mask &= j <= i
    if window:
        mask &= j > i - window
    s = s.masked_fill(~mask, float("-inf"))
    o = torch.softmax(s, -1).nan_to_num(0.0) @ v
    return o.transpose(1, 2) if layout == "bshd" else o


@pytest.mark.parametrize("case", [
    dict(b=2, h=4, hk=4, sq=256, skv=256, d=128, causal=False, window=0, layout="bshd", cfg=(128, 64, 128)),
    dict(b=2, h=4, hk=4, sq=256, skv=256, d=128, causal=True, window=0, layout="bshd", cfg=(128, 128, 256)),
    dict(b=1, h=8, hk=2, sq=200, skv=333, d=128, causal=True, window=0, layout="bhsd", cfg=(128, 128, 256)),
    dict(b=2, h=4, hk=1, sq=129, skv=129, d=64, causal=False, window=0, layout="bshd", cfg=(64, 128, 128)),
    dict(b=1, h=2, hk=2, sq=300, skv=300, d=64, causal=True, window=100, layout="bhsd", cfg=(64, 128, 128)),
    dict(b=1, h=2, hk=2, sq=192, skv=192, d=256, causal=False, window=0, layout="bshd", cfg=(64, 64, 128)),
])
def test_attention_on_the_new_path(case):
    c = case
    bm, bn, threads = c["cfg"]
    prog = fa.flash_attention_program(c["b"], c["h"], c["hk"], c["sq"], c["skv"], c["d"], is_causal=c["causal"],
                                      window=c["window"], layout=c["layout"], block_M=bm, block_N=bn, threads=threads)
    new, old = _both(prog)
    s = seed_of(tuple(sorted(c.items())))
    qs = (c["b"], c["sq"], c["h"], c["d"]) if c["layout"] == "bshd" else (c["b"], c["h"], c["sq"], c["d"])
    ks = (c["b"], c["skv"], c["hk"], c["d"]) if c["layout"] == "bshd" else (c["b"], c["hk"], c["skv"], c["d"])
    q, k, v = randn(qs, torch.float16, s), randn(ks, torch.float16, s + 1), randn(ks, torch.float16, s + 2)
    ref = _sdpa_ref(q, k, v, c["causal"], c["window"], c["layout"])
    outs = []
    for kern in (new, old):
        o = poison(qs, torch.float16)
        lse = poison((c["b"], c["h"], c["sq"]), torch.float32)
        kern(q, k, v, o, lse)
        outs.append((o, lse))
    assert rel_err(outs[0][0], ref) < 2e-3
    assert torch.allclose(outs[0][0].float(), outs[1][0].float(), atol=2e-3, rtol=0)
    assert torch.allclose(outs[0][1], outs[1][1], atol=1e-4, rtol=1e-4, equal_nan=True)


def test_shipped_entry_points_take_the_new_path():
    q = randn((1, 512, 8, 128), torch.float16, 5)
    k, v = randn((1, 512, 8, 128), torch.float16, 6), randn((1, 512, 8, 128), torch.float16, 7)
    o = fa.flash_attention(q, k, v, causal=True)
    assert rel_err(o, _sdpa_ref(q, k, v, True, 0, "bshd")) < 2e-3
    a, b = randn((1024, 768), torch.float16, 8), randn((768, 512), torch.float16, 9)
    assert rel_err(gemm.matmul(a, b), a.float() @ b.float()) < 1e-3
    assert gemm.kernel_for(1024, 512, 768, torch.float16)._lowered.warp_specialized


def test_attention_with_a_cp_async_q_ahead_of_the_warp_specialised_loop():
    """Q stays on cp.async ahead of the warp-specialised loop (8 keys in a 32-key tile,
    98 queries): its copy is waited for before the first wgmma. Found by the GPU fuzzer."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cpu"))
    from test_hopper_async import eight_keys_attention_program

    new, old = _both(eight_keys_attention_program(), out_idx=[3])
    g = torch.Generator().manual_seed(seed_of("eight_keys"))
    q, k, v = (torch.randn(s, generator=g).half() for s in ((2, 98, 64), (2, 8, 64), (2, 8, 64)))
    s = (q.float() @ k.float().transpose(1, 2)) * (0.18033688011112042 / 1.4426950408889634)
    causal = torch.arange(8)[None, :] <= torch.arange(98)[:, None]
    ref = torch.softmax(s.masked_fill(~causal, float("-inf")), -1) @ v.float()
    for kernel in (new, old):
        out = kernel(q.cuda(), k.cuda(), v.cuda()).float().cpu()
        assert rel_err(out, ref) < 5e-3
