"""8-bit floats on the CPU: every conversion pair agrees between the reference, the
simulator and torch's rounding with CUDA's saturation (out-of-range values become the
largest finite value, as the GPU's conversions make them; torch gives NaN or inf there),
arithmetic on 8-bit values computes in float32, and the generated code compiles."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import float8_programs as fp  # noqa: E402


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.double().nan_to_num(123.0), b.double().nan_to_num(123.0))


@pytest.mark.parametrize("src,dst", fp.PAIRS)
@pytest.mark.parametrize("loop", [False, True], ids=["copy", "loop"])
def test_conversions(src, dst, loop):
    k = tegula.compile(fp.convert_program(1000, src, dst, loop), out_idx=[1], target="sm_90a")
    a = fp.sample(1000, src, torch.Generator().manual_seed(len(src + dst)))
    want = fp.saturating(a.double(), dst) if dst in fp.FLOAT8 else a.to(getattr(torch, dst))
    assert same(tt.reference(k, a), want)
    assert same(tt.simulate(k, a), want)
    assert k.cubin()


@pytest.mark.parametrize("dst", fp.FLOAT8)
def test_row_quantization(dst):
    k = tegula.compile(fp.quantize_program(6, 300, dst), out_idx=[1, 2], target="sm_90a")
    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(9)) * 5
    s = x.abs().amax(1).clamp_min(1e-4) / fp.FINITE_MAX[dst]
    want = (x / s[:, None]).to(getattr(torch, dst))
    for run in (tt.reference, tt.simulate):
        y, scale = run(k, x)
        torch.testing.assert_close(scale, s)
        assert (y.float() != want.float()).sum() <= 2  # x / s rounds in float32 on one side, float64 on the other


def test_arithmetic_on_float8_values_is_float32():
    @T.prim_func
    def f(A: T.Tensor((64,), "float8_e4m3fn"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                B[i] = A[i] * 0.5 + T.exp(A[i])

    k = tegula.compile(f, out_idx=[1], target="sm_90a")
    a = torch.linspace(-3, 3, 64).to(torch.float8_e4m3fn)
    torch.testing.assert_close(tt.reference(k, a), a.float() * 0.5 + torch.exp(a.float()))
    assert "cast<float>(vld_" in k.get_kernel_source()  # loaded as a vector of 8-bit floats, widened


def test_dtype_names():
    # TileLang's T.float8_e4m3 is a dtype of its own name (a test parametrized by it is
    # named ...-float8_e4m3]) and the same CUDA and torch type as T.float8_e4m3fn.
    assert T.float8_e4m3 == "float8_e4m3" and T.float8_e4m3fn == "float8_e4m3fn"
    assert T.float8_e4m3.name == T.float8_e4m3fn.name == "float8_e4m3fn" == T.dtype(T.float8_e4m3)
    assert T.float8_e4m3.as_torch() is torch.float8_e4m3fn and T.float8_e4m3.bits == 8
    assert T.float8_e4m3fn.as_torch() is torch.float8_e4m3fn and T.float8_e5m2.as_torch() is torch.float8_e5m2
    assert T.float8_e5m2.itemsize == 1 and T.dtype(torch.float8_e5m2) == "float8_e5m2"


@pytest.mark.parametrize("dtype", fp.FLOAT8)
def test_infinity_and_extreme_values_are_literals_of_the_type(dtype):
    prog, expected = fp.special_values_program(dtype)
    k = tegula.compile(prog, target="sm_90a")
    assert k.cubin()
    for run in (tt.reference, tt.simulate):
        a = torch.zeros(32, dtype=getattr(torch, dtype))
        run(k, a)
        assert same(a, expected())


def test_infinity_of_e4m3fn_is_an_error_naming_the_dtype():
    with pytest.raises(tegula.TegulaCompileError, match="float8_e4m3fn has no infinity"):
        @T.prim_func
        def f(A: T.Tensor((32,), "float8_e4m3fn")):
            with T.Kernel(1, threads=32):
                T.fill(A, T.infinity("float8_e4m3fn"))
