"""MLA decode over an FP8 (float8_e4m3fn) KV cache, without a GPU: the program simulated
thread by thread against float64 attention over the dequantized cache (kv_scale x the
8-bit values), contiguous and paged, ragged lengths (0, mid-page, past the cache), NaN in
the unused tail; its compiled form (8-bit global reads, the 16-bit gemms, no spill); the
argument errors of the entry point and the operator; the operator's fake under
FakeTensorMode and torch.compile. The GPU tier is tests/python/gpu/test_mla_decode_fp8_gpu.py."""
import importlib
import math
import os
import shutil
import subprocess

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

tegula = pytest.importorskip("tegula")
from tegula.testing import simulate  # noqa: E402

mla = importlib.import_module("tegula.kernels.mla_decode")
ops = importlib.import_module("tegula.kernels._ops")
F8 = torch.float8_e4m3fn


def _reference(q, kv8, lens, kv_scale, sm_scale=None):
    """out (B, H, 512) and natural lse, float64, over the dequantized contiguous cache."""
    scale = sm_scale if sm_scale is not None else 1 / math.sqrt(576)
    kv = kv8.double() * kv_scale
    B, H, _ = q.shape
    out = torch.zeros(B, H, 512, dtype=torch.float64)
    lse = torch.full((B, H), -math.inf, dtype=torch.float64)
    for b in range(B):
        n = min(int(lens[b]), kv.shape[1])
        if n:
            s = q[b].double() @ kv[b, :n].T * scale
            lse[b] = torch.logsumexp(s, -1)
            out[b] = torch.softmax(s, -1) @ kv[b, :n, :512]
    return out, lse


def _fp8_cache(shape, gen, amax=300.0):
    """Values spread over e4m3's range, subnormals included."""
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-10, 3, shape, generator=gen).float())
    return (x * (amax / 8)).clamp(-448, 448).to(F8)


@pytest.mark.parametrize("heads, paged, dtype, block_N, convert", [
    (16, False, "float16", 32, "cvt"), (32, True, "bfloat16", 32, "cvt"), (16, True, "float16", 64, "cvt"),
    (16, False, "bfloat16", 32, "bits"), (32, True, "float16", 32, "bits"), (16, True, "bfloat16", 64, "bits"),
    (64, False, "bfloat16", 64, "bits")])
def test_fp8_program_simulates_right(heads, paged, dtype, block_N, convert):
    """32-key blocks (fp8_config's for a 16- or 32-head shard; paged: half a page a block)
    and 64-key ones; both conversions ("bits" also on the 64-head wgmma block, whose
    stores through a view are fenced)."""
    B, S, kv_scale = 3, 150, 0.0123
    k = tegula.compile(mla.mla_decode_program(B, heads, 3 if paged else S, 2, paged=paged,
                                              table_width=1 if paged else 0, dtype=dtype, block_N=block_N,
                                              num_stages=mla.fp8_stages(heads), kv_dtype=mla.FP8, convert=convert),
                       out_idx=[5, 6], target="sm_90a", pass_configs=mla.FAST_MATH)
    gen = torch.Generator().manual_seed(heads)
    tdtype = getattr(torch, dtype)
    q = torch.randn(B, heads, 576, generator=gen).to(tdtype)
    rows = 64 if paged else S
    kv = _fp8_cache((B, rows, 576), gen)
    lens = torch.tensor([0, 37, 999], dtype=torch.int32)
    ref_out, ref_lse = _reference(q, kv, lens, kv_scale)
    for b in range(B):
        kv[b, min(int(lens[b]), rows):] = float("nan")
    if paged:  # page b of sequence b is stored at page 2 - b
        cache, table = kv.flip(0).contiguous(), torch.tensor([[2], [1], [0]], dtype=torch.int32)
    else:
        cache, table = kv, torch.zeros(B, 1, dtype=torch.int32)
    out, lse = simulate(k, q, cache, table, lens, kv_scale)
    assert out.dtype == tdtype and lse.dtype == torch.float32
    assert torch.equal(out[0].float(), torch.zeros(heads, 512)) and torch.isinf(lse[0]).all()
    tol = 2e-3 if dtype == "float16" else 1.6e-2
    for b in (1, 2):
        scale = ref_out[b].abs().max()
        torch.testing.assert_close(out[b].double() / scale, ref_out[b] / scale, rtol=tol, atol=tol)
        torch.testing.assert_close(lse[b].double(), ref_lse[b], rtol=1e-4, atol=1e-4)


