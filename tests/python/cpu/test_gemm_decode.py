"""The decode GEMM (`matmul_decode_program`: Cᵀ = Bᵀ Aᵀ for M <= 64, K slices added by the
last block of each tile), no GPU needed: its rule (`decode_config`) on worked examples and
over a grid of shapes; its structure (one kernel, or the counter-zeroing kernel and the
product, with an acq_rel count); and its lowered code simulated thread by thread, and the
program interpreted as written, against torch on ragged shapes, every operand layout, the
epilogues, one and several slices, NaN-poisoned outputs, NaN and inf inputs, on sm_90a
(TMA and cp.async paths) and sm_80."""
import importlib

import pytest
import torch

import tegula
import tegula.testing as tt
from helpers import gemm_reference

gemm = importlib.import_module("tegula.kernels.gemm")

# Tiles small enough to simulate.
SMALL = dict(block_N=64, block_K=32, num_stages=2, threads=128)
TARGET_PATHS = [("sm_90a", "auto"), ("sm_90a", "legacy"), ("sm_80", "auto")]


def _program(M, N, K, splits, block_M=16, **kw):
    return gemm.matmul_decode_program(M, N, K, splits, block_M=block_M, **{**SMALL, **kw})


def _compile(target, path, *args, **kw):
    return tegula.compile(_program(*args, **kw), target=target, pass_configs=gemm.PATHS[path])


@pytest.mark.parametrize("M,N,K,expected", [
    (16, 4096, 4096, dict(block_M=16, block_N=64, block_K=256, num_stages=3, splits=2)),
    (64, 8192, 8192, dict(block_M=64, block_N=64, block_K=256, num_stages=3, splits=1)),
    (8, 14336, 4096, dict(block_M=16, block_N=128, block_K=128, num_stages=4, splits=1)),
    (33, 1000, 4100, dict(block_M=64, block_N=64, block_K=256, num_stages=3, splits=4)),
    (1, 128256, 4096, dict(block_M=16, block_N=128, block_K=128, num_stages=4, splits=1)),
    (17, 4096, 4096, dict(block_M=32, block_N=64, block_K=256, num_stages=3, splits=2)),
])
def test_rule_on_worked_examples(M, N, K, expected):
    cfg = gemm.decode_config(M, N, K, 132)
    assert {key: cfg[key] for key in expected} == expected


