"""Every door of a raw kernel call, on a GPU: a bad argument is a clear ArgumentError
naming it, and a size past what the hardware or 32-bit arithmetic takes either just
works or is refused the same way. Never a fault, a hang or a dead CUDA context: after
each refusal a normal call and a synchronize still work.

Misaligned views into the kernels that use cp.async, dynamic sizes past 2^31, scalars out
of range, grids past 65535 blocks in y, a shared-memory plan past the limit, and the
argument checks of every kind. Large cases keep to a few GiB (an 80 GiB GPU is assumed).
"""
import importlib
import math

import pytest
import torch

import tegula
import tegula.language as T
from helpers import assert_close_rel

pytestmark = pytest.mark.gpu

elementwise, flash_attention, flash_decoding, gemm, transpose = (
    importlib.import_module(f"tegula.kernels.{m}")
    for m in ("elementwise", "flash_attention", "flash_decoding", "gemm", "matrix_transpose"))

GIB = 1 << 30


def argument_error():
    from tegula import env
    return env.native().ArgumentError


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def randn(shape, dtype=torch.float16, seed=0):
    return torch.randn(shape, generator=_gen(seed), device="cuda", dtype=torch.float32).to(dtype)


def needs_free_memory(nbytes):
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < nbytes:
        pytest.skip(f"needs {nbytes / GIB:.1f} GiB of free GPU memory, {free / GIB:.1f} GiB free")


# ---------------------------------------------------------------- a kernel known to work


def _axpy_program():
    n = T.dynamic("n")

    @T.prim_func
    def axpy(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32"), alpha: T.float32,
             Z: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 256), threads=128) as bx:
            for i in T.Parallel(256):
                Z[bx * 256 + i] = alpha * X[bx * 256 + i] + Y[bx * 256 + i]

    return axpy


@pytest.fixture(scope="module")
def axpy():
    return tegula.compile(_axpy_program(), out_idx=[-1])


def assert_context_alive(axpy):
    """A normal launch after a refusal gives the right answer, and the device syncs."""
    x, y = randn(1000, torch.float32, 1), randn(1000, torch.float32, 2)
    z = axpy(x, y, 0.5)
    torch.cuda.synchronize()
    assert_close_rel(z, 0.5 * x.double() + y.double(), 1e-6, "axpy after a refusal")


def refused(call, *words):
    with pytest.raises(ValueError) as info:
        call()
    assert type(info.value) is argument_error(), repr(info.value)
    text = str(info.value)
    for w in words:
        assert w in text, text
    return text


# ---------------------------------------------------------------- alignment


def misaligned(shape, dtype, offset, seed):
    """A contiguous view of `shape` starting `offset` elements into its storage."""
    flat = randn(math.prod(shape) + offset, dtype, seed)
    return flat[offset:].view(shape)


@pytest.mark.parametrize("offset", [1, 2, 3, 4])
def test_misaligned_view_into_matmul_is_refused_by_name(axpy, offset):
    M = N = K = 256
    kernel = gemm.matmul_kernel(M, N, K, **gemm.default_config(M, N, K))
    a, b = randn((M, K), seed=1), randn((K, N), seed=2)
    bias = torch.zeros(N, dtype=torch.float16, device="cuda")
    a_bad = misaligned((M, K), torch.float16, offset, 3)
    text = refused(lambda: kernel(a_bad, b, bias), "'A'", "16 bytes", f"storage offset {offset}")
    assert f"{2 * offset % 16} bytes past" in text, text
    refused(lambda: kernel(a, misaligned((K, N), torch.float16, offset, 4), bias), "'B'", "16 bytes")
    c = kernel(a, b, bias)
    torch.cuda.synchronize()
    assert_close_rel(c, a.double() @ b.double(), 2e-3, "matmul")
    assert_context_alive(axpy)


@pytest.mark.parametrize("offset", [1, 3, 4])
def test_misaligned_view_into_flash_attention_is_refused_by_name(axpy, offset):
    B, H, S, D = 1, 2, 128, 64
    kernel = flash_attention.kernel_for(B, H, H, S, S, D, False, 0, "bshd", "float16", None)
    q, k, v = (randn((B, S, H, D), seed=s) for s in (1, 2, 3))
    for name, pos in (("Q", 0), ("K", 1), ("V", 2)):
        args = [q, k, v]
        args[pos] = misaligned((B, S, H, D), torch.float16, offset, 10 + pos)
        refused(lambda: kernel(*args), f"'{name}'", "aligned")
    out, _ = kernel(q, k, v)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float()).transpose(1, 2)
    assert_close_rel(out, ref, 3e-3, "flash_attention")
    assert_context_alive(axpy)


