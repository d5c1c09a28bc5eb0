"""TileLang's function attributes on the GPU: a body-declared prim_func returning its
T.empty output, with pass configs and compile flags from T.annotate_*, against torch (the
CPU side in cpu/test_function_attrs.py)."""
import pytest
import torch

import tegula
import function_attrs_programs as fp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows,cols", [(64, 32), (50, 24), (1000, 64)])
def test_body_declared_function_against_torch(rows, cols):
    compiled = tegula.compile(fp.doubling(rows, cols))
    a = torch.randn(rows, cols, device="cuda")
    torch.testing.assert_close(compiled(a), a * 2 + 1)


@pytest.mark.parametrize("rows,cols", [(3, 16), (5, 30), (64, 128)])
def test_packed_int4_output_is_torch_storage(rows, cols):
    compiled = tegula.compile(fp.packed_output(rows, cols, "int4"))
    out = compiled()
    assert out.dtype == torch.int8 and tuple(out.shape) == (rows, cols // 2)
    assert torch.equal(fp.unpack_int4(out.cpu()), fp.packed_expected(rows, cols))


def test_packed_float4_output_is_torch_storage():
    compiled = tegula.compile(fp.packed_output(3, 16, "float4_e2m1fn"))
    out = compiled()
    assert out.dtype == getattr(torch, "float4_e2m1fn_x2", torch.int8) and tuple(out.shape) == (3, 8)


@pytest.mark.parametrize("m", [1, 19, 1000])
def test_manual_out_idx_with_affine_outputs_against_torch(m):
    compiled = tegula.compile(fp.two_outputs(), out_idx=[1, 2])
    assert list(compiled.adapter.prim_func.attrs["tilelang_out_idx"]) == [1, 2]
    a = torch.randn(m, device="cuda")
    outputs = compiled(a)
    assert isinstance(outputs, list)
    for got, want in zip(outputs, fp.expected_two_outputs(a)):
        torch.testing.assert_close(got, want)


def test_adapter_module_function_launches_the_kernel():
    compiled = tegula.compile(fp.two_outputs(), out_idx=[1, 2])
    launch = compiled.adapter.get_exportable_executable().jit().get_function("kernel")
    a = torch.randn(37, device="cuda")
    for got, want in zip(launch(a), fp.expected_two_outputs(a)):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("n", [11, 64])
def test_packed_output_sized_by_a_scalar(n):
    compiled = tegula.compile(fp.packed_dynamic_output(3, "int4"))
    out = compiled(n)
    assert out.dtype == torch.int8 and tuple(out.shape) == (3, n)
    assert torch.equal(fp.unpack_int4(out.cpu()), fp.packed_expected(3, 2 * n))
    f4 = tegula.compile(fp.packed_dynamic_output(3, "float4_e2m1fn"))(n)
    assert f4.dtype == getattr(torch, "float4_e2m1fn_x2", torch.int8) and tuple(f4.shape) == (3, n)
