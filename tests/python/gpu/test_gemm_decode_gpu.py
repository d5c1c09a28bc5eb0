"""The decode GEMM (M <= 64, `matmul_decode_program`: Cᵀ = Bᵀ Aᵀ, one block an SM, the
last block of a tile adding the K slices) against torch in float32: through matmul as a
user calls it, with B stored (K, N) and as an nn.Linear weight (N, K), ragged shapes, the
epilogues, a NaN-poisoned output through the explicit launch, one and several K slices,
the result the same on every call (the slices added in a fixed order), concurrent calls on
two streams, a CUDA graph, NaN and inf where torch defines the result, and the mma.sync
and cp.async paths."""
import functools
import importlib

import pytest
import torch
from helpers import gemm_inputs, gemm_reference

pytestmark = pytest.mark.gpu

try:
    from ._util import rel_err
except ImportError:
    from _util import rel_err

gemm = importlib.import_module("tegula.kernels.gemm")

TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
EPILOGUE_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
# (M, N, K): several K slices (16 x 4096 x 4096 on 132 SMs: 2), one slice (64 x 8192 x
# 8192, 8 x 14336 x 4096), ragged (33 x 1000 x 4100; 5 x 72 x 200; 1 x 4104 x 520).
SHAPES = [(16, 4096, 4096), (64, 8192, 8192), (8, 14336, 4096), (33, 1000, 4100), (5, 72, 200), (1, 4104, 520)]


# a (M, K), B (N, K) and bias, from one seed
_inputs = functools.partial(gemm_inputs, b_layout="NK")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("weight", ["KN", "NK"])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matmul_at_decode_shapes(M, N, K, weight, dtype):
    a, w, _ = _inputs(M, N, K, dtype, seed=M * 7 + N + K)
    b = w.t() if weight == "NK" else w.t().contiguous()   # NK: the weight read in place
    assert gemm.kernel_for(M, N, K, dtype, sms=gemm.sm_count(a.device),
                           **({"trans_b": True} if weight == "NK" else {"ldb": N})).prim_func.name.startswith(
        "gemm_decode")
    c = gemm.matmul(a, b)
    assert c.shape == (M, N) and c.dtype == dtype
    assert rel_err(c, gemm_reference(a, b)) < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("M,N,K", [(16, 4096, 4096), (33, 1000, 4100), (8, 14336, 4096)])
def test_epilogues(M, N, K, activation, dtype):
    a, w, bias = _inputs(M, N, K, dtype, seed=3 * M + K)
    c = gemm.matmul(a, w.t(), bias=bias, activation=activation)
    assert rel_err(c, gemm_reference(a, w.t(), bias, activation)) < EPILOGUE_TOL[dtype]


@pytest.mark.parametrize("M,N,K", SHAPES)
def test_every_element_is_written_into_a_poisoned_output(M, N, K):
    a, w, bias = _inputs(M, N, K, torch.float16, seed=11 + K)
    b = w.t().contiguous()
    kernel = gemm.kernel_for(M, N, K, torch.float16, "bias_gelu", sms=gemm.sm_count(a.device), ldb=N)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    kernel.launch(a, b, bias, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    assert rel_err(c, gemm_reference(a, b, bias, "gelu")) < EPILOGUE_TOL[torch.float16]


@pytest.mark.parametrize("splits", [1, 2, 3, 4])
def test_slice_counts_agree_and_repeat_exactly(splits):
    M, N, K = 16, 2048, 4096
    a, w, _ = _inputs(M, N, K, torch.bfloat16, seed=splits)
    kernel = gemm.matmul_decode_kernel(M, N, K, splits, dtype="bfloat16", trans_b=True)
    assert kernel.num_kernels == (1 if splits == 1 else 2)
    first = kernel(a, w, a.new_empty(N))
    assert rel_err(first, gemm_reference(a, w.t())) < TOL[torch.bfloat16]
    for _ in range(3):
        assert torch.equal(kernel(a, w, a.new_empty(N)), first)


def test_concurrent_calls_on_two_streams():
    """Each call's counters and partial sums are its own: two streams running the
    several-slice kernel at once give each its own product."""
    M, N, K = 16, 4096, 4096
    inputs = [_inputs(M, N, K, torch.float16, seed=s) for s in (1, 2)]
    expected = [gemm.matmul(a, w.t()) for a, w, _ in inputs]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = [[], []]
    for _ in range(20):
        for i, ((a, w, _), s) in enumerate(zip(inputs, streams)):
            with torch.cuda.stream(s):
                outs[i].append(gemm.matmul(a, w.t()))
    torch.cuda.synchronize()
    for i in range(2):
        assert all(torch.equal(o, expected[i]) for o in outs[i])


def test_a_cuda_graph_replays_the_product():
    M, N, K = 16, 4096, 4096
    a, w, _ = _inputs(M, N, K, torch.float16, seed=5)
    eager = gemm.matmul(a, w.t())
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gemm.matmul(a, w.t())
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gemm.matmul(a, w.t())
    for seed in (6, 7):
        a.copy_(_inputs(M, N, K, torch.float16, seed=seed)[0])
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, gemm.matmul(a, w.t()))
    assert not torch.equal(out, eager)


def test_nan_and_inf_propagate_as_in_torch():
    M, N, K = 16, 4096, 4096
    a, w, _ = _inputs(M, N, K, torch.float16, seed=9)
    a[3, 100] = float("nan")
    w[17, 5] = float("inf")
    w[18, 6] = float("-inf")
    c = gemm.matmul(a, w.t()).float()
    ref = a.float() @ w.t().float()
    assert torch.equal(c.isnan(), ref.isnan()) and torch.equal(c.isinf(), ref.isinf())
    finite = ref.isfinite()
    assert torch.equal(torch.sign(c[c.isinf()]), torch.sign(ref[ref.isinf()]))
    assert rel_err(torch.where(finite, c, 0), torch.where(finite, ref, 0)) < 2e-3


@pytest.mark.parametrize("mma_sync,path", [(True, "auto"), (False, "legacy")])
def test_the_other_code_paths_give_the_same_product(mma_sync, path):
    M, N, K = 16, 4096, 4096
    a, w, bias = _inputs(M, N, K, torch.float16, seed=13)
    kernel = gemm.kernel_for(M, N, K, torch.float16, "bias_relu", mma_sync=mma_sync, path=path,
                             sms=gemm.sm_count(a.device), trans_b=True)
    assert kernel.prim_func.name.startswith("gemm_decode")
    c = kernel(a, w, bias)
    assert rel_err(c, gemm_reference(a, w.t(), bias, "relu")) < EPILOGUE_TOL[torch.float16]