def test_rule_fills_at_most_one_wave_and_leaves_no_slice_empty():
    for M in (1, 5, 16, 17, 48, 64):
        for N in (8, 1000, 4096, 11008, 14336, 50000):
            for K in (16, 255, 1000, 4096, 4100, 14336):
                for sms in (16, 78, 108, 132):
                    cfg = gemm.decode_config(M, N, K, sms)
                    tiles = -(-M // cfg["block_M"]) * -(-N // cfg["block_N"])
                    steps, splits = -(-K // cfg["block_K"]), cfg["splits"]
                    assert cfg["block_M"] >= min(M, 64) and cfg["block_M"] in (16, 32, 64)
                    assert splits == 1 or (tiles * splits <= sms and (splits - 1) * -(-steps // splits) < steps
                                           and steps // splits >= gemm.DECODE_MIN_STEPS), (M, N, K, sms, cfg)


@pytest.mark.parametrize("target,path", TARGET_PATHS)
def test_structure(target, path):
    cfg = {k: v for k, v in gemm.decode_config(16, 4096, 4096, 132).items() if k != "splits"}
    one = tegula.compile(gemm.matmul_decode_program(16, 4096, 4096, 1, **cfg), out_idx=[-1], target=target,
                         pass_configs=gemm.PATHS[path])
    assert one.num_kernels == 1 and not one.prim_func.workspaces
    two = tegula.compile(gemm.matmul_decode_program(16, 4096, 4096, 2, **cfg), out_idx=[-1], target=target,
                         pass_configs=gemm.PATHS[path])
    assert two.num_kernels == 2
    partial, count = two.prim_func.workspaces
    assert (partial.shape, partial.dtype) == ((2, 4096, 16), "float32")
    assert (count.shape, count.dtype) == ((64,), "int32")
    src = two.get_kernel_source()
    assert "atomic_add<tegula::memory_order_acq_rel>" in src
    if target == "sm_90a":
        # the weight tile is the instruction's 64-row side, the 16 token rows its narrow one
        assert "tegula::wgmma_ss<64, 16, 256," in src
        assert ("tma_load" in src) == (path == "auto")
    else:
        assert "tegula::gemm_ss<64, 16, 256," in src and "wgmma" not in src


@pytest.mark.parametrize("target,path", TARGET_PATHS)
@pytest.mark.parametrize("M,N,K,splits,layout,epilogue,dtype", [
    (5, 72, 200, 3, "nn", "bias_gelu", torch.float16),    # 7 steps of 32: slices of 3, 3 and 1
    (5, 72, 200, 1, "nt", "none", torch.bfloat16),
    (16, 64, 256, 2, "tn", "bias_relu", torch.float16),
    (3, 100, 160, 2, "tt", "bias", torch.bfloat16),
    (20, 40, 96, 3, "nt", "relu", torch.float16),         # block_M 32: rows past 20 masked
])
def test_matches_torch(target, path, M, N, K, splits, layout, epilogue, dtype):
    trans_a, trans_b = layout[0] == "t", layout[1] == "t"
    block_M = 16 if M <= 16 else 32
    k = _compile(target, path, M, N, K, splits, block_M=block_M, epilogue=epilogue, trans_a=trans_a,
                 trans_b=trans_b, lda=M if trans_a else None, dtype=str(dtype).replace("torch.", ""))
    g = torch.Generator().manual_seed(M * N + K + splits)
    a, b = torch.randn(M, K, generator=g).to(dtype), torch.randn(K, N, generator=g).to(dtype)
    bias = torch.randn(N, generator=g).to(dtype)
    A = a.t().contiguous() if trans_a else a
    B = b.t().contiguous() if trans_b else b
    has_bias = epilogue.startswith("bias")
    ref = gemm_reference(a, b, bias if has_bias else None, epilogue.replace("bias_", "").replace("bias", "none"),
                         torch.float32)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    for run in (tt.simulate, tt.reference):
        out = torch.full((M, N), float("nan")).to(dtype)
        run(k, A, B, bias, out)
        assert not out.isnan().any(), f"{run.__name__}: an element was never written"
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol * ref.abs().max().item())


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_nan_and_inf_propagate(target):
    M, N, K = 4, 64, 128
    k = _compile(target, "auto", M, N, K, 2, trans_b=True)
    g = torch.Generator().manual_seed(1)
    a, w = torch.randn(M, K, generator=g).half(), torch.randn(N, K, generator=g).half()
    a[1, 7] = float("nan")
    w[5, 3] = float("inf")
    w[9, 30] = float("-inf")
    ref = a.float() @ w.float().t()
    out = torch.full((M, N), 0.5).half()
    tt.simulate(k, a, w, torch.zeros(N).half(), out)
    out = out.float()
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())
    assert torch.equal(out[out.isinf()], ref[ref.isinf()])


def test_dispatch():
    """kernel_for: the decode kernel for M <= 16 on either instruction path, and for M <= 64
    where T.gemm runs on wgmma (past 16 rows with cp.async); a given tile takes the general
    programs."""
    k = gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132)
    assert k.prim_func.name == "gemm_decode_splitk" and k.num_kernels == 2
    assert gemm.kernel_for(8, 14336, 4096, torch.float16, sms=132, trans_b=True).prim_func.name == "gemm_decode"
    assert gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132, mma_sync=True).prim_func.name.startswith(
        "gemm_decode")
    assert gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132, block_N=128).prim_func.name == "gemm_splitk"
    assert gemm.kernel_for(65, 4096, 4096, torch.float16, sms=132).prim_func.name == "gemm"
    assert gemm.kernel_for(33, 4096, 4096, torch.float16, sms=132, mma_sync=True).prim_func.name == "gemm_splitk"


def test_dispatch_on_wgmma(monkeypatch):
    monkeypatch.setattr(gemm, "wgmma_gpu", lambda: True)
    gemm.kernel_for.cache_clear()
    try:
        k = gemm.kernel_for(64, 8192, 8192, torch.float16, sms=132)
        assert k.prim_func.name == "gemm_decode"
        assert k is gemm._DECODE[False, "legacy"](64, 8192, 8192, 1, dtype="float16", epilogue="none",
                                                  block_M=64, block_N=64, block_K=256, num_stages=3, threads=128)
        assert gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132) is gemm._DECODE[False, "auto"](
            16, 4096, 4096, 2, dtype="float16", epilogue="none", block_M=16, block_N=64, block_K=256, num_stages=3,
            threads=128)
    finally:
        gemm.kernel_for.cache_clear()


def test_a_slice_count_that_leaves_a_slice_empty_is_refused():
    with pytest.raises(ValueError, match=r"matmul_decode_program: splits must leave every slice at least one of the "
                                         r"8 block_K=32 steps of K=256, got splits=5"):
        _program(16, 128, 256, 5)
