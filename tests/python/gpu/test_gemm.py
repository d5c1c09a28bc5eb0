"""T.gemm on tensor cores against torch in float32, aligned and ragged."""
import importlib

import pytest
import torch

pytestmark = pytest.mark.gpu

gemm = importlib.import_module("tegula.kernels.gemm")


def _rel(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in the output"
    return ((out - ref).norm() / ref.norm()).item()


def _inputs(M, N, K, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, generator=g, device="cuda").to(dtype)
    b = torch.randn(K, N, generator=g, device="cuda").to(dtype)
    return a, b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K", [(256, 256, 256), (1024, 512, 768), (127, 1000, 333), (16, 4096, 4096),
                                   (4097, 4095, 4096), (1, 8, 16)])
def test_matmul(M, N, K, dtype):
    a, b = _inputs(M, N, K, dtype, seed=M + N + K)
    c = gemm.matmul(a, b)
    tol = 1e-3 if dtype == torch.float16 else 8e-3
    assert c.shape == (M, N) and c.dtype == dtype
    assert _rel(c, a.float() @ b.float()) < tol


@pytest.mark.parametrize("activation", ["none", "relu", "gelu"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matmul_epilogues(activation, with_bias):
    M, N, K = 300, 264, 200
    a, b = _inputs(M, N, K, torch.float16, seed=3)
    bias = torch.randn(N, device="cuda").half() if with_bias else None
    c = gemm.matmul(a, b, bias=bias, activation=activation)
    ref = a.float() @ b.float()
    if with_bias:
        ref = ref + bias.float()
    if activation == "relu":
        ref = torch.relu(ref)
    if activation == "gelu":
        ref = torch.nn.functional.gelu(ref, approximate="tanh")
    assert _rel(c, ref) < 2e-3


def test_the_tilelang_example_with_relu_epilogue():
    import os
    import sys

    import tegula

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from lang_kernels import gemm_relu_program

    matmul = tegula.jit(out_idx=[-1])(gemm_relu_program)
    kernel = matmul(512, 384, 256, 128, 128, 32)
    a, b = _inputs(512, 384, 256, torch.float16, seed=9)
    assert _rel(kernel(a, b), torch.relu(a.float() @ b.float())) < 1e-3


def test_transpose_b_and_row_reduction_of_the_accumulator():
    """acc = Q @ K^T with FullRow warps, then a row max over the accumulator layout."""
    import tegula
    import tegula.language as T

    M, N, D = 128, 64, 64

    @T.prim_func
    def scores(Q: T.Tensor((M, D), "float16"), Kt: T.Tensor((N, D), "float16"), S: T.Tensor((M, N), "float32"),
               R: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            q = T.alloc_shared((M, D), "float16")
            k = T.alloc_shared((N, D), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            mx = T.alloc_fragment((M,), "float32")
            T.copy(Q, q)
            T.copy(Kt, k)
            T.gemm(q, k, acc, transpose_B=True, policy=T.GemmWarpPolicy.FullRow, clear_accum=True)
            T.reduce_max(acc, mx, dim=1)
            T.copy(acc, S)
            for i in T.Parallel(M):
                R[i] = mx[i]

    kernel = tegula.compile(scores, out_idx=[2, 3])
    q = torch.randn(M, D, device="cuda").half()
    kt = torch.randn(N, D, device="cuda").half()
    s, r = kernel(q, kt)
    ref = q.float() @ kt.float().t()
    assert _rel(s, ref) < 1e-3
    assert _rel(r, ref.amax(1)) < 1e-3


def test_autotuned_matmul(tmp_path, monkeypatch):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    a, b = _inputs(512, 768, 256, torch.float16, seed=21)
    c = gemm.matmul_tuned(a, b)
    assert _rel(c, a.float() @ b.float()) < 1e-3
    kernel = gemm.matmul_tuned_kernel(512, 768, 256, dtype="float16")
    chosen = kernel.config
    assert any(all(chosen.get(k) == v for k, v in c.items()) for c in gemm._tuning_configs(512, 768, 256))
    assert kernel.latency > 0


def _variant(M, N, K, **kw):
    import os
    import sys

    import tegula

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from lang_kernels import gemm_variant_program

    return tegula.compile(gemm_variant_program(M, N, K, **kw), out_idx=[2])


@pytest.mark.parametrize("M,N,K", [(128, 128, 64), (200, 136, 96), (77, 300, 160)])
@pytest.mark.parametrize("transpose_A,transpose_B,a_in_registers",
                         [(True, False, False), (True, True, False), (False, False, True), (False, True, True)])
def test_gemm_transposes_and_a_from_registers(M, N, K, transpose_A, transpose_B, a_in_registers):
    g = torch.Generator(device="cuda").manual_seed(M * 7 + N + K)
    a = torch.randn(M, K, generator=g, device="cuda").half()
    b = torch.randn(K, N, generator=g, device="cuda").half()
    kernel = _variant(M, N, K, transpose_A=transpose_A, transpose_B=transpose_B, a_in_registers=a_in_registers)
    a_arg = a.t().contiguous() if transpose_A else a
    b_arg = b.t().contiguous() if transpose_B else b
    assert _rel(kernel(a_arg, b_arg), a.float() @ b.float()) < 1e-3


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_a_from_registers_both_types(dtype):
    M, N, K = 192, 128, 128
    a, b = _inputs(M, N, K, dtype, seed=31)
    kernel = _variant(M, N, K, a_in_registers=True, dtype="float16" if dtype == torch.float16 else "bfloat16")
    assert _rel(kernel(a, b), a.float() @ b.float()) < (1e-3 if dtype == torch.float16 else 8e-3)


def test_gemm_float16_accumulation():
    """fp16 accumulators: error of a few fp16 roundings per partial sum, nothing more."""
    M, N, K = 256, 192, 256
    a, b = _inputs(M, N, K, torch.float16, seed=41)
    kernel = _variant(M, N, K, accum_dtype="float16")
    ref = a.float() @ b.float()
    err = _rel(kernel(a, b), ref)
    assert err < 5e-3
    # And it really accumulates in fp16: a float32 accumulator rounds only once.
    assert err > _rel(_variant(M, N, K)(a, b), ref)


@pytest.mark.parametrize("M,N", [(128, 256), (100, 200)])
def test_annotated_swizzled_shared_tile(M, N):
    import os
    import sys

    import tegula

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from lang_kernels import swizzled_transpose_program

    x = torch.randn(M, N, device="cuda").half()
    kernel = tegula.compile(swizzled_transpose_program(M, N), out_idx=[1])
    assert torch.equal(kernel(x), x.t().contiguous())


# Tiles that take the wgmma path on sm_90a through every operand layout it has:
# (block_M, block_N, block_K, num_stages, threads, transpose_A, transpose_B, why).
WGMMA_TILES = [
    (128, 256, 64, 4, 256, False, False, "Hopper default: N-major B in four 128-byte panels, a group kept in flight"),
    (256, 128, 64, 4, 256, False, True, "two m64 tiles per warpgroup; K-major B"),
    (64, 64, 16, 3, 128, False, False, "32-byte rows: the 32-byte swizzle for A"),
    (128, 128, 32, 3, 128, True, False, "M-major A in two panels; 64-byte rows"),
    (64, 128, 128, 2, 128, False, True, "K-major operands in two panels: k-steps cross a panel"),
    (128, 64, 64, 3, 256, True, True, "warpgroups split along M, both operands transposed"),
]


@pytest.mark.parametrize("tile", WGMMA_TILES, ids=[t[-1].split(":")[0].split(";")[0] for t in WGMMA_TILES])
@pytest.mark.parametrize("M,N,K", [(256, 512, 256), (200, 520, 328)])
def test_wgmma_tiles_match_the_reference_and_mma_sync(tile, M, N, K):
    import os
    import sys

    import tegula

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma is an sm_90a instruction")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from lang_kernels import gemm_variant_program

    bm, bn, bk, stages, threads, ta, tb, _ = tile
    program = gemm_variant_program(M, N, K, block_M=bm, block_N=bn, block_K=bk, num_stages=stages, threads=threads,
                                   transpose_A=ta, transpose_B=tb)
    wgmma = tegula.compile(program)
    assert "tegula::wgmma_ss<" in wgmma.get_kernel_source()
    mma = tegula.compile(program, pass_configs={"tl.disable_wgmma": True})
    assert "tegula::wgmma" not in mma.get_kernel_source() and "tegula::gemm_ss<" in mma.get_kernel_source()
    a, b = _inputs(M, N, K, torch.float16, seed=M + N + K + bm + bk)
    a_arg = a.t().contiguous() if ta else a
    b_arg = b.t().contiguous() if tb else b
    ref = a.float() @ b.float()
    for kernel in (wgmma, mma):
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        kernel(a_arg, b_arg, c)
        assert _rel(c, ref) < 1e-3


def test_wgmma_with_plain_stores_into_the_operands():
    """K = 4095: rows of A are not 16-byte aligned, so its tiles are stored by ordinary
    st.shared instead of cp.async, and the barriers before the wgmma reads fence them."""
    import tegula

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma is an sm_90a instruction")
    M, N, K = 384, 512, 4095
    a, b = _inputs(M, N, K, torch.float16, seed=51)
    kernel = gemm.matmul_kernel(M, N, K, block_M=128, block_N=256, block_K=64, num_stages=4, threads=256)
    assert "sync_async_proxy();" in kernel.get_kernel_source()
    assert _rel(kernel(a, b, a.new_empty(N)), a.float() @ b.float()) < 1e-3
