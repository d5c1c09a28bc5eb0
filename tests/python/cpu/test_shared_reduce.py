"""Reductions over shared memory on the CPU: the reference and the simulator (which also
reports races, so a missing barrier fails) against torch in float64, for every kind, both
dims, clear=False, ragged and aligned shapes, regions, a 3-D tile, a loop carrying the
result from step to step, integer bitwise kinds; NVRTC compiles for sm_80 and sm_90a; and
misuse is an error at the call naming the argument."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import shared_reduce_programs as sp  # noqa: E402

RUNS = [tt.reference, tt.simulate]
IDS = ["reference", "simulate"]
SCOPES = [("shared", "shared"), ("shared", "fragment"), ("fragment", "shared")]


def build(program, target="sm_90a"):
    return tegula.compile(program, out_idx=-1, target=target)


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("src,dst", SCOPES)
@pytest.mark.parametrize("kind", sp.KINDS)
@pytest.mark.parametrize("M,N,dim,clear", [(16, 16, 0, True), (32, 64, 1, False), (24, 40, 0, False),
                                           (7, 13, 1, True), (100, 8, 0, True)])
def test_tile(run, src, dst, kind, M, N, dim, clear):
    A, C = randn(M, N, seed=M * N + dim), randn(N if dim == 0 else M, seed=M + N)
    out = run(build(sp.tile_program(M, N, dim, kind, src, dst, clear)), A, C)
    torch.testing.assert_close(out.double(), sp.tile_ref(A, C, dim, kind, clear), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("threads", [32, 64, 256])
def test_tile_thread_counts(run, threads):
    A, C = randn(48, 24, seed=threads), randn(24, seed=1)
    out = run(build(sp.tile_program(48, 24, 0, "sum", "shared", "shared", threads=threads)), A, C)
    torch.testing.assert_close(out.double(), sp.tile_ref(A, C, 0, "sum", True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("dim,keep_unit", [(0, False), (1, False), (2, False), (1, True)])
def test_three_d(run, dim, keep_unit):
    A = randn(4, 12, 16, seed=dim)
    out = run(build(sp.three_d_program(4, 12, 16, dim, "max", keep_unit)), A)
    want = A.double().amax(dim, keepdim=keep_unit)
    torch.testing.assert_close(out.double(), want, rtol=0, atol=0)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("kind", sp.KINDS)
@pytest.mark.parametrize("N,dst", [(100, "shared"), (64, "fragment"), (7, "shared")])
def test_vector_to_one_result(run, kind, N, dst):
    A = randn(N, seed=N)
    out = run(build(sp.vector_program(N, kind, dst)), A)
    torch.testing.assert_close(out.double(), sp.reduce_ref(A, kind, 0).reshape(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("kind", ["sum", "min"])
def test_region_of_shared(run, kind):
    A = randn(32, 24, seed=5)
    out = run(build(sp.region_program(32, 24, 8, 16, kind)), A)
    want = A[:, 0].double().clone()
    want[8:24] = sp.reduce_ref(A[8:24], kind, 1)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("M,N", [(16, 32), (20, 12)])
def test_into_a_fragment_laid_out_elsewhere(run, M, N):
    A = randn(M, N, seed=M)
    out = run(build(sp.rows_then_scale_program(M, N)), A)
    a = A.double().repeat(1, 2)
    torch.testing.assert_close(out.double(), torch.exp(2 * a - A.double().amax(1, keepdim=True)), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("n,pipelined", [(16, False), (16, True), (24, False)])
def test_result_carried_across_steps(run, n, pipelined):
    Mat, V = randn(n, n, seed=n) * 0.3, randn(n, seed=n + 1)
    out = run(build(sp.substitution_program(n, 5, pipelined)), Mat, V)
    torch.testing.assert_close(out.double(), sp.substitution_ref(Mat, V, 5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dst", ["shared", "fragment"])
def test_under_a_thread_guard(run, dim, dst):
    A = randn(32, 16, seed=dim)
    out = run(build(sp.guarded_program(32, 16, dim, dst, "sum")), A)
    torch.testing.assert_close(out.double(), A.double().sum(dim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("kind", ["bitand", "bitor", "bitxor"])
@pytest.mark.parametrize("src,dst", SCOPES + [("fragment", "fragment")])
def test_bitwise(run, kind, src, dst):
    A = torch.randint(-2**30, 2**30, (16, 24), dtype=torch.int32, generator=torch.Generator().manual_seed(7))
    out = run(build(sp.bits_program(16, 24, kind, src, dst)), A)
    assert torch.equal(out, sp.bits_ref(A, kind))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_nvrtc_compiles_with_a_barrier_after_the_shared_result(target):
    kernel = build(sp.tile_program(24, 40, 0, "max", "shared", "shared", clear=False), target)
    assert kernel.cubin()[:4] == b"\x7fELF"
    source = kernel.get_kernel_source()
    # The staged result is stored to shared memory, then read back by other threads.
    stored = source.index("d[")
    assert "__syncthreads()" in source[stored:]


def test_the_reduction_runs_on_fragments_named_after_the_shared_buffers():
    ir = build(sp.tile_program(16, 16, 0, "sum", "shared", "shared")).get_ir("expand_tile_ops")
    reduce_line = next(line for line in ir.splitlines() if "T.reduce(" in line)
    assert "T.reduce(s_frag" in reduce_line and "-> d_frag" in reduce_line, reduce_line


def local_program():
    @T.prim_func
    def local(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_local((4, 8), "float32")
            d = T.alloc_shared((4,), "float32")
            T.reduce_sum(s, d, dim=1)
            T.copy(d, B)

    return local


def float_bits_program():
    @T.prim_func
    def float_bits(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((4, 8), "float32")
            d = T.alloc_shared((4,), "float32")
            T.reduce_bitor(s, d, dim=1)
            T.copy(d, B)

    return float_bits


def bad_kind_program():
    @T.prim_func
    def bad_kind(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((4, 8), "float32")
            d = T.alloc_shared((4,), "float32")
            T.reduce(s, d, "mean", 1, True)
            T.copy(d, B)

    return bad_kind


def bad_shape_program():
    @T.prim_func
    def bad_shape(A: T.Tensor((4, 8), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((4, 8), "float32")
            d = T.alloc_shared((8,), "float32")
            T.reduce_max(s, d, dim=1)
            T.copy(d[0:4], B)

    return bad_shape


@pytest.mark.parametrize("program,text", [
    (local_program, "must be a fragment or a shared-memory buffer, 's' is local"),
    (float_bits_program, "reduce_bitor takes integer or bool buffers, 's' is float32"),
    (bad_kind_program, "reduce_type must be one of sum, abssum, max"),
    (bad_shape_program, "'out' must have the shape of 's' without dimension 1, (4), got (8)"),
])
def test_misuse_is_an_error_at_the_call(program, text):
    with pytest.raises(tegula.TegulaCompileError) as info:
        build(program())
    assert text in info.value.message and info.value.line == program.__code__.co_firstlineno + 6
