"""docs/porting.md holds: TileLang spellings it promises work, and each difference it lists
gives the error the page shows, at the DSL line."""
import re

import pytest

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402


def _error_text(build) -> str:
    """The message of the TegulaCompileError `build()` raises ("" when it raises none)."""
    try:
        build()
    except tegula.TegulaCompileError as err:
        return str(err)
    return ""


def test_explicit_hopper_primitives_are_not_in_the_language():
    def build():
        @T.prim_func
        def f(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                b = T.alloc_barrier(1)  # noqa: F841
    assert re.search(r"no attribute 'alloc_barrier'", _error_text(build))


def test_registers_a_on_a_two_by_two_warpgroup_split():
    """TileLang's Square split of four warpgroups (2 x 2) with A in registers: each column
    of warpgroups holds A; simulated thread by thread against torch."""
    import torch
    from tegula.testing import simulate

    @tegula.jit(out_idx=[-1], target="sm_90a")
    def g():
        @T.prim_func
        def f(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 256), "float16"),
              C: T.Tensor((128, 256), "float32")):
            with T.Kernel(1, threads=512) as bx:
                a = T.alloc_shared((128, 64), "float16")
                b = T.alloc_shared((64, 256), "float16")
                p = T.alloc_fragment((128, 64), "float16")
                c = T.alloc_fragment((128, 256), "float32")
                T.copy(A, a)
                T.copy(B, b)
                T.copy(a, p)
                T.gemm(p, b, c, clear_accum=True)
                T.copy(c, C)
        return f

    k = g()
    assert "wgmma_rs<128, 256, 64, 2, 2" in k.get_kernel_source()
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(128, 64, generator=gen).half(), torch.randn(64, 256, generator=gen).half()
    torch.testing.assert_close(simulate(k, a, b).double(), a.double() @ b.double(), rtol=1e-3, atol=1e-3)


def test_workspace_inside_a_kernel():
    def build():
        @T.prim_func
        def f(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                D = T.alloc_global((4,), "float32")
                D[0] = A[0]
    assert re.search(r"T.alloc_global declares a workspace of the whole prim_func", _error_text(build))


def test_buffers_do_not_cross_kernels():
    def build():
        @T.prim_func
        def f(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((32,), "float32")
                T.copy(A, s)
            with T.Kernel(1, threads=32) as bx:
                T.copy(s, A)
    err = _error_text(build)
    assert re.search(r"name 's' is not defined in the kernel", err)
    assert "T.copy(s, A)" in err


def test_kernels_do_not_nest():
    def build():
        @T.prim_func
        def f(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                with T.Kernel(1, threads=32) as by:
                    A[0] = 1.0
    assert re.search(r"cannot nest", _error_text(build))


def test_autotune_takes_the_eager_form():
    # As TileLang; tuning and running it: tests/python/cpu/test_tilelang_api.py.
    @tegula.autotune(configs=[dict(block=64)])
    @tegula.jit
    def add(A, block: int = 64):
        N = T.const("N")
        A: T.Tensor((N,), "float32")
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                A[bx * block + i] = A[bx * block + i] + 1

    assert add._eager and add.compile(N=256, block=64).config == {"block": 64}


def test_tensor_subscript_form_in_a_signature():
    import torch
    from tegula.testing import reference

    @tegula.jit(out_idx=[-1], target="sm_90a")
    def add(N):
        @T.prim_func
        def k(A: T.Tensor[(N,), "float32"], B: T.Tensor[[N], T.float32], C: T.Tensor[N, "float32"]):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(N):
                    C[i] = A[i] + B[i]
        return k

    a, b = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(reference(add(64), a, b), a + b)
    assert T.Tensor[(4, 8)].shape == (4, 8) and str(T.Tensor[(4, 8), "float16"].dtype) == "float16"


def test_a_shared_layout_object_and_python_while_loops_are_refused_at_their_line():
    def layout():
        @T.prim_func
        def f(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                s = T.alloc_shared((64,), "float32")
                T.annotate_layout({s: T.Layout((64,), lambda i: i)})
    assert re.search(r"a T.Layout places the elements of a global tensor; 's' is in shared memory",
                     _error_text(layout))

    def loop():
        @T.prim_func
        def f(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                for i in T.Parallel(64):
                    while A[i] > 0:
                        A[i] = A[i] - 1
    assert re.search(r"a while loop inside a T.Parallel loop is not supported", _error_text(loop))


def test_a_fragment_indexed_by_a_serial_variable_in_a_parallel_loop():
    import torch
    from tegula.testing import reference, simulate

    @T.prim_func
    def f(A: T.Tensor((4, 128), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            lse = T.alloc_fragment((4, 128), "float32")
            acc = T.alloc_fragment((128,), "float32")
            T.clear(acc)
            for k in T.serial(4):
                for j in T.Parallel(128):
                    lse[k, j] = A[k, j]
            for k in T.serial(4):
                for j in T.Parallel(128):
                    acc[j] += lse[k, j]
            T.copy(acc, B)

    kernel = tegula.compile(f, out_idx=[1], target="sm_90a")
    a = torch.randn(4, 128)
    for run in (reference, simulate):
        torch.testing.assert_close(run(kernel, a), a.sum(0))
