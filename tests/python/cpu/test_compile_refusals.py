"""Programs a random program generator found NVRTC, ptxas or the device headers refusing,
or ptxas taking minutes over (compiled for sm_90a): each now either compiles, agreeing with
tegula.testing.reference under .simulate, or is the user's error at its DSL line.

  * an attention tile (64 x 16, head dimension 256, 128 threads): its P·V wgmma
    (m64n256k16) needs about 160 registers, past the 128 two blocks a SM leave a thread of
    the warp-specialised kernel (ptxas C7602): the kernel keeps one block a SM; a tile no
    thread count can hold is refused at its T.gemm;
  * T.reduce_abssum (and max, min, absmax) of a bool fragment into a bool: a static_assert
    in the device headers; bool is the integers 0 and 1 there now (max: any, min: all);
  * a 32 x 256 float32 T.alloc_local (32 KiB a thread; ptxas took 48 s): refused at its line
    past a thread's 255 registers; a constant index past a local array that unrolled loops
    make is an error at its line; a local array of several dimensions is indexed row-major
    (it was indexed by its first index alone).
tests/python/gpu/test_compile_refusals_gpu.py runs the programs that compile.
"""
import inspect
import re
import time

import pytest
import torch

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402
import tegula.testing as tt  # noqa: E402
import refusal_programs as rp  # noqa: E402


@pytest.fixture
def uncached():
    """NVRTC runs: neither cache answers (a timing means the compile), both restored after."""
    from tegula import env

    C = env.native()
    was = C.cache_disk_enabled()
    C.set_cache_enabled(False)
    C.clear_memory_cache()
    misses = C.cache_stats()["misses"]
    yield
    assert C.cache_stats()["misses"] > misses
    C.set_cache_enabled(was)


def mark_line(fn, mark):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if f"# MARK-{mark}" in line)


# ---------------------------------------------------------------- registers of a wgmma


def test_attention_tile_with_a_wide_pv_gemm_compiles_one_block_a_sm(uncached):
    start = time.monotonic()
    kernel = tegula.compile(rp.attention_program(64, 64, 256, 64, 16, 128), out_idx=[3], target="sm_90a")
    src = kernel.get_kernel_source()
    # Warp-specialised (a producer warpgroup more), one block a SM: 248 registers a thread.
    assert "__launch_bounds__(256, 1)" in src, re.findall(r"__launch_bounds__\([^)]*\)", src)
    assert "struct wgmma_rs_n256_f16" in src
    assert kernel.cubin()[:4] == b"\x7fELF"
    assert time.monotonic() - start < 60
    q, k, v = (torch.randn(2, 64, 256).half() for _ in range(3))
    expected = rp.attention_reference(q, k, v)
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel, q, k, v).double(), expected, rtol=2e-2, atol=2e-3)


def test_narrow_attention_tiles_keep_two_blocks_a_sm():
    # m64n64 accumulators (32 registers) fit the 128 of two blocks a SM.
    kernel = tegula.compile(rp.attention_program(64, 64, 64, 64, 16, 128), out_idx=[3], target="sm_90a")
    assert "__launch_bounds__(256, 2)" in kernel.get_kernel_source()
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_a_wgmma_no_thread_can_hold_is_refused_at_its_gemm():
    # 256 x 256 over four warpgroups: each issues m64n256k16 (128 accumulators), and 512
    # consumer threads and a producer warpgroup leave a thread 102 registers.
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(rp.wide_gemm_program(256, 256, 512), target="sm_90a")
    err = info.value
    assert err.line == mark_line(rp.wide_gemm_program, "wide"), str(err)
    assert "wgmma instruction m64n256k16 holds 128 accumulator registers" in err.message, err.message
    assert "past the 102 registers a thread of this kernel has (640 threads a block" in err.message, err.message
    # The same tile over two warpgroups along M fits: the gemm is not refused for its size.
    kernel = tegula.compile(rp.wide_gemm_program(128, 256, 256), target="sm_90a")
    assert kernel.cubin()[:4] == b"\x7fELF"


# ---------------------------------------------------------------- bool reductions


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kind", rp.REDUCE_KINDS)
def test_bool_reductions_into_bool(kind, target):
    kernel = tegula.compile(rp.bool_reduce_program(kind), out_idx=[1], target=target)
    assert kernel.cubin()[:4] == b"\x7fELF"
    gen = torch.Generator().manual_seed(len(kind))
    x = torch.rand(16, 32, generator=gen) < 0.08
    x[3] = True  # a row of all true (min: true), and one of all false (max: false)
    x[4] = False
    expected = rp.bool_reduce_expected(kind, x)
    for run in (tt.reference, tt.simulate):
        assert run(kernel, x).tolist() == expected.tolist(), (run.__name__, kind)


