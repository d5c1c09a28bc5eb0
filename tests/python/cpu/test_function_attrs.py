"""TileLang's function attributes: a prim_func whose parameters are declared in its body
(`def f(A):` then `A: T.Tensor(...)`), T.empty outputs it returns (func.attrs
["tilelang_out_idx"]), T.annotate_pass_configs and T.annotate_compile_flags (func.attrs,
merged under what tegula.compile is given); out_idx given both ways is an error."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import function_attrs_programs as fp  # noqa: E402
from tegula.transform import PassConfigKey


def test_attributes_of_the_function():
    kernel = fp.doubling(64, 32)
    assert kernel.attrs["tilelang_out_idx"] == [-1]
    assert kernel.attrs["tilelang_pass_configs"] == {PassConfigKey.TL_ENABLE_FAST_MATH: True}
    assert kernel.attrs["tilelang_compile_flags"] == ["--use_fast_math"]
    compiled = tegula.compile(kernel, target="sm_90a")
    assert compiled.options.get("fast_math") is True
    assert [p.name for p in compiled.params] == ["A", "B"] and compiled.num_inputs == 1


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("rows,cols", [(64, 32), (50, 24)])
def test_body_declared_function_agrees_with_torch(run, rows, cols):
    compiled = tegula.compile(fp.doubling(rows, cols), target="sm_90a")
    a = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows))
    torch.testing.assert_close(run(compiled, a), a * 2 + 1)


def test_out_idx_given_both_ways_is_a_conflict():
    with pytest.raises(ValueError, match="Out index conflict"):
        tegula.compile(fp.doubling(64, 32), out_idx=[-1], target="sm_90a")


def test_declared_parameters_with_out_idx_of_the_call():
    @T.prim_func
    def kernel(A, B):
        T.annotate_pass_configs({"tl.disable_wgmma": True})
        A: T.Tensor[[32, 32], T.float32]
        B: T.Tensor[[32, 32], T.float32]
        with T.Kernel(1, threads=32):
            for i in T.serial(32):
                for j in T.serial(32):
                    B[i, j] = A[i, j] + 1.0

    assert "tilelang_out_idx" not in kernel.attrs
    compiled = tegula.compile(kernel, out_idx=[-1], target="sm_90a",
                              pass_configs={"tl.disable_wgmma": False})
    assert compiled.options.get("disable_wgmma") is False  # the call's configs win
    a = torch.randn(32, 32)
    torch.testing.assert_close(tt.reference(compiled, a), a + 1)


def test_an_undeclared_parameter_is_an_error_at_the_line():
    with pytest.raises(tegula.TegulaCompileError, match="parameter 'B' is never declared"):
        @T.prim_func
        def kernel(A, B):
            A: T.Tensor[[32], T.float32]
            with T.Kernel(1, threads=32):
                for i in T.serial(32):
                    A[i] = 1.0


def test_other_compile_flags_warn_that_they_are_ignored():
    @T.prim_func
    def kernel(A):
        A: T.Tensor[[32], T.float32]
        T.annotate_compile_flags(["-lineinfo"])
        with T.Kernel(1, threads=32):
            for i in T.serial(32):
                A[i] = 1.0

    with pytest.warns(UserWarning, match="-lineinfo"):
        compiled = tegula.compile(kernel, target="sm_90a")
    assert "fast_math" not in compiled.options


# ---- 4-bit T.empty outputs: torch's packed storage (two elements a byte) ----

_STORAGE = {"int4": torch.int8, "float4_e2m1fn": getattr(torch, "float4_e2m1fn_x2", torch.int8)}


@pytest.mark.parametrize("dtype", ["int4", "float4_e2m1fn"])
def test_a_packed_output_is_allocated_in_torchs_storage(dtype):
    jit_module = sys.modules["tegula.jit"]
    compiled = tegula.compile(fp.packed_output(3, 16, dtype), target="sm_90a")
    made = jit_module.allocate_outputs(compiled.params, torch.device("meta"))
    assert [(tuple(t.shape), t.dtype) for t in made] == [((3, 8), _STORAGE[dtype])]
    assert len(compiled.cubin()) > 0


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_a_packed_output_holds_its_elements(run):
    compiled = tegula.compile(fp.packed_output(3, 16, "int4"), target="sm_90a")
    out = run(compiled)
    assert out.dtype == torch.int8 and tuple(out.shape) == (3, 8)
    assert torch.equal(fp.unpack_int4(out), fp.packed_expected(3, 16))


def test_an_odd_packed_output_is_refused_naming_it():
    jit_module = sys.modules["tegula.jit"]
    compiled = tegula.compile(fp.packed_output(3, 15, "int4"), target="sm_90a")
    with pytest.raises(ValueError, match="'out' is int4, packed two elements a byte, so its last dimension must be even"):
        jit_module.allocate_outputs(compiled.params, torch.device("meta"))


def test_a_dtype_annotation_in_the_signature_declares_a_scalar():
    # `n: T.int32` in the signature of a body-declared prim_func is a scalar parameter (a
    # T dtype is a str too, and was once taken for a postponed annotation).
    compiled = tegula.compile(fp.packed_dynamic_output(3, "float4_e2m1fn"), target="sm_90a")
    assert [(p.name, p.is_scalar, p.is_output) for p in compiled.params] == [("n", True, False), ("out", False, True)]
    assert compiled.params[1].shape == (3, None)


def test_the_function_records_its_global_symbol():
    assert fp.doubling(64, 32).attrs["global_symbol"] == "kernel"


def test_adapter_shows_the_outputs_the_call_allocates():
    func = fp.two_outputs()
    assert "tilelang_out_idx" not in func.attrs
    compiled = tegula.compile(func, out_idx=[1, -1], target="sm_90a")
    adapter = compiled.adapter
    assert list(adapter.prim_func.attrs["tilelang_out_idx"]) == [1, 2]
    assert "tilelang_out_idx" not in func.attrs  # the function itself is left as written
    assert adapter.dynamic_symbolic_map is None
    assert [p.name for p in adapter.params] == ["A", "B", "C"]
    declared = tegula.compile(fp.doubling(64, 32), target="sm_90a")
    assert list(declared.adapter.prim_func.attrs["tilelang_out_idx"]) == [-1]


def test_adapter_module_holds_only_the_kernel():
    compiled = tegula.compile(fp.two_outputs(), out_idx=[1, 2], target="sm_90a")
    module = compiled.adapter.get_exportable_executable().jit()
    assert module.get_function("kernel") is not None
    with pytest.raises(AttributeError, match="kernel_auto_output"):
        module.get_function("kernel_auto_output", query_imports=True)
    with pytest.raises(TypeError, match="name must be a str"):
        module.get_function(3)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("m", [1, 19, 64])
def test_two_affine_outputs_agree_with_torch(run, m):
    compiled = tegula.compile(fp.two_outputs(), out_idx=[1, 2], target="sm_90a")
    a = torch.randn(m, generator=torch.Generator().manual_seed(m))
    b, c = fp.expected_two_outputs(a)
    got_b, got_c = run(compiled, a)
    torch.testing.assert_close(got_b, b)
    torch.testing.assert_close(got_c, c)


def test_host_source_shows_the_launch():
    compiled = tegula.compile(fp.two_outputs(), out_idx=[1, 2], target="sm_90a")
    host = compiled.get_host_source()
    assert "void* args[] = {&A, &B, &C, &m};" in host
    assert "config.blockDimX = 1;" in host and "clusterDim" not in host


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_an_output_sized_by_a_scalar_argument(run):
    compiled = tegula.compile(fp.packed_dynamic_output(3, "int4"), target="sm_90a")
    out = run(compiled, 11)
    assert out.dtype == torch.int8 and tuple(out.shape) == (3, 11)
    assert torch.equal(fp.unpack_int4(out), fp.packed_expected(3, 22))


def test_an_output_sized_by_a_scalar_argument_is_allocated_from_it():
    jit_module = sys.modules["tegula.jit"]
    compiled = tegula.compile(fp.packed_dynamic_output(3, "float4_e2m1fn"), target="sm_90a")
    compiled.cubin()
    tegula.env.native().build_program(compiled._lowered_all, compiled.out_idx, 0)  # the launch accepts the shape
    made = jit_module.allocate_outputs(compiled.params, torch.device("meta"), compiled.prim_func, {0: 11})
    assert [(tuple(t.shape), t.dtype) for t in made] == [((3, 11), _STORAGE["float4_e2m1fn"])]
