"""T.gemm on 8-bit floats on the GPU (tests/python/float8_programs.py; the CPU side in
cpu/test_float8_gemm.py): C = A Bᵀ of float8_e4m3fn / float8_e5m2 operands (and the two
mixed) into float32 against torch computing in float32 from the same 8-bit values, fresh
random inputs, aligned and ragged sizes, the output poisoned with NaN. wgmma m64nNk32 on
sm_90a, mma.sync m16n8k32 on sm_89 on (and on sm_90a where wgmma does not fit).

The tensor cores add 8-bit products with fewer bits than float32 keeps (Hopper's fp8 wgmma
is why TileLang's "2xAcc" examples add each K block into a second accumulator), so the
tolerance is a relative Frobenius error of 1e-3, as those examples take."""
import pytest
import torch

import tegula
import float8_programs as fp

pytestmark = pytest.mark.gpu

E4, E5 = "float8_e4m3fn", "float8_e5m2"
TYPES = [(E4, E4), (E5, E5), (E4, E5), (E5, E4)]
IDS = ["e4m3", "e5m2", "e4m3xe5m2", "e5m2xe4m3"]


@pytest.fixture(autouse=True)
def needs_sm89():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("8-bit tensor-core instructions need sm_89 or newer")


TOL = 1e-3  # relative error: the tensor cores sum 8-bit products with fewer bits than float32


def run(program, M, N, K, a_dtype, b_dtype):
    """(kernel, relative error of its output against torch in float32 from the same values)."""
    kernel = tegula.compile(program)
    gen = torch.Generator().manual_seed(M * 7 + N * 3 + K)
    a, b = fp.gemm_operands(M, N, K, a_dtype, b_dtype, gen, device="cuda")
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, b, c)
    want = a.float() @ b.float().T
    assert not torch.isnan(c).any(), "NaN in the output (unwritten?)"
    return kernel, ((c.double() - want.double()).norm() / want.double().norm()).item()


@pytest.mark.parametrize("a_dtype,b_dtype", TYPES, ids=IDS)
@pytest.mark.parametrize("M,N,K", [(512, 256, 1024), (300, 200, 330), (64, 64, 64)])
def test_gemm(a_dtype, b_dtype, M, N, K):
    _, err = run(fp.gemm_program(M, N, K, a_dtype, b_dtype, block_M=128, block_N=128, block_K=64, num_stages=3),
                 M, N, K, a_dtype, b_dtype)
    assert err < TOL, err


@pytest.mark.parametrize("block_K", [32, 128, 256])
def test_row_widths(block_K):
    _, err = run(fp.gemm_program(256, 192, 1024, E4, block_M=64, block_N=64, block_K=block_K), 256, 192, 1024, E4, E4)
    assert err < TOL, err


@pytest.mark.parametrize("a_dtype,b_dtype", TYPES, ids=IDS)
def test_mma_sync(a_dtype, b_dtype):
    # block_M = 32 fits no warpgroup: mma.sync m16n8k32 on every target.
    k, err = run(fp.gemm_program(333, 150, 200, a_dtype, b_dtype, block_M=32, block_N=64, block_K=32),
                 333, 150, 200, a_dtype, b_dtype)
    assert err < TOL, err
    assert "wgmma" not in k.get_kernel_source()


@pytest.mark.parametrize("dtype", [E4, E5])
def test_two_accumulators(dtype):
    _, err = run(fp.gemm_program(256, 256, 4096, dtype, block_M=128, block_N=64, block_K=64, accumulate_twice=True),
                 256, 256, 4096, dtype, dtype)
    assert err < TOL, err
