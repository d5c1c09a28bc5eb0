"""T.gemm on integer operands on the GPU (tests/python/int_gemm_programs.py; the CPU side in
cpu/test_int_gemm.py): C = A Bᵀ into int32 of int8 / uint8 operands (any mix; wgmma m64nNk32
.s32 on sm_90a, mma.sync m16n8k32 .s32 elsewhere and where wgmma does not fit) and of packed
int4 / uint4 ones (any mix; mma.sync m16n8k64), against torch's integer matmul of the same
values: fresh random inputs over each type's whole range, aligned and ragged sizes, the
output poisoned before the launch. Integer sums are exact, so the results must be equal.
TileLang's int4 example (matmul_nt_int4) runs as written, with its packing of the inputs."""
import pytest
import torch

import tegula
import int_gemm_programs as ip

pytestmark = pytest.mark.gpu

POISON = -0x5A5A5A5A  # no sum of these sizes lands here by chance

INT8_TYPES = [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8")]
INT8_IDS = ["s8", "u8", "s8xu8", "u8xs8"]
INT4_TYPES = [("int4", "int4"), ("uint4", "uint4"), ("int4", "uint4"), ("uint4", "int4")]
INT4_IDS = ["s4", "u4", "s4xu4", "u4xs4"]


@pytest.fixture(autouse=True)
def needs_sm80():
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("integer tensor-core instructions need sm_80 or newer")


def run(program, M, N, K, a_dtype, b_dtype):
    """(kernel, its output, torch's): the output poisoned before the launch."""
    kernel = tegula.compile(program)
    gen = torch.Generator().manual_seed(M * 7 + N * 3 + K)
    a, b, want = ip.operands(M, N, K, a_dtype, b_dtype, gen, device="cuda")
    c = torch.full((M, N), POISON, dtype=torch.int32, device="cuda")
    kernel(a, b, c)
    return kernel, c, want


def differ(c, want) -> str:
    diff = (c.long() - want.long()).abs()
    return (f"{int((diff > 0).sum())} elements differ, by up to {int(diff.max())}; "
            f"{int((c == POISON).sum())} keep the poison")


@pytest.mark.parametrize("a_dtype,b_dtype", INT8_TYPES, ids=INT8_IDS)
@pytest.mark.parametrize("M,N,K", [(512, 256, 1024), (300, 200, 330), (64, 64, 64)])
def test_int8(a_dtype, b_dtype, M, N, K):
    _, c, want = run(ip.gemm_program(M, N, K, a_dtype, b_dtype, block_M=128, block_N=128, block_K=64, num_stages=3),
                     M, N, K, a_dtype, b_dtype)
    assert torch.equal(c, want), differ(c, want)


@pytest.mark.parametrize("block_K", [32, 128, 256])
def test_int8_row_widths(block_K):
    _, c, want = run(ip.gemm_program(256, 192, 1024, "int8", block_M=64, block_N=64, block_K=block_K),
                     256, 192, 1024, "int8", "int8")
    assert torch.equal(c, want), differ(c, want)


@pytest.mark.parametrize("a_dtype,b_dtype", INT8_TYPES, ids=INT8_IDS)
def test_int8_mma_sync(a_dtype, b_dtype):
    # block_M = 32 fits no warpgroup: mma.sync m16n8k32 on every target.
    k, c, want = run(ip.gemm_program(333, 150, 200, a_dtype, b_dtype, block_M=32, block_N=64, block_K=32),
                     333, 150, 200, a_dtype, b_dtype)
    assert torch.equal(c, want), differ(c, want)
    assert "wgmma" not in k.get_kernel_source()


def test_int8_clear_accum_every_step():
    _, c, want = run(ip.gemm_program(256, 256, 2048, "uint8", "int8", block_M=128, block_N=64, block_K=64,
                                     clear_accum=True), 256, 256, 2048, "uint8", "int8")
    assert torch.equal(c, want), differ(c, want)


@pytest.mark.parametrize("a_dtype,b_dtype", INT4_TYPES, ids=INT4_IDS)
@pytest.mark.parametrize("M,N,K", [(512, 256, 1024), (300, 200, 330), (64, 64, 128)])
def test_int4(a_dtype, b_dtype, M, N, K):
    _, c, want = run(ip.gemm_program(M, N, K, a_dtype, b_dtype, block_M=128, block_N=128, block_K=64, num_stages=3),
                     M, N, K, a_dtype, b_dtype)
    assert torch.equal(c, want), differ(c, want)


@pytest.mark.parametrize("block_K", [64, 128, 256])
def test_int4_row_widths_and_double_buffered_fragments(block_K):
    _, c, want = run(ip.gemm_program(256, 192, 1024, "int4", block_M=64, block_N=64, block_K=block_K),
                     256, 192, 1024, "int4", "int4")
    assert torch.equal(c, want), differ(c, want)


def test_tilelang_int4_example():
    # As the example runs it: M = N = K = 1024, blocks 128 x 128 x 64, out_idx=-1, A and B
    # torch.int8 tensors of two values a byte, the low nibble first.
    M = N = K = 1024
    kernel = tegula.compile(ip.tilelang_int4_program(M, N, K, 128, 128, 64), out_idx=-1)
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-8, 8, (M, K), generator=gen, dtype=torch.int8)
    b = torch.randint(-8, 8, (N, K), generator=gen, dtype=torch.int8)
    a_packed = ((a[..., ::2] & 0xF) | ((a[..., 1::2] & 0xF) << 4)).cuda()
    b_packed = ((b[..., ::2] & 0xF) | ((b[..., 1::2] & 0xF) << 4)).cuda()
    c = kernel(a_packed, b_packed)
    want = (a.int() @ b.int().T).cuda()  # torch's int32 matmul of the unpacked values
    assert c.dtype == torch.int32 and c.shape == (M, N)
    assert torch.equal(c, want)
