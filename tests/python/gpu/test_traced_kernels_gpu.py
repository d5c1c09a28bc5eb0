"""A kernel a user just wrote, called inside torch.compile, on the GPU: the compiled
function (inductor, mode="reduce-overhead", dynamic=True) equals the eager one bitwise for
kernels with out_idx, kernels writing their arguments and eager @jit functions, with no
graph break; torch.export's program runs; torch.library.opcheck passes on the operators
made for the kernels; and the eager call still launches through the launcher itself.
Inputs are fresh random values on ragged sizes, outputs poisoned with NaN where the kernel
writes an argument. The tracing itself is covered on the CPU (test_traced_kernels.py)."""
import importlib

import pytest
import torch

import tegula
import tegula.language as T

traced = importlib.import_module("tegula.traced")

try:
    from ._util import seed_of
except ImportError:
    from _util import seed_of

pytestmark = pytest.mark.gpu
F32 = torch.float32


def _rand(*shape, tag, dtype=F32):
    gen = torch.Generator(device="cuda").manual_seed(seed_of("traced", tag, shape))
    return torch.randn(shape, generator=gen, device="cuda").to(dtype)


@tegula.jit(out_idx=[-1])
def _scale(N, block=128):
    @T.prim_func
    def scale(X: T.Tensor((N,), "float32"), s: T.float32, Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = T.exp(X[bx * block + i]) * s

    return scale


@tegula.jit
def _add_into(N, block=128):
    @T.prim_func
    def add_into(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = Y[bx * block + i] * 0.5 + X[bx * block + i]

    return add_into


@tegula.jit(out_idx=[1, 2])
def _rows(block=64):
    M = T.dynamic("M")

    @T.prim_func
    def rows(X: T.Tensor((M, 96), "float16"), Y: T.Tensor((M, 96), "float16"), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=block) as bx:
            acc = T.alloc_fragment((96,), "float32")
            total = T.alloc_fragment((1,), "float32")
            for j in T.Parallel(96):
                acc[j] = T.cast(X[bx, j], "float32")
                Y[bx, j] = T.cast(acc[j] * 2.0, "float16")
            T.reduce_sum(acc, total, dim=0)
            S[bx] = total[0]

    return rows


@tegula.jit
def _eager_sigmoid(X, block=128):
    N = T.dynamic("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = 1.0 / (1.0 + T.exp(-X[bx * block + i]))
    return Y


def _no_breaks(fn, *args):
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize("n", [1000, 4096])
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compiled_equals_eager_bitwise(n, mode):
    scale, add_into = _scale(n), _add_into(n)

    def f(x, y):
        add_into(x, y)              # writes y: the operator declares it mutated
        return scale(y, 1.5) + 1.0, y * 2

    x, y0 = _rand(n, tag="x"), _rand(n, tag="y")
    y_eager = y0.clone()
    want = f(x, y_eager)
    _no_breaks(f, x, y0.clone())
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, mode=mode)
    for _ in range(3):  # CUDA graphs record on a later call
        y = y0.clone()
        got = compiled(x, y)
        assert torch.equal(y, y_eager), "the in-place kernel's write differs from eager"
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    ref = torch.exp(y_eager.double()) * 1.5 + 1.0
    assert torch.allclose(want[0].double(), ref, rtol=1e-5, atol=1e-5)


def test_dynamic_sizes_compile_once_and_match():
    rows = _rows()

    def f(h):
        y, s = rows(h)
        return y.float() + s[:, None]

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._inductor.compile(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend, fullgraph=True, dynamic=True)
    for m in (7, 130, 1025):
        h = _rand(m, 96, tag="h", dtype=torch.float16)
        got, want = compiled(h), f(h)
        assert torch.equal(got, want)
        ref = h.double() * 2 + h.double().sum(1, keepdim=True)
        assert torch.allclose(got.double(), ref, rtol=2e-3, atol=2e-2)
    assert len(graphs) == 1


def test_eager_function_inside_torch_compile():
    f = lambda x: _eager_sigmoid(x) * 3  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    for n in (100, 3000, 4099):
        x = _rand(n, tag="e")
        x[: n // 10] = torch.tensor([float("inf"), float("-inf")], device="cuda").repeat(n // 20 + 1)[: n // 10]
        got, want = compiled(x), f(x)
        assert torch.equal(got, want)
        assert torch.allclose(got.double(), torch.sigmoid(x.double()) * 3, rtol=1e-5, atol=1e-6)


def test_export_runs_the_kernels():
    scale, add_into = _scale(777), _add_into(777)

    class M(torch.nn.Module):
        def forward(self, x, y):
            add_into(x, y)
            return scale(y, -2.0)

    x, y0 = _rand(777, tag="ex"), _rand(777, tag="ey")
    exported = torch.export.export(M(), (x, y0.clone()))
    y_eager, y_exported = y0.clone(), y0.clone()
    assert torch.equal(exported.module()(x, y_exported), M()(x, y_eager))
    assert torch.equal(y_exported, y_eager)


def test_opcheck_on_the_kernels_operators():
    n = 513
    x, y = _rand(n, tag="ox"), _rand(n, tag="oy")
    h = _rand(33, 96, tag="oh", dtype=torch.float16)
    cases = [(_scale(n), (x, 0.75)), (_add_into(n), (x, y)), (_rows(), (h,))]
    for kernel, args in cases:
        result = torch.library.opcheck(traced.operator_for(kernel), args,
                                       test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
        assert all(v == "SUCCESS" for v in result.values()), (kernel, result)


def test_the_eager_call_still_launches_directly():
    """Outside a trace the call is the launcher's: no operator is made."""
    kernel = _scale(2048, block=256)
    x = _rand(2048, tag="d")
    before = set(traced._OPS)
    out = kernel(x, 2.0)
    assert torch.allclose(out, torch.exp(x) * 2.0, rtol=1e-6, atol=1e-6)
    assert set(traced._OPS) == before
    assert type(kernel._call).__name__ == "Launcher"
