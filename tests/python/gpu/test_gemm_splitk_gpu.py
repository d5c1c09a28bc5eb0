"""The general split-K GEMM (`matmul_splitk_program`, what kernel_for gives a caller's tile
at M <= 64; matmul itself runs the decode kernel, test_gemm_decode_gpu.py) against torch
in float32: every element written (a NaN-poisoned output through the explicit launch),
the sum over the slices deterministic, and the legacy path giving the same numbers."""
import functools
import importlib

import pytest
import torch
from helpers import gemm_inputs

pytestmark = pytest.mark.gpu

try:
    from ._util import rel_err
except ImportError:
    from _util import rel_err

gemm = importlib.import_module("tegula.kernels.gemm")

SHAPES = [(16, 4096, 4096), (64, 8192, 1024), (33, 1000, 4100)]
# Relative Frobenius error, as in test_gemm.py: a few roundings of the output dtype.
TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
EPILOGUE_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


# a (M, K), B (K, N) and bias, from one seed
_inputs = functools.partial(gemm_inputs, b_layout="KN")


def _split_k(M, N, K, dtype, epilogue="none", **kw):
    """The split-K kernel kernel_for gives SPLIT_K_CONFIG's tile on this GPU."""
    return gemm.kernel_for(M, N, K, dtype, epilogue, sms=gemm.sm_count(torch.device("cuda")), **gemm.SPLIT_K_CONFIG,
                           **kw)


def _splits(M, N, K, device="cuda"):
    return gemm.split_k_slices(M, N, K, gemm.sm_count(torch.device(device)), **{
        k: gemm.SPLIT_K_CONFIG[k] for k in ("block_M", "block_N", "block_K")})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matmul_runs_split_k(M, N, K, dtype):
    assert _splits(M, N, K) > 1, "the shape should take the split-K program on this GPU"
    a, b, _ = _inputs(M, N, K, dtype, seed=M + N + K)
    kernel = _split_k(M, N, K, dtype)
    assert kernel.prim_func.name == "gemm_splitk"
    c = kernel(a, b, a.new_empty(N))
    assert c.shape == (M, N) and c.dtype == dtype
    assert rel_err(c, a.float() @ b.float()) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("M,N,K", [(16, 4096, 4096), (33, 1000, 4100)])
def test_split_k_epilogues(M, N, K, activation, dtype):
    a, b, bias = _inputs(M, N, K, dtype, seed=7 * M + K)
    c = _split_k(M, N, K, dtype, "bias" if activation == "none" else "bias_" + activation)(a, b, bias)
    ref = a.float() @ b.float() + bias.float()
    if activation == "relu":
        ref = torch.relu(ref)
    if activation == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    assert rel_err(c, ref) < EPILOGUE_TOL[dtype]


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_every_element_is_written_into_a_poisoned_output(M, N, K):
    a, b, bias = _inputs(M, N, K, torch.float16, seed=11 + K)
    kernel = _split_k(M, N, K, torch.float16, "bias_gelu")
    assert kernel.num_kernels == 2
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    kernel.launch(a, b, bias, c)
    torch.cuda.synchronize()
    ref = torch.nn.functional.gelu(a.float() @ b.float() + bias.float(), approximate="tanh")
    assert rel_err(c, ref) < EPILOGUE_TOL[torch.float16]


def test_the_slices_are_summed_in_a_fixed_order():
    a, b, _ = _inputs(16, 4096, 4096, torch.bfloat16, seed=5)
    kernel = _split_k(16, 4096, 4096, torch.bfloat16)
    first = kernel(a, b, a.new_empty(4096))
    for _ in range(3):
        assert torch.equal(kernel(a, b, a.new_empty(4096)), first)


@pytest.mark.parametrize("splits", [1, 3, 16])
def test_forced_slice_counts_agree(splits):
    M, N, K = 16, 4096, 4096
    a, b, _ = _inputs(M, N, K, torch.float16, seed=splits)
    kernel = gemm.kernel_for(M, N, K, torch.float16, splits=splits)
    assert kernel.num_kernels == (1 if splits == 1 else 2)
    assert rel_err(kernel(a, b, a.new_empty(N)), a.float() @ b.float()) < TOL[torch.float16]


@pytest.mark.parametrize("M,N,K", [(16, 4096, 4096), (256, 512, 768)])
def test_the_legacy_path_gives_the_same_product(M, N, K):
    a, b, bias = _inputs(M, N, K, torch.float16, seed=3)
    legacy = gemm.matmul(a, b, bias=bias, path="legacy")
    assert rel_err(legacy, a.float() @ b.float() + bias.float()) < EPILOGUE_TOL[torch.float16]
