"""w4a16_gemm on the GPU at real sizes: the decode path (M <= 16, split-K, stages of
several chunks, scales applied before or after the mma, both pipelines) and the prefill
path (both modes: dequantize + gemm.matmul, and the fused program), every weight format,
against torch computing x @ Wᵀ in float64 from the exactly dequantized W. Outputs land in
memory that was filled with NaN just before the call (the caching allocator hands the
same block back), so an element the kernel never writes fails."""
import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

dg = importlib.import_module("tegula.kernels.dequant_gemm")

# W and y are each rounded once to x's dtype; subnormal outputs round to a fixed grid.
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}
SUBNORMAL_HALF_STEP = {torch.float16: 2.0 ** -25, torch.bfloat16: 2.0 ** -134}


def poison_allocator(nbytes):
    """Leaves a freed block of at least nbytes filled with NaN in torch's caching allocator."""
    t = torch.empty(max(nbytes, 1 << 20) // 2, dtype=torch.float16, device="cuda")
    t.fill_(float("nan"))
    del t


def weights(N, K, fmt, dtype, gen, group_size):
    zeros = None
    w = (torch.randn((N, K), generator=gen, device="cuda") * K ** -0.5).to(dtype)
    if fmt == "int4":
        q, s, _ = dg.quantize_int4(w, group_size)
        return q, s, None, "int4"
    if fmt == "int4_zeros":
        q, s, zeros = dg.quantize_int4(w, group_size, symmetric=False)
        return q, s, zeros, "int4"
    if fmt == "int4_f32":
        q, s, _ = dg.quantize_int4(w, group_size, scale_dtype=torch.float32)
        return q, s, None, "int4"
    q, s = dg.quantize_fp4(w.float(), group_size, fmt.split("_")[1])
    return q, s, None, "fp4"


def assert_matches_torch(M, N, K, fmt, dtype, group_size, **config):
    gen = torch.Generator(device="cuda").manual_seed(M * 7 + N + K)
    x = torch.randn((M, K), generator=gen, device="cuda").to(dtype)
    q, s, z, weight_format = weights(N, K, fmt, dtype, gen, group_size)
    poison_allocator(M * N * 2 * 4)
    out = dg.w4a16_gemm_with_config(x, q, s, z, group_size, weight_format, **config)
    torch.cuda.synchronize()
    assert out.shape == (M, N) and out.dtype == dtype
    assert not torch.isnan(out).any(), "an output element was never written (still NaN)"
    w = dg.dequantize(q, s, z, group_size, weight_format).double()
    ref = x.double() @ w.t()
    bound = UNIT[dtype] * (ref.abs() + x.double().abs() @ w.abs().t()) * 1.01 + SUBNORMAL_HALF_STEP[dtype]
    err = (out.double() - ref).abs()
    assert (err <= bound).all(), f"max error {err.max().item():.3g}, worst excess {(err - bound).max().item():.3g}"
    return out


@pytest.mark.parametrize("M", [1, 8, 16])
@pytest.mark.parametrize("N,K", [(14336, 4096), (4096, 14336)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_llama_mlp(M, N, K, dtype):
    assert assert_matches_torch(M, N, K, "int4", dtype, 128).isfinite().all()


@pytest.mark.parametrize("fmt,group_size", [("int4_zeros", 128), ("int4", 32), ("int4", 64), ("int4", -1),
                                            ("int4_f32", 128), ("fp4_e8m0", 32), ("fp4_e4m3", 16)])
@pytest.mark.parametrize("M", [3, 16, 100])
def test_formats_both_paths(fmt, group_size, M):
    assert assert_matches_torch(M, 4096, 4096, fmt, torch.bfloat16, group_size).isfinite().all()


@pytest.mark.parametrize("M", [17, 64, 333, 2048])
def test_prefill(M):
    assert assert_matches_torch(M, 4096, 4096, "int4", torch.float16, 128).isfinite().all()


@pytest.mark.parametrize("M,N,K", [(1, 72, 200), (5, 1000, 1032), (40, 72, 264), (16, 136, 4104)])
def test_ragged(M, N, K):
    assert assert_matches_torch(M, N, K, "int4_zeros", torch.float16, 8 if K % 32 else 32).isfinite().all()


def test_forced_paths_and_splits_agree():
    """Both programs and several split counts give results within the same bound, and the
    split-K sum is deterministic (identical across runs)."""
    a = assert_matches_torch(8, 4096, 14336, "int4", torch.bfloat16, 128, path="decode", splits=7)
    b = assert_matches_torch(8, 4096, 14336, "int4", torch.bfloat16, 128, path="decode", splits=7)
    assert torch.equal(a, b)
    assert_matches_torch(8, 4096, 14336, "int4", torch.bfloat16, 128, path="prefill")
    assert_matches_torch(8, 4096, 14336, "int4", torch.bfloat16, 128, path="decode", splits=1)
    assert_matches_torch(33, 4096, 14336, "int4_zeros", torch.bfloat16, 128, path="decode")
    assert_matches_torch(64, 4096, 4096, "fp4_e8m0", torch.bfloat16, 32, path="decode")


@pytest.mark.parametrize("config", [dict(post_scale=False), dict(pipeline="legacy", block_N=64, threads=128),
                                    dict(pipeline="auto", block_N=64, threads=128),
                                    dict(block_N=64, threads=128, num_stages=3),
                                    dict(block_K=128, chunk_K=128, num_stages=4),
                                    dict(block_K=512, chunk_K=128, num_stages=3),
                                    dict(block_K=256, chunk_K=256, num_stages=4),
                                    dict(pipeline="legacy", block_N=64, threads=128, block_K=512, num_stages=4,
                                         splits=3)])
@pytest.mark.parametrize("M,N,K", [(1, 4096, 14336), (16, 14336, 4096), (5, 1000, 1032)])
def test_decode_tiles(config, M, N, K):
    """The tiles bench_w4a16.py --sweep times, within the same bound (ragged N and K too)."""
    assert assert_matches_torch(M, N, K, "int4_zeros" if M == 5 else "int4", torch.bfloat16, 8 if K % 32 else 128, path="decode", **config).isfinite().all()


@pytest.mark.parametrize("fmt,group_size", [("int4", 128), ("int4_zeros", 64), ("fp4_e8m0", 32), ("int4_f32", 128)])
@pytest.mark.parametrize("mode", ["dequant", "fused"])
@pytest.mark.parametrize("M", [17, 512])
def test_prefill_modes(fmt, group_size, mode, M):
    assert assert_matches_torch(M, 4096, 4104 if fmt == "int4_zeros" else 4096, fmt, torch.bfloat16, group_size, prefill_mode=mode).isfinite().all()


def test_prefill_dequant_tiles():
    for cfg in [dict(dequant_block_N=64, dequant_block_K=256), dict(dequant_block_N=16, dequant_block_K=512),
                dict(dequant_block_N=32, dequant_block_K=512, dequant_threads=128)]:
        assert_matches_torch(100, 1000, 1032, "int4_zeros", torch.float16, 8, prefill_mode="dequant", **cfg)


@pytest.mark.parametrize("exp", [-20, 20])
def test_extreme_scales(exp):
    gen = torch.Generator(device="cuda").manual_seed(5)
    N, K = 256, 1024
    x = torch.randn((4, K), generator=gen, device="cuda").bfloat16()
    q = dg.pack_int4(torch.randint(0, 16, (N, K), generator=gen, device="cuda"))
    s = torch.full((N, K // 32), 2.0 ** exp, device="cuda", dtype=torch.bfloat16)
    e = torch.full((N, K // 32), 127 + exp, device="cuda", dtype=torch.uint8)
    for scales, fmt in ((s, "int4"), (e, "fp4")):
        for xr in (x, x.repeat(10, 1)):          # the decode path (4 rows), then the prefill path (40)
            out = dg.w4a16_gemm(xr, q, scales, None, 32, fmt)
            ref = xr.double() @ dg.dequantize(q, scales, None, 32, fmt).double().t()
            torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