def elementwise_bool_program():
    @T.prim_func
    def bool_math(X: T.Tensor((32,), "bool"), Y: T.Tensor((3, 32), "bool")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(32):
                Y[0, i] = T.max(X[i], X[31 - i])
                Y[1, i] = T.min(X[i], X[31 - i])
                Y[2, i] = T.abs(X[i])

    return bool_math


def test_max_min_abs_of_bools():
    kernel = tegula.compile(elementwise_bool_program(), out_idx=[1], target="sm_90a")
    assert kernel.cubin()[:4] == b"\x7fELF"
    x = torch.rand(32, generator=torch.Generator().manual_seed(1)) < 0.5
    expected = torch.stack([x | x.flip(0), x & x.flip(0), x])
    for run in (tt.reference, tt.simulate):
        assert run(kernel, x).tolist() == expected.tolist(), run.__name__


# ---------------------------------------------------------------- local arrays


def local_program(shape, dtype):
    first = (0,) * len(shape)

    @T.prim_func
    def big_local(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            acc = T.alloc_local(shape, dtype)  # MARK-local
            for i in T.Parallel(64):
                acc[first] = X[i]
                Y[i] = acc[first]

    return big_local


@pytest.mark.parametrize("shape,dtype,size", [((32, 256), "float32", 32768), ((256,), "float32", 1024),
                                              ((64, 16), "bool", 1024), ((128,), "float64", 1024)])
def test_a_local_array_past_a_threads_registers_is_refused_at_its_line(shape, dtype, size):
    with pytest.raises(tegula.TegulaCompileError) as info:
        local_program(shape, dtype)
    err = info.value
    assert err.line == mark_line(local_program, "local"), str(err)
    assert f"T.alloc_local: shape {shape} of {dtype} takes {size} bytes in every thread, past the 1020 bytes" \
        in err.message, err.message


@pytest.mark.parametrize("shape,dtype", [((255,), "float32"), ((1020,), "int8"), ((3, 85), "float32")])
def test_a_local_array_in_a_threads_registers_compiles(shape, dtype):
    kernel = tegula.compile(local_program(shape, dtype), out_idx=[1], target="sm_90a")
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_a_local_array_of_two_dimensions_is_indexed_row_major():
    kernel = tegula.compile(rp.local_2d_program(4, 8), out_idx=[1], target="sm_90a")
    src = kernel.get_kernel_source()
    assert "float acc[32]" in src and re.search(r"acc\[\(r\w*\) \* 8 \+ c\w*\]", src), src
    assert kernel.cubin()[:4] == b"\x7fELF"
    x = torch.randn(64, 8)
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(kernel, x).double(), rp.local_2d_expected(x, 4))


def a_whole_local_filled_in_parallel(rows, cols):
    """Each thread fills its whole rows x cols local array in a T.Parallel loop (the loop
    runs whole in every thread and is unrolled): the generator's shape, within the limit."""

    @T.prim_func
    def fill_local(X: T.Tensor((rows, cols), "float32"), Y: T.Tensor((rows, cols), "float32")):
        with T.Kernel(1, threads=128) as bx:
            acc = T.alloc_local((rows, cols), "float32")
            for i, j in T.Parallel(rows, cols):
                acc[i, j] = X[i, j] * 2.0
            for i, j in T.Parallel(rows, cols):
                Y[i, j] = acc[i, j]

    return fill_local


def test_the_largest_local_array_compiles_quickly(uncached):
    start = time.monotonic()
    kernel = tegula.compile(a_whole_local_filled_in_parallel(3, 85), out_idx=[1], target="sm_90a")
    assert kernel.cubin()[:4] == b"\x7fELF"
    assert time.monotonic() - start < 10
    x = torch.randn(3, 85)
    torch.testing.assert_close(tt.simulate(kernel, x), x * 2)


def unrolled_index_program():
    @T.prim_func
    def shifted(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1) as bx:
            loc = T.alloc_local((8,), "float32")
            y = T.alloc_fragment((8,), "float32")
            for t in T.unroll(8):
                loc[t] = X[t]
            for j in T.Parallel(8):
                y[j] = loc[j + 1]  # MARK-shifted
            T.copy(y, Y)

    return shifted


def test_a_constant_index_past_a_local_array_is_an_error_at_its_line():
    # One thread holds all of y, so the partitioned loop reads loc[1] .. loc[8].
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(unrolled_index_program(), target="sm_90a")
    err = info.value
    assert err.line == mark_line(unrolled_index_program, "shifted"), str(err)
    assert "index 8 is out of bounds for dimension 0 of local buffer 'loc' of shape (8)" in err.message, err.message
