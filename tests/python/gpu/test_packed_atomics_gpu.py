"""Packed atomics on the GPU: the programs of tests/python/packed_atomic_programs.py, many
blocks adding into one accumulator through atomic_add_x4 / _x2, aligned and ragged shapes,
float32, float16 and bfloat16, fresh inputs; the sums match torch exactly (small integers:
no order of the adds rounds). The CPU side is cpu/test_packed_atomics.py."""
import pytest
import torch

import tegula
import packed_atomic_programs as pa

pytestmark = pytest.mark.gpu

SHAPES = [(256, 512), (50, 100), (33, 102), (40, 99)]


@pytest.mark.parametrize("build", [pa.tile_from_shared, pa.element_from_fragment], ids=["tile", "element"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("M,N", SHAPES, ids=[f"{m}x{n}" for m, n in SHAPES])
def test_sums_match_torch(build, dtype, M, N):
    splits = 16  # 16 blocks add into every element
    k = tegula.compile(build(M, N, splits, dtype))
    x, y = pa.inputs(M, N, splits, dtype, seed=torch.seed() & 0xFFFF, device="cuda")
    want = pa.expected(x, y)
    k(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, want), (y.double() - want.double()).abs().max()


def test_an_unaligned_tensor_view_is_refused_or_added_right():
    # A view starting one float in: the launcher's alignment check must not let a packed add
    # run at an address that is not a multiple of 16 bytes.
    M, N, splits = 64, 128, 4
    k = tegula.compile(pa.tile_from_shared(M, N, splits))
    x, _ = pa.inputs(M, N, splits, device="cuda")
    base = torch.zeros(M * N + 1, device="cuda")
    y = base[1:].view(M, N)
    try:
        k(x, y)
    except (ValueError, RuntimeError) as e:
        assert "Y" in str(e)
        return
    torch.cuda.synchronize()
    assert torch.equal(y, pa.expected(x, torch.zeros(M, N, device="cuda")))
