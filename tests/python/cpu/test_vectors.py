"""Vector instructions in the generated code, without a GPU (programs in
tests/python/vector_programs.py; the GPU side in gpu/test_vectors_gpu.py):

- conversions between float types two at a time: the source names CUDA's pair conversion
  on the targets that have it (scalar conversions elsewhere), an odd element out stays
  scalar, and the reference and the simulator agree with torch (with CUDA's 8-bit
  saturation) on NaN, infinities, overflowing and subnormal values, ragged lengths;
- T.vectorized loops: float4 / float2 accesses where each access is contiguous or invariant
  and aligned (T.StridedTensor columns, a C[r, c // K] shared by K neighbours, a row whose
  alignment T.assume vouches for), a loop that no vector can run stays a loop; results
  agree with torch.
Every program compiles with NVRTC."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import vector_programs as vp  # noqa: E402

PAIR_IDS = [f"{s}-{d}" for s, d, _, _ in vp.PAIRS]


def scalar_casts(code: str) -> int:
    """How many of the device library's one-element conversions (cast<T>(x)) the code has."""
    return len(re.findall(r"(?<![A-Za-z_])cast<", code))


def kernel(program, target):
    k = tegula.compile(program, out_idx=[1], target=target)
    assert k.cubin()[:4] == b"\x7fELF"
    return k


