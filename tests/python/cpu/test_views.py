"""Views (T.reshape, T.view, T.Tensor(shape, dtype, buf.data)) and T.im2col on the CPU:
the reference and the simulator agree with torch on every program of view_programs.py
(views of global tensors, shared memory, fragments and gemm accumulators, reductions
over a view, TileLang's implicit-GEMM convolution, ragged and aligned); past the edge of
a view of a global tensor nothing is read or written; no view survives the passes; and
what a view cannot be is an error at the user's line."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import view_programs as vp  # noqa: E402

CASES = [
    ("global_reshape", (1024, 32)),
    ("swizzled_shared_reshape", (1024, 32, "float32")),
    ("swizzled_shared_reshape", (2048, 64, "float16")),
    ("swizzled_shared_reshape", (96, 12, "float32")),  # 48-byte rows: not swizzled
    ("shared_1d_to_2d", (1024, 32)),
    ("fragment_2d_to_1d", (256, 16)),
    ("view_writes_through", (100, 8)),   # ragged: 100 rows in blocks of 64
    ("view_writes_through", (128, 8)),
    ("flattened_parameter", (9, 24)),
    ("reduce_over_view", (2, 3, 128)),
    ("reduce_over_view", (8, 4, 32)),
    ("gemm_result_through_view", (64, 16, 32, 4)),
    ("indexer_logits", (64, 4, 16, 32)),
    ("indexer_logits", (128, 2, 32, 64)),
]


def _inputs(kernel, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn([int(d) for d in p.shape], generator=g).to(getattr(torch, p.dtype_name))
            for p in kernel.params[:n]]


def _poisoned(param):
    return torch.full([int(d) for d in param.shape], float("nan"), dtype=getattr(torch, param.dtype_name))


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{a}" for n, a in CASES])
def test_views_agree_with_torch(run, name, args):
    prog, ref = getattr(vp, name)(*args)
    k = tegula.compile(prog, target="sm_90a")
    n_in = len(k.params) - 1
    xs = _inputs(k, n_in, seed=len(name) + sum(a for a in args if isinstance(a, int)))
    out = _poisoned(k.params[-1])
    run(k, *xs, out)
    torch.testing.assert_close(out.double(), ref(*xs).double(), rtol=2e-3, atol=2e-3)


CONVS = [(2, 16, 9, 7, 24, 3, 1, 1, 1), (1, 8, 8, 8, 16, 3, 2, 2, 0), (1, 32, 6, 6, 64, 1, 1, 1, 0)]


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("shape", CONVS, ids=[str(c) for c in CONVS])
def test_im2col_convolution_agrees_with_torch(run, shape):
    prog, ref = vp.convolution(*shape, block_M=32, block_N=32, block_K=32)
    k = tegula.compile(prog, target="sm_90a")
    x, w = _inputs(k, 2, seed=sum(shape))
    out = _poisoned(k.params[2])
    run(k, x, w, out)
    torch.testing.assert_close(out.double(), ref(x, w), rtol=2e-2, atol=2e-2)


def test_no_view_is_left_after_resolve_views():
    prog, _ = vp.convolution(2, 16, 9, 7, 24, 3, 1, 1, 1)
    k = tegula.compile(prog, target="sm_90a")
    assert "view kernel_view" in k.get_ir("expand_tile_ops")
    assert "_view" not in k.get_ir("resolve_views")


def test_a_view_row_past_the_tensor_edge_is_masked_not_wrapped():
    # A (4, 24) view written in blocks of 32 columns: columns 24.. of a row must not land in
    # the next row of the tensor.
    @T.prim_func
    def main(X: T.Tensor((4, 24), "float32"), Y: T.Tensor((96,), "float32")):
        with T.Kernel(1, threads=128):
            f = T.alloc_fragment((4, 32), "float32")
            for i, j in T.Parallel(4, 32):
                f[i, j] = T.if_then_else(j < 24, X[i, T.min(j, 23)], -1.0)
            T.copy(f, T.reshape(Y, [4, 24])[0, 0])

    k = tegula.compile(main, target="sm_90a")
    x = torch.randn(4, 24)
    for run in (tt.reference, tt.simulate):
        y = torch.zeros(96)
        run(k, x, y)
        assert torch.equal(y, x.reshape(96))


def _compile_error(fn):
    with pytest.raises(Exception) as info:
        tegula.compile(fn(), target="sm_90a")
    return str(info.value)


def test_a_view_of_another_size_is_an_error_at_the_line():
    def prog():
        @T.prim_func
        def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((32, 33), "float32")):
            with T.Kernel(1):
                T.copy(T.reshape(A, [32, 33]), B)
        return main

    msg = _compile_error(prog)
    assert "T.reshape" in msg and "as many elements" in msg and "test_views.py" in msg


WIDER = [(16, 64), (32, 40), (8, 32, "float16", "float64"), (16, 64, "int8", "int32"), (12, 24, "float16", "int32")]


def _filled(shape, dtype, g):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-100, 100, shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("args", WIDER, ids=[str(a) for a in WIDER])
def test_a_view_of_another_dtype_reads_and_writes_the_bytes(run, args):
    # T.view(shared, dtype=wider): the bytes of A as the wider type, bit for bit (NaN
    # patterns of the narrow type included), and values written through the view read
    # back through it.
    prog, ref = vp.shared_view_as_wider(*args)
    k = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(sum(args[:2]))
    dt, wide = (getattr(torch, p.dtype_name) for p in k.params[:2])
    A, B = _filled(tuple(k.params[0].shape), dt, g), _filled(tuple(k.params[1].shape), wide, g)
    bits, out = (torch.zeros(tuple(p.shape), dtype=wide) for p in k.params[2:])
    run(k, A, B, bits, out)
    want_bits, want_out = ref(A, B)
    assert torch.equal(bits.view(torch.uint8), want_bits.view(torch.uint8))
    assert torch.equal(out, want_out)


@pytest.mark.parametrize("n", [100, 128])
def test_a_global_view_of_another_dtype_is_masked_at_its_edge(n):
    prog, ref = vp.global_view_as_wider(n)
    k = tegula.compile(prog, target="sm_80")
    A = torch.randn(2 * n).bfloat16()
    for run in (tt.reference, tt.simulate):
        out = torch.zeros(n)
        run(k, A, out)
        assert torch.equal(out.view(torch.int32), ref(A).view(torch.int32))
    assert "load_global_32" in k.get_kernel_source() and len(k.cubin()) > 0


def test_a_shared_view_of_another_dtype_compiles_to_one_access_per_element():
    prog, _ = vp.shared_view_as_wider(16, 64)
    k = tegula.compile(prog, target="sm_90a")
    src = k.get_kernel_source()
    assert "store_shared_32(" in src and "tegula::reinterpret<float>(load_shared_32(" in src
    assert len(k.cubin()) > 0


@pytest.mark.parametrize("dtype,shape,scope,match", [
    ("float16", [64], "shared", "4 or 8 bytes"),          # narrower than the buffer's
    ("int32", [10], "shared", "as many bytes"),
    ("float64", [16, 4], "fragment", "shared or global"),
])
def test_a_view_of_another_dtype_it_cannot_be_is_refused_naming_it(dtype, shape, scope, match):
    def prog():
        @T.prim_func
        def main(A: T.Tensor((16, 8), "float32"), B: T.Tensor((16, 8), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((16, 8), "float32") if scope == "shared" else T.alloc_fragment((16, 8), "float32")
                T.copy(A, s)
                v = T.view(s, shape=shape, dtype=dtype)
                B[0, 0] = v[0] if len(shape) == 1 else v[0, 0]
        return main

    msg = _compile_error(prog)
    assert "T.view" in msg and match in msg and "dtype" in msg


def test_im2col_checks_its_arguments():
    def prog():
        @T.prim_func
        def main(A: T.Tensor((1, 8, 8, 16), "float16"), B: T.Tensor((64, 32), "float16")):
            with T.Kernel(1):
                s = T.alloc_shared((64, 32), "float16")
                T.im2col(A, s, 0, 0, 3, 0, 1, 1)
                T.copy(s, B)
        return main

    msg = _compile_error(prog)
    assert "stride" in msg and ">= 1" in msg
