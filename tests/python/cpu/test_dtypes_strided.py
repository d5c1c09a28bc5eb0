"""T.StridedTensor, torch dtypes as dtypes, float8_e8m0fnu and the packed 4-bit types on
the CPU (tests/python/dtype_programs.py; the GPU side in gpu/test_dtypes_strided_gpu.py):
the reference and the simulator against torch, the generated code compiles, and bad
declarations are errors naming what is wrong."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import dtype_programs as dp  # noqa: E402


def test_strided_spec_forms():
    s = T.dynamic("s")
    a = T.StridedTensor[(4, 8), (s, 1), T.float32]
    b = T.StridedTensor((4, 8), (16, 1), "float16")
    assert a.strides[1] == 1 and a.strides[0] is s and b.strides == (16, 1) and b.dtype == "float16"
    with pytest.raises(ValueError, match="2 strides for 3 dimensions"):
        T.StridedTensor[(4, 8, 2), (8, 1), T.float32]
    with pytest.raises(ValueError, match="stride must be"):
        T.StridedTensor[(4, 8), (1.5, 1), T.float32]


@pytest.mark.parametrize("M,N,pad", [(64, 64, 0), (50, 70, 3)])
def test_strided_input_reference_and_simulator(M, N, pad):
    k = tegula.compile(dp.strided_scale_program(M, N, (N + pad, 1)), out_idx=[1], target="sm_90a")
    x = torch.randn(M, N + pad, generator=torch.Generator().manual_seed(M))[:, :N]
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(k, x), 2 * x + 1)
    src = k.get_kernel_source()
    assert f"* {N + pad}" in src
    assert k.cubin()


def test_dynamic_strides_use_no_vectors_nor_bulk_copies():
    k = tegula.compile(dp.strided_scale_program(64, 64, None, dynamic=True), out_idx=[1], target="sm_90a")
    src = k.get_kernel_source()
    assert "* s0" in src and "* s1" in src
    assert "X[" in src and "reinterpret_cast<const float4" not in src.split("X[")[0][-200:]
    assert k.cubin()


def test_transposed_store_is_scalar_and_checks():
    k = tegula.compile(dp.strided_store_program(10, 64, (1, 10)), target="sm_90a")
    x = torch.randn(10, 64)
    y = torch.empty(64, 10).t()
    tt.reference(k, x, y)
    torch.testing.assert_close(y, x + 1)
    assert k.cubin()


def test_vectorized_when_static_strides_are_aligned():
    k = tegula.compile(dp.strided_scale_program(64, 64, (72, 1)), out_idx=[1], target="sm_90a")
    assert "float4" in k.get_kernel_source() or "Vec<float, 4>" in k.get_kernel_source()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint64, torch.int8, torch.int64, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.float8_e8m0fnu, torch.bfloat16, torch.uint16])
def test_torch_dtypes_as_dtypes(dtype):
    @tegula.jit(target="sm_90a")
    def fill(dtype, vec):
        @T.prim_func
        def main(A: T.Tensor[(64,), dtype]):
            with T.Kernel(1, threads=256):
                for i in T.vectorized(vec):
                    A[i] = T.cast(i + 1, dtype)

        return main

    k = fill(dtype, 4)
    assert k.cubin()
    a = torch.zeros(64, dtype=dtype)
    tt.reference(k, a)
    assert torch.equal(a[:4].double(), torch.arange(1, 5, dtype=torch.float64).to(dtype).double())


def e8m0_samples(n=1000):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(n, generator=g) * torch.exp2(torch.randint(-20, 20, (n,), generator=g).float())
    special = torch.tensor([0.0, -1.0, 1.5, 3.0, 0.75, 1e-40, float("inf"), float("nan"), 2**-127, 2**-128, 1.4, 6.0,
                            3e38, -0.0, 2**127, 1.5 * 2**127])
    return torch.cat([special, x])


def test_e8m0_conversions_round_as_torch():
    x = e8m0_samples()
    k = tegula.compile(dp.cast_program(x.numel(), "float32", T.float8_e8m0fnu), out_idx=[1], target="sm_90a")
    want = x.to(torch.float8_e8m0fnu).float()
    for run in (tt.reference, tt.simulate):
        got = run(k, x).float()
        assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))
    back = tegula.compile(dp.cast_program(300, torch.float8_e8m0fnu, "float32"), out_idx=[1], target="sm_90a")
    codes = torch.arange(300) % 256
    e = codes.to(torch.uint8).view(torch.float8_e8m0fnu)
    assert torch.equal(tt.reference(back, e).nan_to_num(7.0), e.float().nan_to_num(7.0))
    assert k.cubin() and back.cubin()


E2M1_CASES = [0.0, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, 100.0, -0.3, -2.6, -1e9, float("nan")]


def e2m1_round(v: float) -> float:
    """Nearest e2m1 value, ties to the even code, saturating; NaN gives 6."""
    if v != v:
        return 6.0
    best = min(range(8), key=lambda c: (abs(abs(v) - dp.E2M1[c].item()), c % 2))
    return -dp.E2M1[best].item() if v < 0 or (v == 0 and str(v).startswith("-")) else dp.E2M1[best].item()


def test_e2m1_conversions():
    x = torch.tensor(E2M1_CASES * 2, dtype=torch.float32)  # 32 elements: packed 16 bytes
    k = tegula.compile(dp.cast_program(32, "float32", T.float4_e2m1fn), out_idx=[1], target="sm_90a")
    want = torch.tensor([e2m1_round(v) for v in x.tolist()])
    for run in (tt.reference, tt.simulate):
        out = run(k, x)
        assert out.dtype == T.float4_e2m1fn.as_torch() and out.shape == (16,)
        assert torch.equal(tt.unpack_4bit(out, "float4_e2m1fn").float(), want)
    assert k.cubin()


@pytest.mark.parametrize("dtype", ["int4", "uint4", "float4_e2m1fn"])
@pytest.mark.parametrize("M,N", [(3, 16), (5, 38)])
def test_packed_roundtrip(dtype, M, N):
    k = tegula.compile(dp.packed_roundtrip_program(M, N, dtype), out_idx=[1, 2], target="sm_90a")
    raw = torch.randint(0, 256, (M, N // 2), dtype=torch.uint8, generator=torch.Generator().manual_seed(N))
    x = tt.unpack_4bit(raw, dtype)
    if dtype == "float4_e2m1fn":
        want_z = torch.tensor([e2m1_round(v) for v in (x + 1).flatten().tolist()]).reshape(M, N)
    else:
        lo, span = (-8, 16) if dtype == "int4" else (0, 16)
        want_z = ((x + 1 - lo) % span + lo)
    for run in (tt.reference, tt.simulate):
        y, z = run(k, raw)
        torch.testing.assert_close(y, (x + 1).float())
        assert z.shape == (M, N // 2)
        assert torch.equal(tt.unpack_4bit(z, dtype), want_z.double())
    src = k.get_kernel_source()
    assert "packed_store(" in src and "packed_load<" in src
    assert k.cubin()


def test_packed_scatter_compiles_and_simulates():
    k = tegula.compile(dp.packed_scatter_program(8), target="sm_90a")
    src = torch.randint(0, 256, (8, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(2)).int()
    dst = torch.zeros(8, 64, dtype=torch.uint8)
    tt.reference(k, src, dst, perm)
    inv = torch.empty_like(perm)
    inv[perm.long()] = torch.arange(8, dtype=torch.int32)
    assert torch.equal(dst, src[inv.long()])
    assert k.cubin()


def test_dtype_names_and_torch_storage():
    assert T.int4.bits == 4 and T.float4_e2m1fn.bits == 4 and T.float8_e8m0fnu.bits == 8
    assert T.int4.as_torch() is torch.int8 and T.uint4.as_torch() is torch.uint8
    assert T.float8_e8m0fnu.as_torch() is torch.float8_e8m0fnu and T.dtype(torch.float8_e8m0fnu) == "float8_e8m0fnu"
    assert T.float4_e2m1fnx2 == "float4_e2m1fnx2"
    with pytest.raises(ValueError, match="not an element type"):
        T.Tensor((4, 8), T.float4_e2m1fnx2)


def test_gemm_on_4bit_is_an_error_at_the_line():
    with pytest.raises(tegula.TegulaCompileError, match="T.gemm"):
        @T.prim_func
        def f(A: T.Tensor((64, 64), "int4"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                a = T.alloc_shared((64, 64), "int4")
                c = T.alloc_fragment((64, 64), "float32")
                T.copy(A, a)
                T.gemm(a, a, c)
                T.copy(c, C)

        tegula.compile(f, target="sm_90a")


@pytest.mark.parametrize("dynamic_rows", [False, True])
@pytest.mark.parametrize("rows,cols", [(64, 64), (50, 70)])
def test_eager_strided_tensor_takes_strides_from_const(dynamic_rows, rows, cols):
    """T.StridedTensor[[N, M], [N_, M_], dtype] with T.const strides in an eager function:
    each stride is bound from the argument's (here a column of every other element)."""
    fn = dp.eager_strided_const_program(dynamic_rows)
    x = torch.randn(rows, 2, cols, 2, generator=torch.Generator().manual_seed(rows))[:, 0, :, 0]
    k = fn.compile(x)
    assert k.cubin()
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(k, x), x + 1)
    assert f"* {4 * cols}" in k.get_kernel_source()  # the row stride, a compile-time constant
