"""T.StridedTensor, float8_e8m0fnu and the packed 4-bit types on the GPU
(tests/python/dtype_programs.py; the CPU side in cpu/test_dtypes_strided.py): against
torch, ragged and aligned sizes, outputs poisoned; the launcher's stride checks."""
import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
import dtype_programs as dp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("M,N,pad", [(64, 64, 0), (50, 70, 3), (128, 96, 8)])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_strided_input(M, N, pad, dynamic):
    k = tegula.compile(dp.strided_scale_program(M, N, (N + pad, 1), dynamic=dynamic), out_idx=[1])
    x = torch.randn(M, N + pad, device="cuda")[:, :N]
    torch.testing.assert_close(k(x), 2 * x + 1)


def test_dynamic_strides_take_each_call():
    k = tegula.compile(dp.strided_scale_program(64, 64, None, dynamic=True), out_idx=[1])
    for x in (torch.randn(64, 80, device="cuda")[:, :64], torch.randn(64, 64, device="cuda").t(),
              torch.randn(128, 64, device="cuda")[::2]):
        torch.testing.assert_close(k(x), 2 * x + 1)


@pytest.mark.parametrize("M", [10, 64])
def test_transposed_store(M):
    k = tegula.compile(dp.strided_store_program(M, 64, (1, M)))
    x = torch.randn(M, 64, device="cuda")
    y = tt.poison(torch.empty(64, M, device="cuda")).t()
    k(x, y)
    torch.testing.assert_close(y, x + 1)


def test_wrong_static_strides_name_the_argument():
    k = tegula.compile(dp.strided_scale_program(64, 64, (72, 1)), out_idx=[1])
    with pytest.raises(ValueError, match=r"argument 'X' must have strides \(72, 1\)"):
        k(torch.randn(64, 64, device="cuda"))


def test_plain_tensor_still_needs_contiguity():
    k = tegula.compile(dp.cast_program(64, "float32", "float32"), out_idx=[1])
    with pytest.raises(ValueError, match="contiguous"):
        k(torch.randn(128, device="cuda")[::2])


def test_e8m0_conversions():
    x = torch.cat([torch.tensor([0.0, -1.0, 1.5, 3.0, 0.75, 1e-40, float("inf"), float("nan"), 1.4, 6.0, 3e38]),
                   torch.randn(989) * 100]).cuda()
    k = tegula.compile(dp.cast_program(x.numel(), "float32", T.float8_e8m0fnu), out_idx=[1])
    got = k(x).float()
    assert torch.equal(got.nan_to_num(7.0), x.to(torch.float8_e8m0fnu).float().nan_to_num(7.0))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint64, torch.int8, torch.int64, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.float8_e8m0fnu])
def test_torch_dtypes(dtype):
    k = tegula.compile(dp.cast_program(300, "float32", dtype), out_idx=[1])
    x = torch.randint(0, 100, (300,), device="cuda").float()
    assert torch.equal(k(x).double(), x.to(dtype).double())


@pytest.mark.parametrize("dtype", ["int4", "uint4", "float4_e2m1fn"])
@pytest.mark.parametrize("M,N", [(3, 16), (5, 38), (64, 128)])
def test_packed_roundtrip(dtype, M, N):
    k = tegula.compile(dp.packed_roundtrip_program(M, N, dtype), out_idx=[1, 2])
    raw = torch.randint(0, 256, (M, N // 2), dtype=torch.uint8)
    y, z = k(raw.cuda())
    want_y, want_z = tt.reference(k, raw)
    torch.testing.assert_close(y.cpu(), want_y)
    assert torch.equal(z.view(torch.uint8).cpu(), want_z.view(torch.uint8))


@pytest.mark.parametrize("n", [64, 128])
def test_packed_scatter(n):
    k = tegula.compile(dp.packed_scatter_program(n))
    src = torch.randint(0, 256, (n, 64), dtype=torch.uint8, device="cuda").view(torch.int8)
    dst = torch.zeros(n, 64, dtype=torch.int8, device="cuda")
    perm = torch.randperm(n, dtype=torch.int32, device="cuda")
    k(src, dst, perm)
    inv = torch.empty_like(perm)
    inv[perm.long()] = torch.arange(n, dtype=torch.int32, device="cuda")
    assert torch.equal(dst, src[inv.long()])


@pytest.mark.parametrize("dynamic_rows", [False, True])
@pytest.mark.parametrize("rows,cols", [(64, 64), (50, 70)])
def test_eager_strided_tensor_takes_strides_from_const(dynamic_rows, rows, cols):
    fn = dp.eager_strided_const_program(dynamic_rows)
    x = torch.randn(rows, 2, cols, 2, device="cuda")[:, 0, :, 0]
    torch.testing.assert_close(fn(x), x + 1)
