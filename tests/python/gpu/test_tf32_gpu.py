"""tfloat32 on the GPU (tests/python/tf32_programs.py; the CPU side in cpu/test_tf32.py):
T.gemm on float32 / tfloat32 operands runs mma.sync m16n8k8 tf32 (on sm_90a too) in every
transpose and with A in registers; conversions into tfloat32 round to nearest, ties away.
Fresh random inputs, aligned and ragged shapes, outputs poisoned with NaN.

Tolerances: against the product of the tf32-rounded operands summed in float64 the only
difference is float32 accumulation (relative 1e-5); against torch's float32 matmul (tf32
off) each product carries the operands' tf32 rounding (2^-11 relative each), so the error
grows as sqrt(K) times about 4e-4 for unit-normal operands: atol 2e-3 * sqrt(K) (five
standard deviations), rtol 1e-2."""
import pytest
import torch

import tegula
import tf32_programs as tp

pytestmark = pytest.mark.gpu

GEMMS = [(32, 32, 32, "float32", False, True, False, None), (32, 32, 32, "tfloat32", False, False, False, None),
         (64, 32, 48, "float32", True, False, False, 16), (32, 64, 32, "tfloat32", True, True, False, None),
         (32, 32, 32, "float32", False, True, True, None), (32, 96, 64, "tfloat32", False, False, True, 32),
         (48, 32, 24, "float32", False, False, False, 8), (128, 128, 512, "float32", False, True, False, 64),
         (64, 128, 256, "tfloat32", False, False, True, 32)]


@pytest.fixture(autouse=True)
def no_torch_tf32():
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference is float32
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.mark.parametrize("M,N,K,dtype,ta,tb,regs,block_K", GEMMS)
def test_gemm_on_tf32_tensor_cores(M, N, K, dtype, ta, tb, regs, block_K):
    k = tegula.compile(tp.gemm_program(M, N, K, dtype, ta, tb, regs, block_K=block_K), out_idx=[2])
    a = torch.randn((K, M) if ta else (M, K), device="cuda")
    b = torch.randn((N, K) if tb else (K, N), device="cuda")
    c = k(a, b)
    opa, opb = (a.T if ta else a), (b.T if tb else b)
    torch.testing.assert_close(c.double().cpu(), tp.tf32_matmul(opa.cpu(), opb.cpu()), rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(c, opa @ opb, rtol=1e-2, atol=2e-3 * K**0.5)


@pytest.mark.parametrize("n,src", [(300, "float32"), (128, "float32"), (77, "bfloat16"), (200, "float16")])
def test_conversion_into_tfloat32_rounds(n, src):
    k = tegula.compile(tp.round_program(n, src), out_idx=[1, 2])
    x = (torch.randn(n, device="cuda") * 100).to(getattr(torch, src))
    x[:4] = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), float("inf")], device="cuda").to(x.dtype)
    y, z = k(x)
    want = tp.to_tf32(x.float())
    assert torch.equal(y, want)
    assert torch.equal(z, want * want)


@pytest.mark.parametrize("tokens,hc_mult3,hidden", [(512, 24, 1024), (45, 24, 256),
                                                    (1000, 20, 768)])
def test_mhc_gemm_and_sum_of_squares(tokens, hc_mult3, hidden):
    k = tegula.compile(tp.mhc_gemm_sqrsum_program(hc_mult3, hidden))
    x = torch.randn(tokens, hidden, device="cuda").bfloat16()
    fn = torch.randn(hc_mult3, hidden, device="cuda")
    out = torch.full((tokens, hc_mult3), float("nan"), device="cuda")
    sqrsum = torch.full((tokens,), float("nan"), device="cuda")
    k(x, fn, out, sqrsum)
    # The tensor cores' tf32 products are summed in an order and precision of their own: the
    # rounded-operand model agrees to a few tf32 ulps of the sum's scale, not bit for bit.
    torch.testing.assert_close(out.double().cpu(), tp.tf32_matmul(x.float().cpu(), fn.T.cpu()), rtol=2e-3,
                               atol=4e-3 * hidden ** 0.5)
    torch.testing.assert_close(out, x.float() @ fn.T, rtol=2e-2, atol=2e-1)
    torch.testing.assert_close(sqrsum, (x.float() ** 2).sum(1), rtol=1e-5, atol=1e-3)