@pytest.mark.parametrize("offset", [1, 2, 4])
def test_misaligned_view_into_flash_decode_is_refused_by_name(axpy, offset):
    B, H, Hkv, S, D = 2, 8, 2, 256, 128
    split, combine = flash_decoding.kernels_for(B, H, Hkv, S, D, 2, "float16", None)
    q = randn((B, H, D), seed=1)
    kc, vc = randn((B, S, Hkv, D), seed=2), randn((B, S, Hkv, D), seed=3)
    lens = torch.tensor([S, S // 2 + 3], dtype=torch.int32, device="cuda")
    refused(lambda: split(q, misaligned((B, S, Hkv, D), torch.float16, offset, 4), vc, lens), "'K'", "aligned")
    refused(lambda: split(q, kc, misaligned((B, S, Hkv, D), torch.float16, offset, 5), lens), "'V'", "aligned")
    out = combine(*split(q, kc, vc, lens))
    torch.cuda.synchronize()
    group = H // Hkv
    for b in range(B):
        L = int(lens[b])
        keys = kc[b, :L].double().repeat_interleave(group, dim=1)  # (L, H, D): head h reads kv head h // group
        values = vc[b, :L].double().repeat_interleave(group, dim=1)
        p = torch.softmax(torch.einsum("hd,lhd->hl", q[b].double(), keys) / math.sqrt(D), dim=-1)
        assert_close_rel(out[b], torch.einsum("hl,lhd->hd", p, values), 3e-3, f"flash_decode batch {b}")
    assert_context_alive(axpy)


def test_dynamic_alignment_assumption_is_checked_at_launch(axpy):
    # tl.dynamic_alignment=8 lets the vectoriser use 16-byte accesses on a dynamic length,
    # and mask them whole: a length that is not a multiple would read and write past the end.
    n = T.dynamic("n")

    @T.prim_func
    def double(X: T.Tensor((n,), "float16"), Y: T.Tensor((n,), "float16")):
        with T.Kernel(T.ceildiv(n, 512), threads=64) as bx:
            for j in T.Parallel(512):
                Y[bx * 512 + j] = X[bx * 512 + j] * T.cast(2.0, "float16")

    kernel = tegula.compile(double, out_idx=[-1], pass_configs={tegula.PassConfigKey.TL_DYNAMIC_ALIGNMENT: 8})
    assert "Vec<half_t, 8>" in kernel.get_kernel_source()
    refused(lambda: kernel(randn(1000 + 4)), "'X'", "dimension 0 is 1004", "multiple of 8", "dynamic_alignment")
    x = randn(1000 + 8, seed=5)
    y = kernel(x)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2)
    assert_context_alive(axpy)


# ---------------------------------------------------------------- sizes past 32 bits


def _increment_dynamic(dtype="int32"):
    n = T.dynamic("n", dtype)

    @T.prim_func
    def increment_dyn(A: T.Tensor((n,), "int8"), B: T.Tensor((n,), "int8")):
        with T.Kernel(T.ceildiv(n, 1024), threads=128) as bx:
            for i in T.Parallel(1024):
                B[bx * 1024 + i] = A[bx * 1024 + i] + T.cast(1, "int8")

    return tegula.compile(increment_dyn)


def _increment_static(n):
    @T.prim_func
    def increment(A: T.Tensor((n,), "int8"), B: T.Tensor((n,), "int8")):
        with T.Kernel(T.ceildiv(n, 1024), threads=128) as bx:
            for i in T.Parallel(1024):
                B[bx * 1024 + i] = A[bx * 1024 + i] + T.cast(1, "int8")

    return tegula.compile(increment)


def test_int64_dynamic_length_past_2_31_is_indexed_in_64_bits(axpy):
    """T.dynamic("n", "int64") (TileLang's test_fill_symbolic): the kernel indexes in 64
    bits, so a length past 2^31 runs; elements on both sides of 2^31 checked."""
    n = 2**31 + 3_000
    needs_free_memory(2 * n + GIB)
    kernel = _increment_dynamic("int64")
    assert "long long n" in kernel.get_kernel_source()
    a = torch.zeros(n, dtype=torch.int8, device="cuda")
    a[-7:] = 5
    out = torch.full_like(a, 99)
    kernel(a, out)
    torch.cuda.synchronize()
    assert out[:1000].eq(1).all() and out[2**31 - 10:2**31 + 10].eq(1).all() and out[-7:].eq(6).all()
    assert out.eq(99).sum().item() == 0
    del a, out
    torch.cuda.empty_cache()
    small = _int8_ramp(3_000_017)
    out = torch.full_like(small, 99)
    kernel(small, out)
    torch.cuda.synchronize()
    assert torch.equal(out, small + 1)
    assert_context_alive(axpy)


def _int8_ramp(n):
    return (torch.arange(n, device="cuda", dtype=torch.int64) % 251 - 125).to(torch.int8)


def test_dynamic_length_past_2_31_is_refused_by_name(axpy):
    n = 2**31 + 5
    needs_free_memory(2 * n + GIB)
    kernel = _increment_dynamic()
    a = torch.zeros(n, dtype=torch.int8, device="cuda")
    text = refused(lambda: kernel(a, a), "'A'", f"dimension 0 is {n}", "32-bit")
    assert "compile-time constant" in text, text
    del a
    torch.cuda.empty_cache()
    small = _int8_ramp(3_000_017)
    out = torch.full_like(small, 99)
    kernel(small, out)
    torch.cuda.synchronize()
    assert torch.equal(out, small + 1)
    assert_context_alive(axpy)


def test_static_length_past_2_31_is_indexed_in_64_bits(axpy):
    n = 2**31 + 4096 + 64  # the last block is partial
    needs_free_memory(3 * n + GIB)
    kernel = _increment_static(n)
    a = _int8_ramp(n)
    b = torch.full_like(a, 99)
    kernel(a, b)
    torch.cuda.synchronize()
    assert torch.equal(b, a + 1)
    assert_context_alive(axpy)


def test_add_on_524296_rows_of_4096_folds_the_grid_and_indexes_in_64_bits(axpy):
    # 2^31 + 32768 elements: 65537 blocks of 8 rows along y, past the hardware's 65535.
    M, N = 524296, 4096
    needs_free_memory(4 * M * N * 2 + GIB)
    x = randn((M, N), seed=1)
    y = randn((M, N), seed=2)
    out = torch.full_like(x, float("nan"))
    tegula.kernels.add(x, y, out=out)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)  # both round the float32 sum once
    del x, y, out
    torch.cuda.empty_cache()
    assert_context_alive(axpy)