def _convert_program(dtype, rows=8):
    """The "bits" conversion alone: X (rows, 64) e4m3 -> Y (rows, 64) in dtype, rows at and
    past n zero (mla.convert_bits with masking)."""
    import tegula.language as T

    @T.prim_func
    def conv(X: T.Tensor((rows, 64), mla.FP8), n: T.int32, Y: T.Tensor((rows, 64), dtype)):
        with T.Kernel(1, threads=128):
            x_s = T.alloc_shared((rows, 64), mla.FP8)
            y_s = T.alloc_shared((rows, 64), dtype)
            y_pairs = T.view(y_s, shape=[rows, 32], dtype="uint32")
            T.copy(X, x_s)
            mla.convert_bits(x_s, y_pairs, rows, 16, 0, 0, n, True, dtype)
            T.copy(y_s, Y)

    return tegula.compile(conv, out_idx=[2], target="sm_90a")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_bits_conversion_is_exact_for_every_byte(dtype):
    """Every e4m3 code (subnormals, +-0, the largest, both NaNs) converts bit-exactly as
    torch converts it; NaN stays NaN; rows past n read zero."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    perm = torch.randperm(256, generator=torch.Generator().manual_seed(1))
    x = torch.cat([codes, codes[perm]]).reshape(8, 64).view(F8)
    y = simulate(_convert_program(dtype), x, 6)
    ref = x.to(getattr(torch, dtype))
    nan = torch.isnan(ref[:6])
    assert nan.sum() >= 2 and torch.equal(torch.isnan(y[:6]), nan)
    assert torch.equal(y[:6][~nan].view(torch.int16), ref[:6][~nan].view(torch.int16))
    assert torch.equal(y[6:].view(torch.int16), torch.zeros(2, 64, dtype=torch.int16))


def test_fp8_bits_program_propagates_nan_of_a_used_key():
    """A NaN code in a key the sequence uses makes that sequence's output NaN (as attention
    over the dequantized cache does); the other sequence is untouched."""
    B, S, H = 2, 40, 16
    k = tegula.compile(mla.mla_decode_program(B, H, S, 1, dtype="bfloat16", block_N=32, num_stages=2,
                                              kv_dtype=mla.FP8, convert="bits"),
                       out_idx=[5, 6], target="sm_90a", pass_configs=mla.FAST_MATH)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(B, H, 576, generator=gen).bfloat16()
    kv = _fp8_cache((B, S, 576), gen)
    kv.view(torch.uint8)[0, 3, 100] = 0xFF
    lens = torch.tensor([S, S], dtype=torch.int32)
    out, _ = simulate(k, q, kv, torch.zeros(B, 1, dtype=torch.int32), lens, 0.5)
    ref, _ = _reference(q, kv, lens, 0.5)
    assert torch.isnan(out[0]).all() and torch.isnan(ref[0]).all()
    scale = ref[1].abs().max()
    torch.testing.assert_close(out[1].double() / scale, ref[1] / scale, rtol=1.6e-2, atol=1.6e-2)


def _tool():
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(tool):
        try:
            import triton

            tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        except ImportError:
            pass
    if not os.path.exists(tool):
        pytest.skip("no cuobjdump (CUDA toolkit or triton) to disassemble with")
    return tool


def test_fp8_program_reads_8_bits_and_keeps_the_16_bit_gemms(tmp_path):
    """128 heads (two warpgroups on wgmma): the cache is an fp8 pointer read by 16-byte
    cp.async into 8-bit stages, converted by the paired e4m3 -> f16 instruction, and the
    gemms are the 16-bit program's, with no spill."""
    k = tegula.compile(mla.mla_decode_program(4, 128, 1024, 4, kv_dtype=mla.FP8), out_idx=[5, 6],
                       target="sm_90a", pass_configs=mla.FAST_MATH)
    src = k.get_kernel_source()
    assert "fp8_e4m3_t* __restrict__ KV" in src and "float kv_scale" in src
    assert "cp_async_16_pred(&KV8_shared" in src and "__nv_cvt_fp8x2_to_halfraw2" in src
    assert src.count("wgmma_ss<64, 64, 512, 1, 2") == 1 and src.count("wgmma_rs<64, 512, 64, 1, 2") == 1
    path = tmp_path / "k.cubin"
    path.write_bytes(k.cubin(0))
    usage = subprocess.run([_tool(), "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    assert "STACK:0" in usage and "LOCAL:0" in usage, usage
    # The "bits" conversion: no e4m3 conversion instruction, the exact multiply in bfloat16,
    # the wgmma reads fenced after the stores through a view; still no spill.
    kb = tegula.compile(mla.mla_decode_program(4, 128, 1024, 4, dtype="bfloat16", kv_dtype=mla.FP8,
                                               convert="bits"),
                        out_idx=[5, 6], target="sm_90a", pass_configs=mla.FAST_MATH)
    srcb = kb.get_kernel_source()
    assert "__nv_cvt_fp8" not in srcb and "fence_proxy_async()" in srcb and "load_shared_128" in srcb
    path.write_bytes(kb.cubin(0))
    usage = subprocess.run([_tool(), "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    assert "STACK:0" in usage and "LOCAL:0" in usage, usage
    # The 16-bit program is untouched by the FP8 one's existence: no scalar, 16-bit cache.
    src16 = tegula.compile(mla.mla_decode_program(4, 128, 1024, 4), out_idx=[4, 5], target="sm_90a",
                           pass_configs=mla.FAST_MATH).get_kernel_source()
    assert "kv_scale" not in src16 and "fp8" not in src16.split("__global__")[1].split(")")[0]


def _args(B=2, H=16, S=64, dtype=torch.float16, device="cpu"):
    return (torch.zeros(B, H, 576, dtype=dtype, device=device), torch.zeros(B, S, 576, dtype=F8, device=device),
            torch.full((B,), S, dtype=torch.int32, device=device))


@pytest.mark.parametrize("fn", [ops.mla_decode, ops.EAGER["mla_decode"]], ids=["public", "eager"])
def test_fp8_argument_errors_name_the_argument(fn):
    q, kv, lens = _args()
    with pytest.raises(ValueError, match=r"kv_cache.*float8_e4m3fn"):
        fn(q, kv.to(torch.float8_e5m2), lens)
    with pytest.raises(ValueError, match=r"kv_cache.*float8_e4m3fn"):
        fn(q, kv.float(), lens)
    with pytest.raises(ValueError, match=r"kv_cache.*float8_e4m3fn"):
        fn(q, kv.to(torch.bfloat16), lens)          # 16-bit, but not q's dtype
    with pytest.raises(ValueError, match=r"\bq\b"):
        fn(q.to(F8), kv, lens)                        # q stays 16-bit
    with pytest.raises(ValueError, match=r"kv_scale.*float8_e4m3fn kv_cache only"):
        fn(q, kv.half(), lens, kv_scale=0.5)          # a 16-bit cache takes no scale
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"kv_scale.*positive finite"):
            fn(q, kv, lens, kv_scale=bad)
    for bad in (torch.tensor([0.5]), "0.5", True):
        with pytest.raises(TypeError, match=r"kv_scale"):
            fn(q, kv, lens, kv_scale=bad)
    with pytest.raises(ValueError, match=r"kv_cache.*num_pages, 64, 576"):
        fn(q, kv[:, :50], lens, block_table=torch.zeros(2, 1, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"CUDA"):     # well-formed: only the device is wrong
        fn(q, kv, lens, kv_scale=2)


def test_fp8_op_schema_and_fake():
    schema = str(torch.ops.tegula.mla_decode.default._schema)
    assert "float? kv_scale=None" in schema
    with FakeTensorMode():
        q, kv, lens = _args(3, 32, 128, torch.bfloat16, "cuda")
        out, lse = mla.mla_decode(q, kv, lens, return_lse=True, kv_scale=0.25)
        assert out.shape == (3, 32, 512) and out.dtype == torch.bfloat16 and out.device.type == "cuda"
        assert lse.shape == (3, 32) and lse.dtype == torch.float32
        pages = torch.empty(6, 64, 576, dtype=F8, device="cuda")
        table = torch.zeros(3, 2, dtype=torch.int32, device="cuda")
        out = mla.mla_decode(q, pages, lens, block_table=table)
        assert out.shape == (3, 32, 512)
        with pytest.raises(ValueError, match="kv_scale"):   # the fake checks as the entry point does
            torch.ops.tegula.mla_decode(q, kv.to(torch.bfloat16), lens, None, None, None, None, 0.5)


def test_fp8_traces_through_torch_compile_without_graph_break():
    def step(q, kv, lens):
        return mla.mla_decode(q, kv, lens, kv_scale=0.5) * 2

    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("eager")
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    with FakeTensorMode():
        q, kv, lens = _args(2, 16, 64, torch.float16, "cuda")
        out = compiled(q, kv, lens)
        assert out.shape == (2, 16, 512)
    assert counter.frame_count == 1
    calls = [n for g in counter.graphs for n in g.graph.nodes
             if n.op == "call_function" and n.target in (torch.ops.tegula.mla_decode,
                                                         torch.ops.tegula.mla_decode.default)]
    assert len(calls) == 1 and 0.5 in calls[0].args   # the scale reaches the op
