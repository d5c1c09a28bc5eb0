"""tfloat32 on the CPU (tests/python/tf32_programs.py; the GPU side in gpu/test_tf32_gpu.py):
T.tfloat32 as a dtype, conversions into it rounding as cvt.rna.tf32.f32 does, T.gemm on
float32 / tfloat32 operands lowering to mma.sync m16n8k8 tf32 (also on sm_90a: wgmma is
not used for them), and the reference and the simulator rounding the operands to tf32
as the tensor cores take them. Against torch in float64 from the rounded operands, fresh
random inputs, aligned and ragged shapes."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tf32_programs as tp  # noqa: E402

RUNS = [tt.reference, tt.simulate]
# (M, N, K, on-chip dtype, transpose_A, transpose_B, A in registers, block_K)
GEMMS = [(32, 32, 32, "float32", False, True, False, None), (32, 32, 32, "tfloat32", False, False, False, None),
         (64, 32, 48, "float32", True, False, False, 16), (32, 64, 32, "tfloat32", True, True, False, None),
         (32, 32, 32, "float32", False, True, True, None), (32, 96, 64, "tfloat32", False, False, True, 32),
         (48, 32, 24, "float32", False, False, False, 8)]


def operands(M, N, K, ta, tb, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn((K, M) if ta else (M, K), generator=g)
    b = torch.randn((N, K) if tb else (K, N), generator=g)
    return a, b, tp.tf32_matmul(a.T if ta else a, b.T if tb else b)


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("M,N,K,dtype,ta,tb,regs,block_K", GEMMS)
def test_gemm_rounds_its_operands_to_tf32(run, M, N, K, dtype, ta, tb, regs, block_K):
    k = tegula.compile(tp.gemm_program(M, N, K, dtype, ta, tb, regs, block_K=block_K), out_idx=[2], target="sm_90a")
    a, b, want = operands(M, N, K, ta, tb, M * N + K)
    c = run(k, a, b)
    # Summed in double and rounded once: float32's rounding of the sum is all that is left.
    torch.testing.assert_close(c.double(), want, rtol=1e-6, atol=1e-5)
    # ... and the tf32 rounding is there: float32 operands give another product.
    exact = (a.T if ta else a).double() @ (b.T if tb else b).double()
    assert (c.double() - exact).abs().max() > 1e-4


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype,ta,tb,regs", [("float32", False, True, False), ("tfloat32", True, False, False),
                                               ("tfloat32", False, False, True)])
def test_gemm_on_32_bit_operands_is_mma_tf32(target, dtype, ta, tb, regs, tmp_path):
    from test_gemm_compile import _sass

    k = tegula.compile(tp.gemm_program(64, 64, 32, dtype, ta, tb, regs), out_idx=[2], target=target)
    src = k.get_kernel_source()
    assert ("gemm_rs<" if regs else "gemm_ss<") in src and "wgmma" not in src
    sass = _sass(k.cubin(), tmp_path)
    assert "HMMA.1688.F32.TF32" in sass, "no m16n8k8 tf32 tensor-core instruction"


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("n,src", [(300, "float32"), (128, "float32"), (77, "bfloat16"), (200, "float16")])
def test_conversion_into_tfloat32_rounds(run, n, src):
    k = tegula.compile(tp.round_program(n, src), out_idx=[1, 2], target="sm_90a")
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g) * 100).to(getattr(torch, src))
    x[:4] = torch.tensor([1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11), float("inf")]).to(x.dtype)
    y, z = run(k, x)
    want = tp.to_tf32(x.float())
    assert y.dtype == torch.float32 and torch.equal(y, want)
    assert torch.equal(z, want * want)  # tfloat32 arithmetic computes in float32


def test_ties_round_away_from_zero():
    x = torch.tensor([1 + 2**-11, -(1 + 2**-11), 1 + 3 * 2**-11, 2**-11 * (1 + 2**-11)])
    want = torch.tensor([1 + 2**-10, -(1 + 2**-10), 1 + 2 * 2**-10, 2**-11 * (1 + 2**-10)])
    assert torch.equal(tp.to_tf32(x), want)


@pytest.mark.parametrize("run", RUNS, ids=["reference", "simulate"])
@pytest.mark.parametrize("tokens,hc_mult3,hidden", [(64, 24, 512), (45, 24, 256), (32, 20, 768)])
def test_mhc_gemm_and_sum_of_squares(run, tokens, hc_mult3, hidden):
    k = tegula.compile(tp.mhc_gemm_sqrsum_program(hc_mult3, hidden), target="sm_90a")
    g = torch.Generator().manual_seed(tokens + hidden)
    x = torch.randn(tokens, hidden, generator=g).bfloat16()
    fn = torch.randn(hc_mult3, hidden, generator=g)
    out = torch.full((tokens, hc_mult3), float("nan"))
    sqrsum = torch.full((tokens,), float("nan"))
    run(k, x, fn, out, sqrsum)
    # fn is passed as tfloat32 unconverted: the gemm rounds it on the way in.
    torch.testing.assert_close(out.double(), tp.tf32_matmul(x.float(), fn.T), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(sqrsum.double(), (x.double() ** 2).sum(1), rtol=1e-5, atol=1e-4)


def test_tfloat32_is_a_dtype():
    assert T.tfloat32 == "tfloat32" and T.tfloat32.itemsize == 4 and T.tfloat32.as_torch() == torch.float32
    assert T.dtype("tf32") == T.tfloat32 and T.tfloat32.is_float()


def test_gemm_on_float32_needs_float32_accumulation():
    @T.prim_func
    def bad(A: T.Tensor((32, 32), "float32"), C: T.Tensor((32, 32), "float16")):
        with T.Kernel(1, threads=128):
            a = T.alloc_shared((32, 32), "float32")
            c = T.alloc_fragment((32, 32), "float16")
            T.copy(A, a)
            T.gemm(a, a, c, transpose_B=True)
            T.copy(c, C)

    with pytest.raises(tegula.TegulaCompileError, match="accumulates in float32"):
        tegula.compile(bad, target="sm_90a")
