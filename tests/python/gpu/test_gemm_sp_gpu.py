"""T.gemm_sp on the GPU (tests/python/gemm_sp_programs.py; the CPU side in
cpu/test_gemm_sp.py): C = A @ B with A 2:4 sparse along K, given as kept elements and
metadata, on mma.sp m16n8k32 (sm_80 on; sm_90 too), against torch computing in float32
from the dense A, fresh random inputs, aligned and ragged M and N, the output poisoned with
NaN; the compressor kernel against torch; the two end to end.

Tolerance: the operands are float16 / bfloat16, so every product is exact in float32 and
only the order of the float32 sums differs (|C| ~ sqrt(K / 2) for unit-normal operands):
rtol 1e-3, atol 1e-3 * sqrt(K). A float16 accumulator rounds each K tile's sum into
float16: rtol 1e-2, atol 0.1."""
import pytest
import torch

import tegula
import gemm_sp_programs as sp

pytestmark = pytest.mark.gpu

GEMMS = [
    (128, 128, 128, dict(block_M=128, block_N=128, block_K=64)),
    (1024, 1024, 1024, dict(block_M=128, block_N=128, block_K=64, num_stages=2, threads=128)),  # TileLang's example
    (1000, 520, 512, dict()),
    (80, 72, 192, dict()),
    (256, 256, 256, dict(trans_A=True)),
    (300, 200, 128, dict(trans_B=True, block_K=32, num_stages=1)),
    (256, 128, 256, dict(e_dtype="int8")),
    (333, 256, 512, dict(e_dtype="int32", trans_A=True, trans_B=True, block_K=128, num_stages=3)),
    (256, 500, 256, dict(e_dtype="uint16", policy="FullCol", threads=256, block_N=128)),
    (200, 128, 384, dict(dtype="bfloat16", policy="FullRow", block_M=64, block_N=32)),
    (512, 256, 256, dict(clear_accum=True, block_K=32, threads=64)),
    (32, 16, 96, dict(block_M=32, block_N=16, block_K=32, threads=32)),
    (256, 256, 256, dict(a_in_registers=True, policy="FullRow")),
    (200, 256, 128, dict(a_in_registers=True, trans_A=True, trans_B=True, block_N=128, block_K=32)),
    (256, 72, 512, dict(a_in_registers=True, dtype="bfloat16", e_dtype="int8", threads=64)),
    (128, 256, 256, dict(a_in_registers=True, policy="Square", threads=256, block_M=128, block_N=128)),
]


def case_id(case):
    M, N, K, kw = case
    return f"{M}x{N}x{K}-" + "-".join(f"{k}={v}" for k, v in kw.items())


def run(M, N, K, kw):
    """(C from the kernel, C from torch in float32)."""
    kernel = tegula.compile(sp.gemm_sp_program(M, N, K, **kw))
    a, e, b, dense = sp.operands(M, N, K, kw.get("dtype", "float16"), kw.get("e_dtype", "int16"),
                                 kw.get("trans_A", False), kw.get("trans_B", False), device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, e, b, c)
    want = dense.float() @ (b.float().T if kw.get("trans_B") else b.float())
    return c, want


@pytest.fixture(autouse=True)
def exact_float32_matmul():
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is float32, not tf32
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("case", GEMMS, ids=[case_id(c) for c in GEMMS])
def test_gemm_sp_matches_torch(case):
    M, N, K, kw = case
    c, want = run(M, N, K, kw)
    assert not torch.isnan(c).any(), "NaN in the output (unwritten?)"
    torch.testing.assert_close(c, want, rtol=1e-3, atol=1e-3 * K**0.5)


@pytest.mark.parametrize("M,N,K", [(256, 256, 512), (200, 130, 256)])
def test_gemm_sp_accumulates_in_float16(M, N, K):
    c, want = run(M, N, K, dict(accum="float16"))
    torch.testing.assert_close(c, want, rtol=1e-2, atol=0.1)


def test_groups_naming_one_position_twice_read_as_zero_and_one():
    M, N, K = 128, 128, 128
    kernel = tegula.compile(sp.gemm_sp_program(M, N, K))
    a, e, b, _ = sp.operands(M, N, K, device="cuda")
    e[5] = 0
    e[9, 1] = 0b1111_0101_1010_0000 - 2**16
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, e, b, c)
    torch.testing.assert_close(c, sp.decompress(a.cpu(), e.cpu()).cuda().float() @ b.float(), rtol=1e-3,
                               atol=1e-3 * K**0.5)


@pytest.mark.parametrize("e_dtype", ["int8", "int16", "int32"])
@pytest.mark.parametrize("S,K", [(16, 64), (512, 1024), (48, 256)])
def test_compress_kernel_matches_torch(e_dtype, S, K):
    k = tegula.compile(sp.compress_program(K, e_dtype, block_K=64), out_idx=[1, 2])
    dense = sp.semi_sparse(S, K, sparser=0.3).cuda()
    kept, e = k(dense)
    want_kept, want_e = sp.compress(dense.cpu(), e_dtype)
    assert torch.equal(kept.cpu(), want_kept) and torch.equal(e.cpu(), want_e)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_compress_then_gemm_sp(dtype):
    M, N, K = 512, 384, 1024
    compress = tegula.compile(sp.compress_program(K, "int16", dtype=dtype, block_K=128), out_idx=[1, 2])
    gemm = tegula.compile(sp.gemm_sp_program(M, N, K, dtype=dtype, block_M=128, block_N=128))
    dense = sp.semi_sparse(M, K, getattr(torch, dtype)).cuda()
    b = torch.randn(K, N, device="cuda").to(getattr(torch, dtype))
    kept, e = compress(dense)
    c = torch.full((M, N), float("nan"), device="cuda")
    gemm(kept, e, b, c)
    torch.testing.assert_close(c, dense.float() @ b.float(), rtol=1e-3, atol=1e-3 * K**0.5)
