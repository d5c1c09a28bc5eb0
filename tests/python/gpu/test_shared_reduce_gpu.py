"""Reductions over shared memory on the GPU (tests/python/shared_reduce_programs.py; the CPU
side in cpu/test_shared_reduce.py), against torch in float64 with fresh inputs, ragged
and aligned shapes."""
import pytest
import torch

import tegula
import shared_reduce_programs as sp

pytestmark = pytest.mark.gpu

SCOPES = [("shared", "shared"), ("shared", "fragment"), ("fragment", "shared")]


def build(program):
    return tegula.compile(program, out_idx=-1)


@pytest.mark.parametrize("src,dst", SCOPES)
@pytest.mark.parametrize("kind", sp.KINDS)
@pytest.mark.parametrize("M,N,dim,clear", [(16, 16, 0, True), (32, 64, 1, False), (24, 40, 0, False),
                                           (7, 13, 1, True), (100, 8, 0, True), (64, 128, 1, True)])
def test_tile(src, dst, kind, M, N, dim, clear):
    A, C = torch.randn(M, N, device="cuda"), torch.randn(N if dim == 0 else M, device="cuda")
    out = build(sp.tile_program(M, N, dim, kind, src, dst, clear))(A, C)
    torch.testing.assert_close(out.double(), sp.tile_ref(A, C, dim, kind, clear), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [32, 64, 256])
def test_tile_thread_counts(threads):
    A, C = torch.randn(48, 24, device="cuda"), torch.randn(24, device="cuda")
    out = build(sp.tile_program(48, 24, 0, "sum", "shared", "shared", threads=threads))(A, C)
    torch.testing.assert_close(out.double(), sp.tile_ref(A, C, 0, "sum", True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dim,keep_unit", [(0, False), (1, False), (2, False), (1, True)])
def test_three_d(dim, keep_unit):
    A = torch.randn(4, 12, 16, device="cuda")
    out = build(sp.three_d_program(4, 12, 16, dim, "max", keep_unit))(A)
    torch.testing.assert_close(out.double(), A.double().amax(dim, keepdim=keep_unit), rtol=0, atol=0)


@pytest.mark.parametrize("kind", sp.KINDS)
@pytest.mark.parametrize("N,dst", [(100, "shared"), (64, "fragment"), (7, "shared"), (1000, "shared")])
def test_vector_to_one_result(kind, N, dst):
    A = torch.randn(N, device="cuda")
    out = build(sp.vector_program(N, kind, dst))(A)
    torch.testing.assert_close(out.double(), sp.reduce_ref(A, kind, 0).reshape(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["sum", "min"])
def test_region_of_shared(kind):
    A = torch.randn(32, 24, device="cuda")
    out = build(sp.region_program(32, 24, 8, 16, kind))(A)
    want = A[:, 0].double().clone()
    want[8:24] = sp.reduce_ref(A[8:24], kind, 1)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M,N", [(16, 32), (20, 12), (64, 64)])
def test_into_a_fragment_laid_out_elsewhere(M, N):
    A = torch.randn(M, N, device="cuda")
    out = build(sp.rows_then_scale_program(M, N))(A)
    a = A.double().repeat(1, 2)
    torch.testing.assert_close(out.double(), torch.exp(2 * a - A.double().amax(1, keepdim=True)), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("n,pipelined", [(16, False), (16, True), (24, False), (32, True)])
def test_result_carried_across_steps(n, pipelined):
    Mat, V = torch.randn(n, n, device="cuda") * 0.3, torch.randn(n, device="cuda")
    out = build(sp.substitution_program(n, 5, pipelined))(Mat, V)
    torch.testing.assert_close(out.double(), sp.substitution_ref(Mat, V, 5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dst", ["shared", "fragment"])
def test_under_a_thread_guard(dim, dst):
    A = torch.randn(32, 16, device="cuda")
    out = build(sp.guarded_program(32, 16, dim, dst, "sum"))(A)
    torch.testing.assert_close(out.double(), A.double().sum(dim), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["bitand", "bitor", "bitxor"])
@pytest.mark.parametrize("src,dst", SCOPES + [("fragment", "fragment")])
def test_bitwise(kind, src, dst):
    A = torch.randint(-2**30, 2**30, (16, 24), dtype=torch.int32, device="cuda")
    out = build(sp.bits_program(16, 24, kind, src, dst))(A)
    assert torch.equal(out, sp.bits_ref(A, kind))