@pytest.mark.parametrize("src,dst,cuda,since", vp.PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("form", ["copy", "parallel"])
def test_pairs_convert_with_cudas_instruction(src, dst, cuda, since, form):
    program = vp.copy_program(512, src, dst) if form == "copy" else vp.parallel_program(512, src, dst)
    for target in ("sm_80", "sm_89", "sm_90a"):
        code = kernel(program, target).get_kernel_source()
        sm = int(target[3:5])
        assert (cuda in code) == (sm >= since), f"{target}: {cuda} expected {sm >= since}\n{code}"
        # every element converts in a pair, or each alone
        assert (scalar_casts(code) == 0) == (sm >= since), code


@pytest.mark.parametrize("src,dst,cuda,since", vp.PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("form,M,per_thread", [("copy", 1000, 2), ("parallel", 1001, 2), ("parallel", 771, 3)])
def test_pairs_agree_with_torch(src, dst, cuda, since, form, M, per_thread):
    program = vp.copy_program(M, src, dst) if form == "copy" else vp.parallel_program(M, src, dst, per_thread)
    k = kernel(program, "sm_90a")
    a = vp.sample(M, src, torch.Generator().manual_seed(M + len(src) * 7 + len(dst)))
    want = vp.expected(a, dst)
    assert vp.same(tt.reference(k, a), want)
    assert vp.same(tt.simulate(k, a), want)


@pytest.mark.parametrize("src,dst,cuda,since", vp.PAIRS, ids=PAIR_IDS)
def test_conversions_under_different_guards_stay_scalar(src, dst, cuda, since):
    # Rows of 3: a thread's conversions of a row's third element are guarded, its others
    # not, so neighbours do not pair; each converts alone, with the same result.
    k = kernel(vp.rows_program(128, 3, src, dst), "sm_90a")
    assert scalar_casts(k.get_kernel_source()) > 0
    a = vp.sample(384, src, torch.Generator().manual_seed(3)).reshape(128, 3)
    want = vp.expected(a, dst)
    assert vp.same(tt.reference(k, a), want)
    assert vp.same(tt.simulate(k, a), want)


def test_pair_conversion_registers_are_aligned():
    code = kernel(vp.parallel_program(256, "float32", "float8_e4m3fn"), "sm_90a").get_kernel_source()
    # Two 8-bit floats are converted into one 2-byte word, and the four are stored from the
    # array as one 4-byte word (forward_locals): the array is aligned for the wider.
    assert "fp8_e4m3_t b[4] __attribute__((aligned(4)));" in code, code
    assert "*reinterpret_cast<const Vec<fp8_e4m3_t, 4>*>(&b[0]);" in code, code
    assert "__nv_cvt_float2_to_fp8x2(*reinterpret_cast<const float2*>(&a[0]), __NV_SATFINITE, __NV_E4M3)" in code


def test_no_pairs_when_vectorizing_is_disabled():
    k = tegula.compile(vp.parallel_program(256, "float32", "float16"), out_idx=[1], target="sm_90a",
                       pass_configs={"tir.disable_vectorize": True})
    assert "__float22half2_rn" not in k.get_kernel_source()


# ------------------------------------------------------------------ T.vectorized loops

@pytest.mark.parametrize("stride_a,stride_b,wants", [(64, 64, ["float4"]), (66, 68, ["float2", "float4"]),
                                                     (65, 64, ["float4"]), (67, 65, [])])
def test_strided_columns_move_as_vectors(stride_a, stride_b, wants):
    N, M = 64, 64
    k = tegula.compile(vp.strided_copy_program(N, M, stride_a, stride_b), target="sm_90a")
    assert k.cubin()
    code = k.get_kernel_source()
    for w in wants:
        assert f"reinterpret_cast<{w}*>" in code or f"reinterpret_cast<const {w}*>" in code, code
    if not wants:
        assert "reinterpret_cast" not in code and "#pragma unroll" in code
    base_a = torch.randn(stride_a * M)
    base_b = torch.full((stride_b * M,), float("nan"))
    a = torch.as_strided(base_a, (N, M), (1, stride_a))
    b = torch.as_strided(base_b, (N, M), (1, stride_b))
    for run in (tt.simulate,):  # thread-index programs: the reference runs tile programs only
        out = b.clone()
        run(k, a, out)
        assert torch.equal(out, a)


@pytest.mark.parametrize("K,width", [(2, "float2"), (4, "float4"), (6, "float2"), (8, "float4"), (3, None)])
def test_invariant_loads_are_shared_by_a_group(K, width):
    N, M = 64, 24 * K
    k = tegula.compile(vp.scaled_rows_program(N, M, K), out_idx=[2], target="sm_90a")
    code = k.get_kernel_source()
    if width:
        assert f"reinterpret_cast<{width}*>(&B[" in code, code
        assert ("float4" in code) == (width == "float4")
    else:
        assert "reinterpret_cast" not in code, code
    a, c = torch.randn(N, M), torch.randn(N, M // K)
    want = a * c[:, torch.arange(M) // K]
    for run in (tt.simulate,):
        torch.testing.assert_close(run(k, a, c), want, rtol=0, atol=0)


def test_a_vectorized_loop_converts_in_pairs():
    k = tegula.compile(vp.scaled_rows_program(32, 64, 4, "float16"), out_idx=[2], target="sm_90a")
    code = k.get_kernel_source()
    assert "__float22half2_rn(" in code and "reinterpret_cast<Vec<half_t, 4>*>(&B[" in code, code
    a, c = torch.randn(32, 64), torch.randn(32, 16)
    want = (a * c[:, torch.arange(64) // 4]).half()
    for run in (tt.simulate,):
        torch.testing.assert_close(run(k, a, c), want, rtol=0, atol=0)


def test_assumed_alignment_gives_float4_without_a_test():
    k = tegula.compile(vp.assumed_program(32), out_idx=[1], target="sm_90a")
    code = k.get_kernel_source()
    assert "float4" in code and "if (" not in code, code
    for N in (128, 132):
        a = torch.randn(32, N)
        want = torch.full((32, N), float("nan"))
        want[torch.arange(32)[:, None], torch.arange(32)[:, None] * 4 + torch.arange(4)] = \
            a[torch.arange(32)[:, None], torch.arange(32)[:, None] * 4 + torch.arange(4)] + 1
        for run in (tt.simulate,):
            torch.testing.assert_close(run(k, a), want, rtol=0, atol=0, equal_nan=True)


def test_a_broken_assumption_is_reported_by_the_simulator():
    # T.assume on sizes is checked before the launch (as on the GPU), so the call is refused
    # before the simulator's own check of the assumption could run.
    k = tegula.compile(vp.assumed_program(32), out_idx=[1], target="sm_90a")
    with pytest.raises(RuntimeError, match="does not hold"):
        tt.simulate(k, torch.randn(32, 130))


@pytest.mark.parametrize("program,args,want", [
    (vp.running_sum_program, (64, 8), lambda a: a.sum(1)),
    (vp.shifted_program, (64,), lambda a: torch.cat([a[:, :1] * 2.0 ** torch.arange(5), a[:, 5:]], 1)),
])
def test_loops_whose_iterations_depend_on_each_other_stay_loops(program, args, want):
    k = tegula.compile(program(*args), out_idx=[1], target="sm_90a")
    code = k.get_kernel_source()
    assert "#pragma unroll" in code
    a = torch.randn(args[0], *(args[1:] or (8,)))
    for run in (tt.simulate,):
        torch.testing.assert_close(run(k, a), want(a), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cols", [8, 6])
def test_vectorized_loops_in_a_parallel_body(cols):
    # Each T.Parallel iteration (a row) runs its T.vectorized loop: float4 where the row is
    # 16-byte aligned (8 columns), pairs of floats where it is 8-byte aligned (6 columns).
    k = tegula.compile(vp.rows_in_parallel_program(64, cols), out_idx=[1], target="sm_90a")
    code = k.get_kernel_source()
    assert ("float4" if cols == 8 else "float2") in code, code
    a = torch.randn(64, cols)
    want = torch.relu(a) * 2
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(k, a), want, rtol=0, atol=0)


@pytest.mark.parametrize("shape,kept", [((128, 256), 100), ((100, 200), 77), ((64, 128), 64)],
                         ids=["aligned", "ragged", "all"])
def test_stores_under_a_row_condition_stay_vectors(shape, kept):
    M, N = shape
    kernel = tegula.compile(vp.guarded_rows_program(M, N, kept), target="sm_90a")
    src = kernel.get_kernel_source()
    # the row test wraps whole 16-byte stores, once per group of eight columns
    assert re.search(r"if \(.*< kept\)\) \{\s*\n(.*\n){0,12}.*Vec<half_t, 8>\*>\(&B\[", src), src
    a = torch.randn(M, N).half()
    b0 = torch.randn(M, N).half()
    expected = vp.guarded_rows_expected(a, b0, kept)
    for run in (tt.reference, tt.simulate):
        b = b0.clone()
        run(kernel, a, b, kept)
        assert torch.equal(b, expected), run.__name__
