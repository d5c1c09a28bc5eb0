"""A fragment indexed by the row-major position of a T.Parallel nest's iteration under
another shape (TileLang's composable index, `B_local[i * bn + j] = A_local[i, j]`): layout
inference gives it the loop's layout reshaped, so the program lowers instead of stopping
at a layout conflict; reference and simulator against torch, ragged and aligned, the
576-wide tile of TileLang's test included (the GPU side: gpu/test_flat_index_gpu.py)."""
import os
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import flat_index_programs as fp  # noqa: E402

SHAPES = [(64, 64, 32, 32), (70, 50, 32, 16), (64, 576, 32, 576), (40, 96, 8, 96)]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("M,N,bm,bn", SHAPES)
def test_flat_copy(run, M, N, bm, bn):
    k = tegula.compile(fp.flat_copy(M, N, bm, bn, scale=2.0), target="sm_90a")
    A = torch.randn(M, N, generator=torch.Generator().manual_seed(M + N))
    B = torch.zeros(M * N)
    run(k, A, B)
    assert torch.equal(B, A.flatten() * 2)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("M,N,bm,bn", [(64, 64, 32, 32), (70, 50, 32, 16)])
def test_flat_read(run, M, N, bm, bn):
    k = tegula.compile(fp.flat_read(M, N, bm, bn), target="sm_80")
    A = torch.randn(M, N, generator=torch.Generator().manual_seed(M * N))
    B = torch.zeros(M * N)
    run(k, A, B)
    assert torch.equal(B, A.flatten() + 1)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_flat_fragment_takes_the_loops_layout_and_compiles():
    k = tegula.compile(fp.flat_copy(1024, 576, 32, 576, dtype="float16"), target="sm_90a")
    src = k.get_kernel_source()
    assert "B_local" in src and len(k.cubin()) > 0
    layouts = k.layouts()
    assert layouts["B_local"].threads == layouts["A_local"].threads


def test_another_order_is_still_a_conflict_at_its_line():
    import tegula.language as T

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((4096,), "float32")):
        with T.Kernel(1, threads=128):
            A_local = T.alloc_fragment([64, 64], "float32")
            B_local = T.alloc_fragment([4096], "float32")
            T.copy(A, A_local)
            for i, j in T.Parallel(64, 64):
                B_local[j * 64 + i] = A_local[i, j]  # column-major: not the loop's order
            for i in T.Parallel(4096):
                B[i] = B_local[i]

    with pytest.raises(tegula.TegulaCompileError, match="layout conflict") as info:
        tegula.compile(main, target="sm_90a")
    assert "B_local[j * 64 + i] = A_local[i, j]" in str(info.value)


def test_a_reduction_of_a_3d_view_of_a_2d_fragment_still_lowers():
    """A[i, j * 128 + k] reads a 2-D fragment at a flattened column (the view's copy, not a
    composable index): the loop keeps its own layout, so the reduction of the view has one
    to project (it once took A's layout reshaped and could not)."""
    import tegula.language as T
    from tegula.testing import reference, simulate

    M, N, G, C = 2, 384, 3, 128

    @T.prim_func
    def main(A: T.Tensor((M, N), "int64"), B: T.Tensor((M, G), "int64")):
        with T.Kernel(1, threads=128) as _:
            A_local = T.alloc_fragment((M, N), "int64")
            view = T.reshape(A_local, [M, G, C])
            B_local = T.alloc_fragment((M, G), "int64")
            T.copy(A, A_local)
            T.reduce_absmax(view, B_local, dim=2)
            T.copy(B_local, B)

    kernel = tegula.compile(main, out_idx=-1, target="sm_90a")
    a = torch.randint(-100, 100, (M, N), dtype=torch.int64)
    want = a.abs().reshape(M, G, C).max(dim=2).values
    assert torch.equal(reference(kernel, a), want)
    assert torch.equal(simulate(kernel, a), want)
