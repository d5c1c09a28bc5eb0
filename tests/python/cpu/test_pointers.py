"""Raw pointers without a GPU: T.ptr parameters, T.Tensor(shape, T.ptr) tables of addresses
and T.make_tensor (language/pointers.py). The programs of pointer_programs.py compile with
NVRTC for sm_80 and sm_90a; the reference and the simulator agree with torch on fresh
random inputs (aligned and ragged sizes, outputs poisoned), reaching the memory behind an
address through the call's tensors and `memory=`; bad programs are errors at their line
naming the argument, bad launch arguments errors naming the parameter."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula import env
from tegula.frontend.errors import TegulaCompileError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import helpers  # noqa: E402
import pointer_programs as pp  # noqa: E402

RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
POISON = 12345.0


def _table(ts):
    return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64)


# ---- compiled code ----

@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_grouped_gemm_compiles_to_typed_pointers_without_bulk_copies(target):
    k = tegula.compile(pp.grouped_gemm_program([16, 33, 7], 40, 64, stages=2), target=target)
    assert k.cubin()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    # Each tensor is a typed pointer declared where its address is read; the copy engine's
    # tensor maps need the tensor at launch, so its copies stay cp.async.
    assert "half_t* A = reinterpret_cast<half_t*>(A_addr);" in src
    assert "float* C = reinterpret_cast<float*>(C_addr);" in src
    assert "tma_load" not in src and "TensorMap" not in src and "cp_async" in src
    # A tensor at an address may be a parameter too: no parameter is __restrict__.
    assert "__restrict__" not in src
    assert k.params[0].dtype == torch.int64  # T.Tensor([G], T.ptr): a table of int64 addresses


def test_pointer_parameters_are_addresses_in_the_signature():
    k = tegula.compile(pp.pointer_gemm_program(), target="sm_90a")
    assert k.cubin()[:4] == b"\x7fELF"
    src = k.get_kernel_source()
    assert "(void* a_ptr, void* b_ptr, void* c_ptr, int m, int n, int k)" in src
    assert "half_t* A = reinterpret_cast<half_t*>(a_ptr);" in src
    assert [(p.name, p.dtype_name, p.is_scalar, p.dtype) for p in k.params[:3]] == [
        ("a_ptr", "handle", True, None), ("b_ptr", "handle", True, None), ("c_ptr", "handle", True, None)]
    assert "tensor A: float16[m, k] at a_ptr" in k.get_ir("input")


# ---- the interpreters against torch ----

@RUNS
@pytest.mark.parametrize("G,N", [(3, 128), (4, 77), (1, 5)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_table_of_addresses(run, G, N, dtype):
    k = tegula.compile(pp.table_program(G, N, dtype), out_idx=[-1], target="sm_80")
    xs = [(torch.randn(N) * 100).to(getattr(torch, dtype)) for _ in range(G)]
    out = run(k, _table(xs), memory=xs)
    assert torch.equal(out.double(), pp.table_expected(xs).to(out.dtype).double())


@RUNS
@pytest.mark.parametrize("sizes,N,K", [([16, 33, 7], 40, 64), ([32, 64], 64, 96), ([1], 32, 32)])
@pytest.mark.parametrize("stages", [1, 3])
def test_grouped_gemm(run, sizes, N, K, stages):
    k = tegula.compile(pp.grouped_gemm_program(sizes, N, K, stages=stages), target="sm_80")
    a, b, c, ta, tb, tc, offsets = pp.grouped_inputs(sizes, N, K)
    assert run(k, ta, tb, tc, offsets, memory=a + b + c) is None
    for g, size in enumerate(sizes):
        torch.testing.assert_close(c[g][:size], a[g][:size].float() @ b[g].float(), rtol=1e-4, atol=1e-4)
        padded = -(-size // 32) * 32  # rows past the group's last tile stay untouched
        assert (c[g][padded:] == POISON).all()


@RUNS
@pytest.mark.parametrize("M,N,K", [(128, 128, 128), (100, 70, 96)])
def test_pointer_parameters_given_tensors_or_addresses(run, M, N, K):
    k = tegula.compile(pp.pointer_gemm_program(), target="sm_90a")
    a, b = torch.randn(M, K).half(), torch.randn(N, K).half()
    want = a.float() @ b.float().T
    c = torch.full((M, N), POISON)
    run(k, a, b, c, M, N, K)
    torch.testing.assert_close(c, want, rtol=1e-4, atol=1e-4)
    c2 = torch.full((M, N), POISON)
    run(k, a.data_ptr(), b, c2.data_ptr(), M, N, K, memory=[a, c2])
    torch.testing.assert_close(c2, c, rtol=0, atol=0)


@RUNS
@pytest.mark.parametrize("G,N", [(4, 150), (2, 64)])
def test_a_tensor_made_in_each_iteration(run, G, N):
    k = tegula.compile(pp.summed_program(G, N, "float16"), target="sm_80")
    xs = [torch.randn(N).half() for _ in range(G)]
    out = torch.full((N,), POISON)
    run(k, _table(xs), out, memory=xs)
    torch.testing.assert_close(out, sum(x.float() for x in xs), rtol=1e-5, atol=1e-5)


@RUNS
@pytest.mark.parametrize("M,N,ld", [(37, 20, 32), (64, 32, 32)])
def test_strided_tensor_at_an_address(run, M, N, ld):
    k = tegula.compile(pp.strided_program(M, N), target="sm_80")
    base = torch.randn(M, ld)
    y = torch.full((M, N), POISON)
    run(k, base, ld, y)
    assert torch.equal(y, base[:, :N] + 1)


# ---- what the interpreters report ----

def test_an_address_outside_the_call_is_reported():
    k = tegula.compile(pp.table_program(2, 64), out_idx=[-1], target="sm_80")
    xs = [torch.randn(64) for _ in range(2)]
    with pytest.raises(TegulaCompileError, match=r"address 0x[0-9a-f]+ is in none of the tensors of the call") as info:
        tt.reference(k, _table(xs))
    assert "X[i] * 2 + g" in info.value.source_line
    with pytest.raises(tt.SimulationError, match="is in none of the tensors of the call"):
        tt.simulate(k, _table(xs))


def test_a_tensor_past_the_memory_at_its_address_is_reported():
    k = tegula.compile(pp.table_program(2, 64), out_idx=[-1], target="sm_80")
    xs = [torch.randn(64), torch.randn(40)]  # the second holds 40 of the 64 elements read
    with pytest.raises(TegulaCompileError, match=r"element \[40\] of 'X' .* lies outside the tensor its address"):
        tt.reference(k, _table(xs), memory=xs)
    with pytest.raises(tt.SimulationError, match="outside the tensor its address points into"):
        tt.simulate(k, _table(xs), memory=xs)


def test_a_misaligned_vector_access_is_reported_by_the_simulator():
    k = tegula.compile(pp.table_program(1, 64), out_idx=[-1], target="sm_80")
    assert "float4" in k.get_kernel_source()
    x = torch.randn(65)
    view = x[1:]  # 4 bytes past x's start: no float4 access may begin there
    with pytest.raises(tt.SimulationError, match="not a multiple of 16"):
        tt.simulate(k, _table([view]), memory=[x])
    out = tt.reference(k, _table([view]), memory=[x])  # the language itself has no alignment
    assert torch.equal(out[0], view * 2)


def test_another_dtype_at_an_address_is_reported():
    k = tegula.compile(pp.table_program(1, 16), out_idx=[-1], target="sm_80")
    x = torch.randn(16).half()
    with pytest.raises(TegulaCompileError, match="in a tensor of float16, read as float32"):
        tt.reference(k, _table([x]), memory=[x])


def test_memory_tensors_must_not_overlap():
    k = tegula.compile(pp.table_program(1, 16), out_idx=[-1], target="sm_80")
    x = torch.randn(32)
    with pytest.raises(ValueError, match=r"memory\[1\] overlaps another tensor"):
        tt.reference(k, _table([x]), memory=[x[:20], x[10:]])


# ---- errors at the line ----

def _kernel(body: str):
    namespace = {"T": T}
    source = "@T.prim_func\ndef f(ptrs: T.Tensor([4], T.ptr), p: T.ptr(T.float16), Y: T.Tensor([16], T.float32)):\n" \
             "    with T.Kernel(4, threads=32) as g:\n" + "".join(f"        {line}\n" for line in body.splitlines())
    path = helpers.source_file(f"ptr_bad_{abs(hash(body))}", "import tegula.language as T\n" + source)
    code = compile(open(path).read(), path, "exec")
    exec(code, namespace)  # noqa: S102 - the test's own program


# `at`: the text the caret points at (the argument at fault, or the statement).
@pytest.mark.parametrize("body,at,match", [
    ("X = T.make_tensor(g, (16,), T.float32)", "g,", "a T.ptr parameter or a 64-bit integer"),
    ("X = T.make_tensor(Y, (16,), T.float32)", "Y,", "the tensor 'Y'"),
    ("X = T.make_tensor(p, (16,), T.float32)", "T.float32", r"is T\.ptr\(float16\), the tensor float32"),
    ("X = T.make_tensor(ptrs[g], (16, 0), T.float32)", "(16, 0)", "must be an int > 0"),
    ("X = T.make_tensor(ptrs[g], (16,), T.float32, strides=(1, 1))", "(1, 1))", "2 strides for 1 dimensions"),
    ("X = T.make_tensor(ptrs[g], (16,), T.int4)", "T.int4", "4-bit types are packed"),
    ("X = T.make_tensor(ptrs[g], (16,), 'float17')", "'float17'", "unknown dtype"),
    ("Y[0] = T.make_tensor(ptrs[g], (16,), T.float32)[0]", "T.make_tensor", "assign the tensor to a name first"),
    ("q = p + 16", "p + 16", "a T.ptr parameter, an address: it takes no arithmetic"),
    ("Y[0] = p", "Y[0] = p", "'p' is a T.ptr parameter, an address: its one use is T.make_tensor"),
    ("Y[0] = T.cast(p, T.float32)", "T.cast", "'p' is a T.ptr parameter, an address: its one use"),
])
def test_bad_programs_are_errors_at_the_line(body, at, match):
    with pytest.raises(TegulaCompileError, match=match) as info:
        _kernel(body)
    err = info.value
    assert err.source_line.strip() == body
    assert err.source_line[err.col - 1:].startswith(at), (err.col, err.source_line)


def test_an_address_read_outside_the_kernel_is_an_error():
    with pytest.raises(TegulaCompileError, match="must be inside `with T.Kernel"):
        @T.prim_func
        def f(ptrs: T.Tensor([4], T.ptr), Y: T.Tensor([16], T.float32)):
            X = T.make_tensor(ptrs[0], (16,), T.float32)
            with T.Kernel(1, threads=32) as b:
                for i in T.Parallel(16):
                    Y[i] = X[i]


def test_ptr_annotation_checks_its_arguments():
    with pytest.raises(ValueError, match="T.ptr: dtype"):
        T.ptr("float17")
    with pytest.raises(ValueError, match="storage_scope must be 'global'"):
        T.ptr(T.float16, "shared")


# ---- launch arguments (checked before anything reaches the GPU) ----

@pytest.mark.parametrize("value,match", [
    ("x", r"argument 'a_ptr' \(T.ptr\) must be a CUDA tensor \(its data_ptr is passed\) or an address"),
    (1.5, r"argument 'a_ptr' \(T.ptr\) must be a CUDA tensor"),
    (-8, r"argument 'a_ptr' \(T.ptr\) must be an address, an int in \[0, 2\*\*64\)"),
    (1 << 64, r"argument 'a_ptr' \(T.ptr\) must be an address"),
    (torch.zeros(4), r"argument 'a_ptr' \(T.ptr\) must be a CUDA tensor or an address \(an int\), got a tensor on cpu"),
    (0x10008, r"argument 'a_ptr' \(T.ptr\) must be an address aligned to 16 bytes .* 8 bytes past"),
])
def test_bad_pointer_arguments_name_the_parameter(value, match):
    k = tegula.compile(pp.pointer_gemm_program(static=(128, 128, 128)), target="sm_90a")
    with pytest.raises(env.native().ArgumentError, match=match):
        k(value, 0x20000, 0x30000, 128, 128, 128)


def test_launch_data_names_pointer_parameters():
    k = tegula.compile(pp.pointer_gemm_program(static=(128, 128, 128)), target="sm_90a")
    program = env.native().build_program(k._lowered_all, k.out_idx, 0)
    # A and B are read 16 bytes at a time (cp.async), C written in float2 pieces.
    assert program.alignment == {"a_ptr": 16, "b_ptr": 16, "c_ptr": 8}
    loaded = env.native().load_program(program.save())  # the persistent index's form keeps the checks
    with pytest.raises(env.native().ArgumentError, match=r"'b_ptr' \(T.ptr\) must be an address aligned to 16"):
        loaded.launcher(0x10000, 0x20004, 0x30000, 0, 0, 0)
    assert "void* a_ptr;  // T.ptr" in k.get_host_source()
    with pytest.raises(ValueError, match="parameter 'a_ptr' is a T.ptr: the profiler cannot make the memory"):
        k.get_profiler().get_inputs()