def test_transpose_of_4194304_by_8_folds_the_grid(axpy):
    x = randn((4194304, 8), seed=3)
    out = tegula.kernels.transpose(x)
    torch.cuda.synchronize()
    assert torch.equal(out, x.t().contiguous())
    assert_context_alive(axpy)


def test_three_dimensional_grid_folds_y_and_z(axpy):
    b, m = T.dynamic("b"), T.dynamic("m")

    @T.prim_func
    def batched(X: T.Tensor((b, m, 64), "float32"), Y: T.Tensor((b, m, 64), "float32")):
        with T.Kernel(1, T.ceildiv(m, 4), b, threads=64) as (bx, by, bz):
            for i, j in T.Parallel(4, 64):
                Y[bz, by * 4 + i, j] = X[bz, by * 4 + i, j] * 2.0

    kernel = tegula.compile(batched, out_idx=[-1])
    for shape in ((3, 4 * 70001 + 3, 64), (2, 4 * 40000, 64), (5, 17, 64)):
        x = randn(shape, torch.float32, seed=shape[1])
        y = kernel(x)
        torch.cuda.synchronize()
        assert torch.equal(y, x * 2), shape
    assert_context_alive(axpy)


# ---------------------------------------------------------------- scalars


def _shift_program(int_dtype):
    n = T.dynamic("n")

    @T.prim_func
    def shift(X: T.Tensor((n,), "int64"), s: int_dtype, Y: T.Tensor((n,), "int64")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = X[bx * 128 + i] + T.cast(T.cast(s, int_dtype), "int64")

    return shift


def test_int32_scalar_out_of_range_is_refused_and_int64_takes_it(axpy):
    x = torch.arange(-500, 500, device="cuda", dtype=torch.int64)
    k32 = tegula.compile(_shift_program(T.int32), out_idx=[-1])
    for bad in (2**33 + 5, 2**31, -2**31 - 1, 2**100):
        refused(lambda: k32(x, bad), "'s'", "int32", "[-2147483648, 2147483647]")
    for good in (2**31 - 1, -2**31, 7):
        assert torch.equal(k32(x, good), x + good)
    k64 = tegula.compile(_shift_program(T.int64), out_idx=[-1])
    assert torch.equal(k64(x, 2**33 + 5), x + (2**33 + 5))
    refused(lambda: k64(x, 2**63), "'s'", "int64")
    torch.cuda.synchronize()
    assert_context_alive(axpy)


@pytest.mark.parametrize("value", ["1.5", None, [1.0]])
def test_float_scalar_given_a_non_number_is_refused(axpy, value):
    x = randn(100, torch.float32)
    refused(lambda: axpy(x, x, value), "'alpha'", "float32", "real number")
    assert_context_alive(axpy)


def test_int_scalar_given_a_huge_int_or_a_float_is_refused(axpy):
    x = torch.arange(10, device="cuda", dtype=torch.int64)
    k32 = tegula.compile(_shift_program(T.int32), out_idx=[-1])
    refused(lambda: k32(x, 2**100), "'s'", "int32")
    refused(lambda: k32(x, 1.0), "'s'", "must be an int", "float")
    assert torch.equal(k32(x, torch.tensor(3)), x + 3)  # a one-element int tensor is an int
    assert_context_alive(axpy)


def _scale_program(dtype, alpha_dtype):
    n = T.dynamic("n")

    @T.prim_func
    def scale(X: T.Tensor((n,), dtype), alpha: alpha_dtype, Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = T.cast(X[bx * 128 + i] * T.cast(alpha, alpha_dtype), dtype)

    return scale


def test_half_precision_scalars_reach_the_kernel_as_half(axpy):
    # A 16-bit scalar parameter takes 2 bytes: passing float32 bits would read garbage.
    for dtype, alpha_dtype, ttype in (("float16", T.float16, torch.float16),
                                      ("bfloat16", T.bfloat16, torch.bfloat16)):
        kernel = tegula.compile(_scale_program(dtype, alpha_dtype), out_idx=[-1])
        x = randn(1000, ttype, seed=4)
        y = kernel(x, 1.5)
        torch.cuda.synchronize()
        assert torch.equal(y, x * torch.tensor(1.5, dtype=ttype)), dtype
    assert_context_alive(axpy)


# ---------------------------------------------------------------- shared memory


def test_shared_memory_past_the_device_limit_is_a_compile_error():
    @T.prim_func
    def too_much(A: T.Tensor((75, 1024), "float32"), B: T.Tensor((75, 1024), "float32")):
        with T.Kernel(1, threads=128) as bx:  # too_much
            s = T.alloc_shared((75, 1024), "float32")  # 300 KiB
            T.copy(A, s)
            T.copy(s, B)

    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(too_much)  # for this GPU's target: no raw driver error at load
    with open(__file__) as f:  # the error points at the kernel's T.Kernel call
        kernel_line = 1 + next(i for i, line in enumerate(f) if "with T.Kernel(1, threads=128) as bx:  # too_much" in line)
    assert info.value.line == kernel_line, str(info.value)
    assert "s: 307200 bytes" in str(info.value)


# ---------------------------------------------------------------- the other argument checks


def test_rank_shape_device_and_layout_are_named(axpy):
    x = randn(1000, torch.float32)
    refused(lambda: axpy(x.view(10, 100), x, 1.0), "'X'", "1 dimensions", "got 2")
    refused(lambda: axpy(x, randn(999, torch.float32), 1.0), "'Y'", "dimension 0 is 999", "1000")
    refused(lambda: axpy(x, x.cpu(), 1.0), "'Y'", "CUDA device")
    refused(lambda: axpy(x, x.double(), 1.0), "'Y'", "float32")
    refused(lambda: axpy(randn(2000, torch.float32)[::2], x, 1.0), "'X'", "contiguous")
    refused(lambda: axpy(x, x), "expected 3 argument(s)")
    refused(lambda: axpy(x, 1.0, x), "'Y'", "torch.Tensor", "float")
    out = axpy(randn(0, torch.float32), randn(0, torch.float32), 1.0)  # empty: no launch
    assert out.shape == (0,)
    assert_context_alive(axpy)
