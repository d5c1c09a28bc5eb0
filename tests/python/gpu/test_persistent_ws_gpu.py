"""Persistent kernels warp specialised across their tiles, on the GPU (cpu/test_persistent_ws.py
has the same programs simulated): the producer loads the next tile's stages while the
consumers store this one, its stages and phases counting on from tile to tile; and the
shipped GEMM's persistent schedule with its epilogue through shared memory, against torch
in float32 with the outputs poisoned, ragged and aligned."""
import os
import sys

import pytest
import torch

import tegula
from tegula.kernels import gemm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import persistent_ws_programs as pw  # noqa: E402

pytestmark = pytest.mark.gpu


def _hopper():
    return torch.cuda.get_device_capability() >= (9, 0)


CASES = {
    "one_block_walks_all": (192, 128, 96, 1, {}),
    "fewer_blocks_ragged": (200, 136, 72, 4, {"stages": 3}),
    "blocks_without_tiles": (128, 64, 64, 5, {}),
    "one_stage": (128, 128, 64, 3, {"stages": 1}),
    "four_stages_two_groups": (256, 128, 160, 3, {"stages": 4, "threads": 256, "block_M": 128}),
    "staged_epilogue": (200, 128, 96, 3, {"staged": True}),
    "staged_epilogue_padded": (200, 128, 96, 3, {"staged": True, "pad": 4}),
    "second_computation": (130, 128, 96, 2, {"second": True, "stages": 3}),
    "many_waves_wide": (1000, 1024, 520, 7, {"stages": 4, "threads": 256, "block_M": 128, "block_N": 128,
                                              "block_K": 64}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_persistent_gemm_agrees_with_torch(case):
    M, N, K, blocks, opts = CASES[case]
    prog, ref = pw.persistent_gemm(M, N, K, blocks, **opts)
    kernel = tegula.compile(prog)
    if _hopper():
        assert "setmaxnreg_inc" in kernel.get_kernel_source()
    a, b = pw.inputs(M, N, K, seed=M + N + K)
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a.cuda(), b.cuda(), c)
    torch.testing.assert_close(c.cpu(), ref(a, b), rtol=1e-3, atol=1e-3)


def _error(out, a, b, bias):
    """out's largest error against relu(a @ b + bias) in float32, relative to the largest
    value, and the bound for a's dtype."""
    expected = torch.relu(a.float() @ b.float() + bias.float())
    tol = 2e-3 if a.dtype == torch.float16 else 1e-2
    return ((out.float() - expected).abs().max() / expected.abs().max()).item(), tol


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K", [(2048, 2048, 2048), (4096, 4096, 4000), (2304, 2050, 777)])
def test_matmul_on_large_outputs(M, N, K, dtype):
    """The default tile on large outputs; N = 2050 and K = 777 make matmul() pad rows."""
    torch.manual_seed(M + K)
    a, b = torch.randn(M, K, device="cuda", dtype=dtype), torch.randn(K, N, device="cuda", dtype=dtype)
    bias = torch.randn(N, device="cuda", dtype=dtype)
    err, tol = _error(gemm.matmul(a, b, bias=bias, activation="relu"), a, b, bias)
    assert err < tol, err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_persistent_schedule_with_many_tiles_a_block(dtype):
    """Seven blocks over 16 x 12 wide tiles (the last of each ragged): 28 tiles a block."""
    M, N, K = 1999, 3000, 1000
    torch.manual_seed(1)
    a, b = torch.randn(M, K, device="cuda", dtype=dtype), torch.randn(K, N, device="cuda", dtype=dtype)
    bias = torch.randn(N, device="cuda", dtype=dtype)
    kernel = gemm.kernel_for(M, N, K, dtype, epilogue="bias_relu", sms=7)
    if _hopper():
        assert "setmaxnreg_inc" in kernel.get_kernel_source()
    err, tol = _error(kernel(a, b, bias), a, b, bias)
    assert err < tol, err
