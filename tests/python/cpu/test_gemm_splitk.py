"""The general split-K GEMM (M <= 64 with a tile given to kernel_for), no GPU needed: the
two-kernel program compiles for both instruction paths, its lowered code simulated thread
by thread (and the program interpreted as written) matches torch on ragged shapes with
short and uneven K slices, and kernel_for picks it for a given tile, with the slice count
`split_k_slices` documents. matmul's own decode kernel: test_gemm_decode.py."""
import importlib

import pytest
import torch

import tegula
import tegula.testing as tt
from helpers import gemm_reference

gemm = importlib.import_module("tegula.kernels.gemm")
fa = importlib.import_module("tegula.kernels.flash_attention")

TARGETS = ["sm_90a", "sm_80"]
# (target, engine path) pairs compiled and simulated: sm_90a's default path loads through TMA
# and mbarriers, the legacy one through cp.async.
TARGET_PATHS = [("sm_90a", "auto"), ("sm_90a", "legacy"), ("sm_80", "auto")]
# Tiles small enough to simulate; 64 rows keep sm_90a on wgmma (its smallest M).
SMALL = dict(block_M=64, block_N=32, block_K=32, num_stages=2, threads=128, combine_M=16, combine_N=32,
             combine_threads=64)


def splitk(target, M, N, K, splits, path="auto", **kw):
    return tegula.jit(out_idx=[-1], target=target, pass_configs=gemm.PATHS[path])(gemm.matmul_splitk_program)(
        M, N, K, splits, **{**SMALL, **kw})


def assert_near(out, ref, dtype):
    """The sums are fp32 on both sides; the only difference is the output's rounding."""
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert not torch.isnan(out).any(), "an output element was never written (still poisoned)"
    torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("target,path", TARGET_PATHS)
def test_decode_shape_compiles_to_two_kernels_on_tensor_cores(target, path):
    k = tegula.compile(gemm.matmul_splitk_program(16, 4096, 4096, 8, **gemm.SPLIT_K_CONFIG), out_idx=[-1],
                       target=target, pass_configs=gemm.PATHS[path])
    assert k.num_kernels == 2
    (ws,) = k.prim_func.workspaces
    assert ws.shape == (8, 16, 4096) and ws.dtype == "float32"
    assert all(len(k.cubin(i)) > 0 for i in range(2))
    partials = k.get_kernel_source().split("// ---- kernel 1 of 2")[0]
    if target == "sm_90a":
        assert "tegula::wgmma_ss<64, 128, 64," in partials
    else:
        assert "tegula::gemm_ss<" in partials and "wgmma" not in partials
    if path == "legacy":
        assert "cp_async_16_pred" in partials and "tma_load" not in partials
    else:
        assert "cp_async_16_pred" in partials or "tma_load" in partials


@pytest.mark.parametrize("target", TARGETS)
def test_the_combine_applies_the_epilogue_with_nan_propagating_max(target):
    k = tegula.compile(gemm.matmul_splitk_program(16, 4096, 4096, 8, epilogue="bias_relu"), out_idx=[-1],
                       target=target)
    partials, combine = k.get_kernel_source().split("// ---- kernel 1 of 2")
    assert "tegula::max(" in combine and "Bias[" in combine
    assert "tegula::max(" not in partials and "Bias[" not in partials


@pytest.mark.parametrize("target,path", TARGET_PATHS)
@pytest.mark.parametrize("M,N,K,splits,epilogue,dtype", [
    (5, 40, 200, 3, "none", torch.float16),        # 7 steps of 32: slices of 3, 3 and 1; ragged K
    (5, 40, 200, 2, "bias_gelu", torch.float16),
    (33, 72, 96, 3, "bias_relu", torch.bfloat16),  # one step a slice; rows past 33 of the tile masked
    (64, 36, 129, 5, "gelu", torch.float16),       # a full M tile; N not a multiple of 8
])
def test_simulated_and_reference_match_torch(target, path, M, N, K, splits, epilogue, dtype):
    k = splitk(target, M, N, K, splits, path, epilogue=epilogue, dtype=gemm.dtype_name(dtype))
    gen = torch.Generator().manual_seed(M * 1000 + N + K + splits)
    a = torch.randn(M, K, generator=gen).to(dtype)
    b = torch.randn(K, N, generator=gen).to(dtype)
    bias = torch.randn(N, generator=gen).to(dtype)
    has_bias, act = gemm._parse_epilogue(epilogue)
    ref = gemm_reference(a, b, bias if has_bias else None, act, torch.float32)
    assert_near(tt.reference(k, a, b, bias), ref, dtype)
    assert_near(tt.simulate(k, a, b, bias), ref, dtype)


@pytest.mark.parametrize("target,path", TARGET_PATHS)
def test_padded_rows_of_b_are_not_stored(target, path):
    """ldb > N (matmul pads B's rows for 16-byte loads): columns N..ldb never reach C."""
    M, N, K, ldb = 7, 36, 160, 40
    k = splitk(target, M, N, K, 2, path, ldb=ldb)
    a = torch.randn(M, K).half()
    b = torch.randn(K, ldb).half()
    assert_near(tt.simulate(k, a, b, torch.zeros(N).half()), a.float() @ b[:, :N].float(), torch.float16)


