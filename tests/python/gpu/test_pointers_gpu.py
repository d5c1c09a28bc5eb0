"""Raw pointers on the GPU against torch: T.ptr parameters given tensors or addresses
(data_ptr ints), tables of addresses (int64 tensors), T.make_tensor per block and per
iteration, strided; fresh random inputs, aligned and ragged sizes, outputs poisoned. The
programs are pointer_programs.py's (cpu/test_pointers.py runs them in the interpreters)."""
import os
import sys

import pytest
import torch

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import pointer_programs as pp  # noqa: E402

pytestmark = pytest.mark.gpu
POISON = 12345.0


def _table(ts):
    return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device="cuda")


@pytest.mark.parametrize("G,N", [(3, 128), (4, 77), (1, 5), (64, 1000)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_table_of_addresses(G, N, dtype):
    k = tegula.compile(pp.table_program(G, N, dtype), out_idx=[-1])
    xs = [(torch.randn(N, device="cuda") * 100).to(getattr(torch, dtype)) for _ in range(G)]
    out = k(_table(xs))
    assert torch.equal(out.double(), pp.table_expected(xs).to(out.dtype).double())


@pytest.mark.parametrize("sizes,N,K", [([16, 33, 7], 40, 64), ([64, 128, 256], 96, 128), ([1], 32, 32),
                                       ([200, 17, 64, 5], 130, 256)])
@pytest.mark.parametrize("stages", [1, 3])
def test_grouped_gemm(sizes, N, K, stages):
    k = tegula.compile(pp.grouped_gemm_program(sizes, N, K, stages=stages))
    a, b, c, ta, tb, tc, offsets = pp.grouped_inputs(sizes, N, K, device="cuda")
    k(ta, tb, tc, offsets)
    for g, size in enumerate(sizes):
        torch.testing.assert_close(c[g][:size], a[g][:size].float() @ b[g].float(), rtol=2e-3, atol=2e-3)
        padded = -(-size // 32) * 32
        assert (c[g][padded:] == POISON).all()


@pytest.mark.parametrize("M,N,K", [(256, 256, 256), (100, 70, 96), (1, 8, 32)])
def test_pointer_parameters_given_tensors_or_addresses(M, N, K):
    k = tegula.compile(pp.pointer_gemm_program())
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(N, K, device="cuda").half()
    want = a.float() @ b.float().T
    c = torch.full((M, N), POISON, device="cuda")
    k(a, b, c, M, N, K)
    torch.testing.assert_close(c, want, rtol=2e-3, atol=2e-3)
    # TileLang's cython backend style: every pointer an int, no tensor at all.
    c2 = torch.full((M, N), POISON, device="cuda")
    k(a.data_ptr(), b.data_ptr(), c2.data_ptr(), M, N, K)
    torch.cuda.synchronize()
    torch.testing.assert_close(c2, c, rtol=0, atol=0)


def test_pointer_parameters_of_vectorised_tensors():
    M = N = K = 128
    k = tegula.compile(pp.pointer_gemm_program(static=(M, N, K), stages=3))
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(N, K, device="cuda").half()
    c = torch.full((M, N), POISON, device="cuda")
    k(a, b.data_ptr(), c, 0, 0, 0)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=2e-3, atol=2e-3)
    # An address 8 bytes into a tensor cannot start a 16-byte access: refused at launch.
    big = torch.zeros(M * K + 8, device="cuda").half()
    with pytest.raises(ValueError, match=r"argument 'a_ptr' \(T.ptr\) must be an address aligned to 16 bytes"):
        k(big.data_ptr() + 8, b, c, 0, 0, 0)
    with pytest.raises(ValueError, match=r"argument 'a_ptr' \(T.ptr\) must be a CUDA tensor or an address"):
        k(a.cpu(), b, c, 0, 0, 0)


@pytest.mark.parametrize("G,N", [(4, 150), (2, 64), (16, 4096)])
def test_a_tensor_made_in_each_iteration(G, N):
    k = tegula.compile(pp.summed_program(G, N, "float16"))
    xs = [torch.randn(N, device="cuda").half() for _ in range(G)]
    out = torch.full((N,), POISON, device="cuda")
    k(_table(xs), out)
    torch.testing.assert_close(out, sum(x.float() for x in xs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("M,N,ld", [(37, 20, 32), (64, 32, 32), (1000, 100, 128)])
def test_strided_tensor_at_an_address(M, N, ld):
    k = tegula.compile(pp.strided_program(M, N))
    base = torch.randn(M, ld, device="cuda")
    y = torch.full((M, N), POISON, device="cuda")
    k(base, ld, y)
    assert torch.equal(y, base[:, :N] + 1)
