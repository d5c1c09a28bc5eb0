"""A kernel a user just wrote, met by torch's tracers, on the CPU: under FakeTensorMode,
make_fx, torch.export and torch.compile's Dynamo a JITKernel call (and an eager @jit
function's) becomes a call of the kernel's own torch.library operator, with no graph
break; its schema declares what the kernel writes; its fake implementation checks the
inputs as the launcher would and keeps T.dynamic sizes symbolic. The kernels are compiled
for sm_90a with no GPU here, so every call below runs the fake implementation; the GPU
tier (test_traced_kernels_gpu.py) compares compiled with eager results."""
import importlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import tegula
import tegula.language as T
from tegula import env

traced = importlib.import_module("tegula.traced")
F32 = torch.float32


@tegula.jit(out_idx=[-1], target="sm_90a")
def _scale(N, block=128):
    @T.prim_func
    def scale(X: T.Tensor((N,), "float32"), s: T.float32, Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = X[bx * block + i] * s

    return scale


@tegula.jit(target="sm_90a")
def _add_into(N, block=128):
    @T.prim_func
    def add_into(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Y[bx * block + i] = Y[bx * block + i] + X[bx * block + i]

    return add_into


@tegula.jit(out_idx=[1, 2], target="sm_90a")
def _rows(block=64):
    M = T.dynamic("M")

    @T.prim_func
    def rows(X: T.Tensor((M, 64), "float16"), Y: T.Tensor((M, 64), "float16"), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=block) as bx:
            for j in T.Parallel(64):
                Y[bx, j] = X[bx, j]
            S[bx] = 0.0

    return rows


@tegula.jit(target="sm_90a")
def _atomic_sum(N):
    @T.prim_func
    def atomic_sum(X: T.Tensor((N,), "float32"), Total: T.Tensor((1,), "float32"), Count: T.Tensor((1,), "int32")):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < N:
                    T.atomic_add(Total[0], X[bx * 128 + i])

    return atomic_sum


@tegula.jit(target="sm_90a")
def _atomic_rows(N):
    @T.prim_func
    def atomic_rows(X: T.Tensor((N, 64), "float32"), Acc: T.Tensor((64,), "float32")):
        with T.Kernel(N, threads=64) as bx:
            T.annotate_safe_value({X: 0.0})
            T.atomic_add(Acc[0:64], X[bx, 0:64])  # a region: Acc written, X only read

    return atomic_rows


@tegula.jit(target="sm_90a")
def _through_view(N):
    @T.prim_func
    def through_view(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Y2 = T.reshape(Y, (N // 2, 2))
            for i, j in T.Parallel(N // 2, 2):
                Y2[i, j] = X[i * 2 + j]

    return through_view


@tegula.jit(target="sm_90a")
def _eager_double(X, block=128):
    N = T.const("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * 2.0
    return Y


@tegula.jit(target="sm_90a")
def _eager_double_dynamic(X, block=128):
    N = T.dynamic("N")
    X: T.Tensor((N,), "float32")
    Y = T.empty((N,), "float32")
    with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < N:
                Y[bx * block + i] = X[bx * block + i] * 2.0
    return Y


def _ops_in(gm) -> list:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "tegula_kernels" in str(n.target)]


def _graphs(fn, *args, dynamic=None):
    """The graphs torch.compile(fn, fullgraph=True) makes over calls with each argument tuple."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, fullgraph=True, dynamic=dynamic)
    outs = [compiled(*a) for a in args]
    return graphs, outs


# ---- the operator ----
def test_schema_declares_inputs_scalars_writes_and_outputs():
    scale, add_into, rows = _scale(1000), _add_into(1000), _rows()
    assert str(traced.operator_for(scale)._opoverload._schema).endswith("(Tensor X, float s) -> Tensor")
    assert str(traced.operator_for(add_into)._opoverload._schema).endswith("(Tensor X, Tensor(a!) Y) -> ()")
    assert str(traced.operator_for(rows)._opoverload._schema).endswith("(Tensor X) -> (Tensor, Tensor)")
    assert traced.operator_for(scale) is traced.operator_for(scale)  # made once per kernel
    assert traced.operator_for(scale)._name != traced.operator_for(_scale(1000, block=64))._name


def test_written_parameters_follow_stores_atomics_and_views():
    def written(kernel):
        return sorted({kernel.prim_func.params[i].name for low in kernel._lowered_all for i in low.written_params})

    assert written(_scale(256)) == ["Y"]
    assert written(_add_into(256)) == ["Y"]
    assert written(_atomic_sum(256)) == ["Total"]  # Count is never written: not declared
    assert written(_through_view(256)) == ["Y"]  # a store through T.reshape writes its base
    assert written(_atomic_rows(16)) == ["Acc"]  # the region form's destination; an annotation writes nothing
    schema = str(traced.operator_for(_atomic_sum(256))._opoverload._schema)
    assert "Tensor(a!) Total" in schema and "Tensor Count" in schema


def test_a_call_under_fake_tensor_mode_runs_the_fake():
    scale, add_into, rows = _scale(1000), _add_into(1000), _rows()
    with FakeTensorMode():
        x = torch.empty(1000, device="cuda")
        y = scale(x, 2.0)
        assert y.shape == (1000,) and y.dtype == F32 and y.device.type == "cuda"
        assert add_into(x, torch.empty(1000, device="cuda")) is None
        out = rows(torch.empty(77, 64, device="cuda", dtype=torch.float16))
        assert isinstance(out, list) and [t.shape for t in out] == [(77, 64), (77,)]
        assert [t.dtype for t in out] == [torch.float16, F32]
        # The launcher's checks, at the argument they concern:
        with pytest.raises(ValueError, match="argument 'X' dimension 0 must be 1000, got 999"):
            scale(torch.empty(999, device="cuda"), 2.0)
        with pytest.raises(ValueError, match="argument 'X' must have dtype float32"):
            scale(torch.empty(1000, device="cuda", dtype=torch.float16), 2.0)
        with pytest.raises(ValueError, match=r"expected 2 argument\(s\) \(X, s\), got 1"):
            scale(x)
        with pytest.raises(ValueError, match="argument 'X' must have 2 dimensions"):
            rows(torch.empty(64, device="cuda", dtype=torch.float16))


def test_meta_tensors_run_the_fake():
    y = _scale(1000)(torch.empty(1000, device="meta"), 2.0)
    assert y.device.type == "meta" and y.shape == (1000,)


def test_the_launcher_hands_tracer_tensors_on_and_never_launches_them():
    # Built for sm_80 without a GPU: the launcher's checks run, nothing is launched.
    program = tegula.compile(_scale.fn(1000), out_idx=[-1], target="sm_80")._build()
    seen = []
    with FakeTensorMode():
        x = torch.empty(1000, device="cuda")
        assert env.native().needs_tracing(x)
        assert program.launcher_with(lambda *a: seen.append(a) or "traced")(x, 2.0) == "traced"
        assert seen and seen[0][0] is x
        with pytest.raises(ValueError, match="traced or fake tensor"):
            program.launcher(x, 2.0)  # the operator's own launch: no detour, an error
        with pytest.raises(ValueError, match="traced or fake tensor"):
            program.launch([x, 2.0, x], 0)
    assert not env.native().needs_tracing(torch.empty(3), 1.0, "s")
    assert env.native().needs_tracing(torch.empty(3, device="meta"))


def test_make_fx_and_export_record_the_operator():
    scale, add_into = _scale(1000), _add_into(1000)

    def f(x, y):
        add_into(x, y)
        return scale(y, 3.0)

    with FakeTensorMode():
        x, y = torch.empty(1000, device="cuda"), torch.empty(1000, device="cuda")
        names = _ops_in(make_fx(f)(x, y))
        assert names == [f"{traced.operator_for(add_into)._opoverload}", f"{traced.operator_for(scale)._opoverload}"]

        class M(torch.nn.Module):
            def forward(self, x, y):
                return f(x, y)

        exported = torch.export.export(M(), (x, y))
        assert len(_ops_in(exported.graph_module)) == 2


def test_dynamo_traces_a_raw_kernel_without_a_graph_break():
    scale, add_into, rows = _scale(1000), _add_into(1000), _rows()

    def f(x, y, h):
        add_into(x, y)
        a, s = rows(h)
        return scale(y, 0.5) * 2 + s.sum() + a.float().mean()

    with FakeTensorMode():
        args = (torch.empty(1000, device="cuda"), torch.empty(1000, device="cuda"),
                torch.empty(9, 64, device="cuda", dtype=torch.float16))
        explained = torch._dynamo.explain(f)(*args)
        assert explained.graph_break_count == 0 and explained.graph_count == 1
        assert len(_ops_in(explained.graphs[0])) == 3
        graphs, outs = _graphs(f, args)
        assert len(graphs) == 1 and outs[0].shape == (1000,)


def test_dynamic_sizes_stay_symbolic_under_dynamic_true():
    rows, scale = _rows(), _scale(1000)
    with FakeTensorMode():
        sizes = [torch.empty(n, 64, device="cuda", dtype=torch.float16) for n in (5, 70, 300)]
        graphs, outs = _graphs(lambda h: rows(h)[1] + 1, *[(h,) for h in sizes], dynamic=True)
        assert len(graphs) == 1 and [o.shape[0] for o in outs] == [5, 70, 300]
        # A fixed size is checked at trace time (the symbolic size is guarded equal).
        graphs, outs = _graphs(lambda x: scale(x, 2.0), (torch.empty(1000, device="cuda"),), dynamic=True)
        assert outs[0].shape == (1000,)
        with pytest.raises(Exception, match="dimension 0 must be 1000"):
            _graphs(lambda x: scale(x, 2.0), (torch.empty(500, device="cuda"),), dynamic=True)
    with FakeTensorMode(shape_env=ShapeEnv()):
        h = torch.empty(33, 64, device="cuda", dtype=torch.float16)
        gm = make_fx(lambda h: rows(h), tracing_mode="symbolic")(h)
        assert len(_ops_in(gm)) == 1


def test_eager_functions_trace_through_their_kernels_operator():
    with FakeTensorMode():
        xs = [torch.empty(n, device="cuda") for n in (100, 200, 300)]
        for fn, graphs_wanted in ((_eager_double, 3), (_eager_double_dynamic, 2)):
            graphs, outs = _graphs(lambda x, fn=fn: fn(x, block=64) + 1, *[(x,) for x in xs])
            assert [o.shape[0] for o in outs] == [100, 200, 300]
            # A T.const size: a graph per size; a T.dynamic one: symbolic after the first.
            assert len(graphs) == graphs_wanted
            assert all(len(_ops_in(g)) == 1 for g in graphs)
        # A call made eagerly first (the generated dispatcher's path) traces too.
        assert _eager_double(xs[0]).shape == (100,)
        explained = torch._dynamo.explain(lambda x: _eager_double(x) * 3)(xs[0])
        assert explained.graph_break_count == 0 and len(_ops_in(explained.graphs[0])) == 1


def test_a_kernel_call_reads_the_instance_launcher():
    kernel = _scale(64)
    assert callable(type(kernel).__call__) and type(kernel).__call__.__name__ == "__call__"
    kernel._call = lambda *args: ("launched", args)  # what the build installs
    assert kernel(1, 2) == ("launched", (1, 2))
    assert type(kernel).__call__(kernel, 3) == ("launched", (3,))


def test_what_cannot_be_traced_is_refused_by_name():
    @tegula.jit(target="sm_90a")
    def through_pointer(N):
        @T.prim_func
        def main(p: T.ptr, Y: T.Tensor((N,), "float32")):
            X = T.make_tensor(p, (N,), "float32")
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(N):
                    Y[i] = X[i]

        return main

    with pytest.raises(TypeError, match="parameter 'p' is a T.ptr"):
        traced.operator_for(through_pointer(128))
    with pytest.raises(ValueError, match=r"writes its input\(s\) 'Y'"):
        tegula.custom_op(_with_output_writing_input(), "tegula_test_traced::writes")


def _with_output_writing_input():
    @tegula.jit(out_idx=[-1], target="sm_90a")
    def writes(N):
        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), Z: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(N):
                    Y[i] = X[i]
                    Z[i] = X[i]

        return main

    return writes(128)
