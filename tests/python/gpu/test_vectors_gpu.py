"""Vector instructions on the GPU (tests/python/vector_programs.py; the CPU side, which also
checks the generated source, in cpu/test_vectors.py): conversions of float pairs with CUDA's
pair instructions against torch (CUDA's 8-bit saturation), NaN, infinities, overflowing
and subnormal values, ragged lengths, outputs poisoned; T.vectorized loops as float4 /
float2 accesses against torch."""
import pytest
import torch

import tegula
import vector_programs as vp

pytestmark = pytest.mark.gpu

PAIR_IDS = [f"{s}-{d}" for s, d, _, _ in vp.PAIRS]


def _sm() -> int:
    major, minor = torch.cuda.get_device_capability()
    return major * 10 + minor


def poisoned(n, dtype):
    return torch.full((n,), float("nan"), dtype=torch.float32, device="cuda").to(getattr(torch, dtype))


@pytest.mark.parametrize("src,dst,cuda,since", vp.PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("form,M,per_thread", [("copy", 1000, 2), ("copy", 4096, 2), ("parallel", 1001, 2),
                                               ("parallel", 771, 3), ("parallel", 2048, 4)])
def test_pairs_agree_with_torch(src, dst, cuda, since, form, M, per_thread):
    program = vp.copy_program(M, src, dst) if form == "copy" else vp.parallel_program(M, src, dst, per_thread)
    k = tegula.compile(program)
    assert (cuda in k.get_kernel_source()) == (_sm() >= since)
    a = vp.sample(M, src, torch.Generator().manual_seed(M + len(src) * 7 + len(dst)))
    b = poisoned(M, dst)
    k(a.cuda(), b)
    assert vp.same(b, vp.expected(a, dst))


@pytest.mark.parametrize("src,dst,cuda,since", vp.PAIRS, ids=PAIR_IDS)
def test_rows_of_three_agree_with_torch(src, dst, cuda, since):
    k = tegula.compile(vp.rows_program(128, 3, src, dst))
    a = vp.sample(384, src, torch.Generator().manual_seed(3)).reshape(128, 3)
    b = poisoned(384, dst).reshape(128, 3)
    k(a.cuda(), b)
    assert vp.same(b, vp.expected(a, dst))


@pytest.mark.parametrize("stride_a,stride_b", [(128, 128), (130, 132), (132, 136), (136, 144), (129, 131)])
def test_strided_columns(stride_a, stride_b):
    N, M = 128, 128
    k = tegula.compile(vp.strided_copy_program(N, M, stride_a, stride_b))
    base_a = torch.randn(stride_a * M, device="cuda")
    base_b = torch.full((stride_b * M,), float("nan"), device="cuda")
    a = torch.as_strided(base_a, (N, M), (1, stride_a))
    b = torch.as_strided(base_b, (N, M), (1, stride_b))
    k(a, b)
    assert torch.equal(b, a)


@pytest.mark.parametrize("K", [2, 3, 4, 6, 14])
@pytest.mark.parametrize("out_dtype", ["float32", "float16", "bfloat16"])
def test_invariant_loads(K, out_dtype):
    N, M = 128, 28 * K
    k = tegula.compile(vp.scaled_rows_program(N, M, K, out_dtype), out_idx=[2])
    a, c = torch.randn(N, M, device="cuda"), torch.randn(N, M // K, device="cuda")
    want = (a * c[:, torch.arange(M, device="cuda") // K]).to(getattr(torch, out_dtype))
    torch.testing.assert_close(k(a, c), want, rtol=0, atol=0)


@pytest.mark.parametrize("N", [128, 132, 256])
def test_assumed_alignment(N):
    k = tegula.compile(vp.assumed_program(32), out_idx=[1])
    a = torch.randn(32, N, device="cuda")
    b = k(a)
    rows = torch.arange(32, device="cuda")[:, None]
    cols = rows * 4 + torch.arange(4, device="cuda")
    torch.testing.assert_close(b[rows, cols], a[rows, cols] + 1, rtol=0, atol=0)


def test_loops_whose_iterations_depend_on_each_other():
    a = torch.randn(64, 8, device="cuda")
    k = tegula.compile(vp.running_sum_program(64, 8), out_idx=[1])
    torch.testing.assert_close(k(a), a.sum(1), rtol=1e-6, atol=1e-6)
    k = tegula.compile(vp.shifted_program(64), out_idx=[1])
    want = torch.cat([a[:, :1] * 2.0 ** torch.arange(5, device="cuda"), a[:, 5:]], 1)
    torch.testing.assert_close(k(a), want, rtol=0, atol=0)


@pytest.mark.parametrize("cols", [8, 6])
def test_vectorized_loops_in_a_parallel_body(cols):
    k = tegula.compile(vp.rows_in_parallel_program(64, cols), out_idx=[1])
    a = torch.randn(64, cols, device="cuda")
    torch.testing.assert_close(k(a), torch.relu(a) * 2, rtol=0, atol=0)


@pytest.mark.parametrize("shape,kept", [((1024, 512), 1000), ((1000, 520), 613), ((512, 256), 512)],
                         ids=["aligned", "ragged", "all"])
def test_stores_under_a_row_condition(shape, kept):
    M, N = shape
    kernel = tegula.compile(vp.guarded_rows_program(M, N, kept))
    a = torch.randn(M, N, device="cuda").half()
    b = torch.full((M, N), float("nan"), device="cuda").half()
    expected = vp.guarded_rows_expected(a, b, kept)
    kernel(a, b, kept)
    torch.testing.assert_close(b, expected, rtol=0, atol=0, equal_nan=True)