def test_an_empty_slice_is_refused():
    # 4 steps cannot be cut into 3 non-empty slices of equal length (2 + 2 + 0).
    with pytest.raises(ValueError, match="splits must leave every slice"):
        gemm.matmul_splitk_program(16, 128, 256, 3, block_K=64)


@pytest.mark.parametrize("M,N,K,sms,slices", [
    (16, 4096, 4096, 132, 8),    # 32 tiles, 64 steps: 8 slices of 8 steps, 256 blocks
    (64, 8192, 8192, 132, 4),    # 64 tiles, 128 steps: 4 of 32
    (64, 8192, 1024, 132, 4),    # 16 steps: 4 of 4
    (33, 1000, 4100, 132, 13),   # 8 tiles want 33, 65 steps allow 16: 13 slices of 5
    (16, 4096, 4096, 78, 5),     # fewer SMs, fewer slices
    (16, 4096, 256, 132, 1),     # 4 steps: too short to split
    (64, 32768, 4096, 132, 1),   # 256 tiles already cover the SMs twice
    (65, 4096, 4096, 132, 1),    # not decode-shaped
])
def test_split_rule(M, N, K, sms, slices):
    assert gemm.split_k_slices(M, N, K, sms) == slices


def test_split_rule_never_leaves_a_slice_empty():
    for M in (1, 16, 64):
        for N in (8, 1000, 4096, 11008):
            for K in (64, 255, 1000, 4096, 4100, 14336):
                for sms in (16, 78, 132):
                    s = gemm.split_k_slices(M, N, K, sms)
                    steps = -(-K // 64)
                    assert s >= 1 and (s == 1 or (s - 1) * -(-steps // s) < steps), (M, N, K, sms, s)


def test_a_given_tile_takes_split_k_at_decode_shapes():
    """matmul's own choice at M <= 64 is the decode kernel (test_gemm_decode.py); a tile
    given to kernel_for takes this program where split_k_slices cuts K."""
    tile = dict(gemm.SPLIT_K_CONFIG)
    decode = gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132, **tile)
    assert decode.prim_func.name == "gemm_splitk" and decode.num_kernels == 2
    assert decode.prim_func.workspaces[0].shape == (8, 16, 4096)
    assert gemm.kernel_for(64, 8192, 8192, torch.bfloat16, "bias_gelu", sms=132, **tile).prim_func.workspaces[0].shape \
        == (4, 64, 8192)
    for shape in [(127, 1000, 333), (4096, 4096, 4096), (16, 4096, 256)]:
        k = gemm.kernel_for(*shape, torch.float16, sms=132, **tile)
        assert k.prim_func.name == "gemm" and k.num_kernels == 1, shape
    # splits=1 forces the one-kernel program; splits=n forces n slices.
    assert gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132, splits=1).num_kernels == 1
    forced = gemm.kernel_for(16, 4096, 4096, torch.float16, sms=132, splits=4)
    assert forced.prim_func.workspaces[0].shape == (4, 16, 4096)


def test_legacy_path_selects_its_own_jit_objects():
    cfg = dict(gemm.SPLIT_K_CONFIG)
    legacy = gemm.kernel_for(16, 4096, 4096, torch.float16, path="legacy", sms=132, **cfg)
    assert legacy is gemm.matmul_splitk_kernel_legacy(16, 4096, 4096, 8, dtype="float16", epilogue="none", **cfg)
    decode = gemm.decode_config(16, 4096, 4096, 132)
    assert gemm.kernel_for(16, 4096, 4096, torch.float16, path="legacy", sms=132) is gemm._DECODE[False, "legacy"](
        16, 4096, 4096, decode.pop("splits"), dtype="float16", epilogue="none", **decode)
    tiled = gemm.kernel_for(4096, 4096, 4096, torch.float16, path="legacy")
    assert tiled is gemm.matmul_kernel_legacy(4096, 4096, 4096, dtype="float16", epilogue="none",
                                              **gemm.default_config(4096, 4096, 4096))
    assert gemm.matmul_kernel_legacy.settings["pass_configs"] == gemm.PATHS["legacy"]
    with pytest.raises(ValueError, match=r"path must be one of \('auto', 'legacy'\), got 'tma'"):
        gemm.kernel_for(16, 4096, 4096, torch.float16, path="tma")
    attention = fa.kernel_for(1, 2, 2, 128, 128, 64, False, 0, "bhsd", "float16", None, path="legacy")
    assert attention is fa.flash_attention_kernel_legacy(1, 2, 2, 128, 128, 64, is_causal=False, window=0,
                                                         layout="bhsd", dtype="float16", sm_scale=None,
                                                         **fa.default_config(128, 64, False))
    with pytest.raises(ValueError, match="flash_attention: path must be one of"):
        fa.kernel_for(1, 2, 2, 128, 128, 64, False, 0, "bhsd", "float16", None, path="fast")


def test_matmul_names_a_bad_path():
    a = torch.zeros(4, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"matmul: path must be one of \('auto', 'legacy'\), got 'new'"):
        gemm.matmul(a, a.t(), path="new")
