"""Eager @tegula.jit programs (the function is the kernel body) against torch on the GPU:
the GEMM, RMSNorm and softmax of tests/python/eager_programs.py, called directly and
through .compile(), plus scalar parameters, several outputs and in-place writes."""
import pytest
import torch
import torch.nn.functional as F

import eager_programs as P
import tegula
import tegula.language as T

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import assert_close, norm_weight, randn, seed_of
except ImportError:
    from _util import assert_close, norm_weight, randn, seed_of

pytestmark = pytest.mark.gpu

H16 = torch.float16


@pytest.mark.parametrize("M,N,K", [(1024, 1024, 512), (256, 384, 192)])
def test_gemm_matches_torch(M, N, K):
    gemm = P.eager_gemm()
    a = randn((M, K), H16, seed_of("a", M, N, K))
    b = randn((K, N), H16, seed_of("b", M, N, K))
    c = gemm(a, b)
    assert c.shape == (M, N) and c.dtype == H16 and c.is_cuda
    assert_close(c, a.float() @ b.float(), H16, f"eager gemm {M}x{N}x{K}")
    c64 = gemm(a, b, block_M=64, block_N=64, threads=128)  # other constants: another kernel
    assert_close(c64, a.float() @ b.float(), H16, "eager gemm 64x64 tiles")


def test_compiled_kernel_matches_torch_and_serves_calls():
    gemm = P.eager_gemm()
    kernel = gemm.compile(M=512, N=256, K=256)
    a, b = randn((512, 256), H16, 1), randn((256, 256), H16, 2)
    ref = a.float() @ b.float()
    assert_close(kernel(a, b), ref, H16, "compiled eager gemm")
    assert_close(gemm(a, b), ref, H16, "eager gemm after compile")
    assert len(gemm._fast) == 1  # the call found the compiled kernel
    assert kernel.get_profiler().do_bench(warmup=1, rep=3) > 0


def test_rms_norm_one_kernel_for_all_row_counts():
    rms_norm = P.eager_rms_norm()
    n = 1024
    w = norm_weight(n, H16, seed_of("w", n))
    for rows in (1, 37, 300):
        x = randn((rows, n), H16, seed_of("x", rows))
        y = rms_norm(x, w)
        ref = F.rms_norm(x.double(), (n,), w.double(), 1e-6)
        assert y.shape == x.shape
        assert_close(y, ref, H16, f"eager rms_norm rows={rows}")
    assert len(rms_norm._fast) == 1  # rows are T.dynamic: one kernel served them all


def test_softmax_matches_torch():
    softmax = P.eager_softmax()
    for rows in (5, 64):
        x = randn((rows, 512), H16, seed_of("softmax", rows), scale=4.0)
        assert_close(softmax(x), torch.softmax(x.double(), dim=-1), H16, f"eager softmax rows={rows}")


@tegula.jit
def _shift(X, n):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    n: T.int32
    Up = T.empty((N,), "float32")
    Down = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
        for i in T.Parallel(128):
            Up[bx * 128 + i] = X[bx * 128 + i] + T.cast(n, "float32")
            Down[bx * 128 + i] = X[bx * 128 + i] - T.cast(n, "float32")
    return Down, Up


@tegula.jit
def _scale_in_place(X, factor=2.0):
    m = T.dynamic("m")
    X: T.Tensor((m,), "float32")
    with T.Kernel(T.ceildiv(m, 128), threads=128) as bx:
        for i in T.Parallel(128):
            if bx * 128 + i < m:
                X[bx * 128 + i] = X[bx * 128 + i] * factor


def test_scalar_parameter_and_several_outputs():
    x = randn((1024,), torch.float32, 5)
    for n in (3, -7):
        down, up = _shift(x, n)  # a tuple, in `return` order; n is a launch argument
        assert torch.equal(down, x - n) and torch.equal(up, x + n)
    assert len(_shift._fast) == 1


def test_in_place_write_returns_none():
    for size in (1000, 128):
        x = randn((size,), torch.float32, size)
        expected = x * 3.0
        assert _scale_in_place(x, factor=3.0) is None
        assert torch.equal(x, expected)


# ---- T.ptr, T.make_tensor and par_compile ----

@pytest.mark.parametrize("M,N,K", [(256, 128, 64), (1024, 1024, 1024)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_pointer_gemm_matches_torch(M, N, K, dtype):
    gemm = P.pointer_gemm()
    gemm.par_compile([{"A": T.ptr(), "B": T.ptr(), "C": T.ptr(), "M": M, "N": N, "K": K, "dtype": dtype,
                       "out_dtype": torch.float32}])
    a = torch.randn(M, K, device="cuda").to(dtype)
    b = torch.randn(K, N, device="cuda").to(dtype)
    c = torch.empty(M, N, device="cuda")
    gemm(a, b, c, M, N, K, dtype, torch.float32)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("n", [128, 1000, 4096])
def test_pointer_kernel_matches_torch(n):
    x = torch.randn(n, device="cuda")
    y = torch.empty(n, device="cuda")
    P.pointer_scale()(x, y, n)
    torch.testing.assert_close(y, x * 2 + 1)


def test_module_par_compile_kernels_launch():
    funcs = [P.pointer_scale().get_tir(T.ptr(), T.ptr(), n) for n in (128, 333)]
    for n, kernel in zip((128, 333), tegula.par_compile(funcs)):
        x = torch.randn(n, device="cuda")
        y = torch.empty(n, device="cuda")
        kernel(x, y)
        torch.testing.assert_close(y, x * 2 + 1)
