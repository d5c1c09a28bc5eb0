"""Fragments indexed by a T.Parallel nest's row-major position under another shape on
the GPU (flat_index_programs.py), against torch: TileLang's composable-index copy at its
own sizes (float16 and float32, 128 x 128 and 32 x 576 tiles) and ragged ones, and the
2-D fragment read back in another loop shape (the CPU side: cpu/test_flat_index.py)."""
import pytest
import torch

import tegula
import flat_index_programs as fp

pytestmark = pytest.mark.gpu


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("M,N,bm,bn,dtype", [(1024, 1024, 128, 128, "float16"), (1024, 576, 32, 576, "float16"),
                                             (1024, 576, 32, 576, "float32"), (1000, 300, 32, 64, "float32")])
def test_flat_copy(M, N, bm, bn, dtype):
    k = tegula.compile(fp.flat_copy(M, N, bm, bn, dtype=dtype, scale=2.0))
    A = torch.randn(M, N, device="cuda").to(getattr(torch, dtype))
    B = torch.zeros(M * N, device="cuda", dtype=A.dtype)
    k(A, B)
    assert torch.equal(B, A.flatten() * 2)


@pytest.mark.parametrize("M,N,bm,bn", [(256, 256, 32, 32), (333, 77, 32, 16)])
def test_flat_read(M, N, bm, bn):
    k = tegula.compile(fp.flat_read(M, N, bm, bn))
    A = torch.randn(M, N, device="cuda")
    B = torch.zeros(M * N, device="cuda")
    k(A, B)
    assert torch.equal(B, A.flatten() + 1)
