"""The shipped kernels as torch.library operators, on the CPU: every entry point is an op
in torch.ops.tegula; each traces under FakeTensorMode with CUDA fake tensors (forward, and
the registered backward formula), runs the autograd engine on meta tensors, and compiles
with torch.compile(fullgraph=True) with no graph break. A user's kernel becomes an op in
one line (tegula.custom_op). The numbers are the GPU tier's (test_torch_ops_gpu.py)."""
import importlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tegula
import tegula.kernels as K
import tegula.language as T

ops = importlib.import_module("tegula.kernels._ops")
FA = importlib.import_module("tegula.kernels.flash_attention")
MLA = importlib.import_module("tegula.kernels.mla_decode")

FORWARD = {"rms_norm", "rms_norm_silu", "layer_norm", "softmax", "add", "row_sum", "row_max", "row_min",
           "transpose", "matmul", "matmul_tuned", "flash_attention", "flash_decode", "mla_decode"}
BACKWARD_HALVES = {"rms_norm_backward", "layer_norm_backward", "softmax_backward", "matmul_backward",
                   "flash_attention_backward", "column_sum"}
DIFFERENTIABLE = {"rms_norm", "rms_norm_silu", "layer_norm", "softmax", "add", "row_sum", "transpose", "matmul",
                  "flash_attention"}

H = torch.float16


def _inputs(device, requires_grad=False):
    """(public function, its tensor arguments, expected output shapes) per forward op, at
    ragged sizes."""
    def t(*shape, dtype=H):
        return torch.empty(shape, dtype=dtype, device=device).requires_grad_(requires_grad and dtype.is_floating_point)

    def lens(b):
        return torch.empty((b,), dtype=torch.int32, device=device)

    x = (3, 5, 72)
    attention = lambda q, k, v: FA.flash_attention(q, k, v, causal=True, return_lse=True)  # noqa: E731
    return {
        "rms_norm": (lambda x, w: K.rms_norm(x, w, 1e-6), (t(*x), t(72)), [x]),
        "rms_norm_silu": (K.rms_norm_silu, (t(*x), t(72)), [x]),
        "layer_norm": (K.layer_norm, (t(*x), t(72), t(72)), [x]),
        "softmax": (K.softmax, (t(*x),), [x]),
        "add": (K.add, (t(*x), t(72)), [x]),
        "row_sum": (K.row_sum, (t(*x),), [(3, 5)]),
        "row_max": (K.row_max, (t(3, 72),), [(3,)]),
        "row_min": (K.row_min, (t(3, 72),), [(3,)]),
        "transpose": (K.transpose, (t(40, 24),), [(24, 40)]),
        "matmul": (lambda a, b, c: K.matmul(a, b, c, "relu"), (t(40, 24), t(24, 56), t(56)), [(40, 56)]),
        "matmul_tuned": (K.matmul_tuned, (t(40, 24), t(24, 56)), [(40, 56)]),
        "flash_attention": (attention, (t(2, 33, 4, 64), t(2, 47, 2, 64), t(2, 47, 2, 64)),
                            [(2, 33, 4, 64), (2, 4, 33)]),
        "flash_decode": (K.flash_decode, (t(2, 8, 64), t(2, 40, 2, 64), t(2, 40, 2, 64), lens(2)), [(2, 8, 64)]),
        "mla_decode": (lambda q, kv, n: MLA.mla_decode(q, kv, n, return_lse=True), (t(2, 16, 576), t(2, 64, 576),
                                                                                   lens(2)), [(2, 16, 512), (2, 16)]),
    }


def test_every_entry_point_is_an_op():
    registered = {name for name in dir(torch.ops.tegula) if isinstance(getattr(torch.ops.tegula, name),
                                                                       torch._ops.OpOverloadPacket)}
    assert registered == FORWARD | BACKWARD_HALVES
    assert set(ops.FORWARD_OPS) == FORWARD
    assert ops.DIFFERENTIABLE == DIFFERENTIABLE
    # The public functions, in the package and in each kernel module, are the op callers.
    for module, names in ops._PUBLIC.items():
        for name in names:
            assert getattr(module, name) is getattr(ops, name), f"{module.__name__}.{name} does not call the op"
            if hasattr(K, name) and not isinstance(getattr(K, name), type(ops)):
                assert getattr(K, name) is getattr(ops, name)
    assert {n for names in ops._PUBLIC.values() for n in names} == FORWARD


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_forward_traces_with_cuda_fake_tensors(name):
    with FakeTensorMode():
        fn, args, shapes = _inputs("cuda")[name]
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        assert [tuple(o.shape) for o in outs] == [tuple(s) for s in shapes]
        assert all(o.device.type == "cuda" for o in outs)


class _Ctx:
    """What an autograd formula reads of its context."""

    def __init__(self, needs):
        self.needs_input_grad = needs

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _op_inputs(name, device):
    def t(*shape, dtype=H):
        return torch.empty(shape, dtype=dtype, device=device)

    return {
        "rms_norm": (t(3, 5, 72), t(72), 1e-6),
        "rms_norm_silu": (t(3, 5, 72), t(72), 1e-6),
        "layer_norm": (t(3, 72), t(72), t(72), 1e-5),
        "softmax": (t(3, 72),),
        "add": (t(3, 72), t(72)),
        "row_sum": (t(3, 5, 72),),
        "transpose": (t(40, 24),),
        "matmul": (t(40, 24), t(24, 56), t(56), "gelu"),
        "flash_attention": (t(2, 33, 4, 64), t(2, 47, 2, 64), t(2, 47, 2, 64), True, 16, "bshd", None),
    }[name]


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_backward_formula_traces_with_cuda_fake_tensors(name):
    backward, setup = ops.AUTOGRAD[name]
    with FakeTensorMode():
        inputs = _op_inputs(name, "cuda")
        output = getattr(torch.ops.tegula, name)(*inputs)
        ctx = _Ctx(tuple(isinstance(i, torch.Tensor) for i in inputs))
        setup(ctx, inputs, output)
        outs = output if isinstance(output, tuple) else (output,)
        grads = backward(ctx, *(torch.empty_like(o) for o in outs))
        grads = grads if isinstance(grads, tuple) else (grads,)
        assert len(grads) == len(inputs)
        for given, grad in zip(inputs, grads):
            if isinstance(given, torch.Tensor):
                assert grad is not None and tuple(grad.shape) == tuple(given.shape), name
                assert grad.dtype == given.dtype and grad.device.type == "cuda"
            else:
                assert grad is None


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_autograd_engine_runs_on_meta_tensors(name):
    fn, args, _ = _inputs("meta", requires_grad=True)[name]
    out = fn(*args)
    out = out[0] if isinstance(out, tuple) else out
    leaves = [t for t in args if t.requires_grad]
    grads = torch.autograd.grad(out.float().sum(), leaves, allow_unused=True)
    assert any(g is not None for g in grads)
    for leaf, grad in zip(leaves, grads):
        if grad is not None:
            assert grad.shape == leaf.shape and grad.dtype == leaf.dtype


def _layer(x, w, q, k, v, a, b):
    h = K.rms_norm(x, w)
    h = K.add(h, K.softmax(h))
    att = FA.flash_attention(q, k, v, causal=True)
    m = K.matmul(h.reshape(-1, h.shape[-1]), a, None, "gelu")
    return K.matmul(m, b).float().sum() + att.float().sum() + K.layer_norm(x, w, w).float().sum()


def _layer_inputs(device, requires_grad):
    def t(*shape):
        return torch.empty(shape, dtype=H, device=device).requires_grad_(requires_grad)

    return t(4, 8, 64), t(64), t(1, 40, 4, 64), t(1, 40, 2, 64), t(1, 40, 2, 64), t(64, 96), t(96, 64)


def test_compile_fullgraph_has_no_graph_break():
    explained = torch._dynamo.explain(_layer)(*_layer_inputs("meta", False))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    names = {str(node.target) for gm in explained.graphs for node in gm.graph.nodes if node.op == "call_function"}
    for op in ("rms_norm", "flash_attention", "matmul", "layer_norm", "softmax", "add"):
        assert any(name.startswith(f"tegula.{op}") for name in names), (op, names)
    compiled = torch.compile(_layer, fullgraph=True, backend="eager")
    assert compiled(*_layer_inputs("meta", False)).shape == ()


def test_compile_fullgraph_backward_traces():
    torch._dynamo.reset()
    inputs = _layer_inputs("meta", True)
    compiled = torch.compile(_layer, fullgraph=True, backend="aot_eager")
    compiled(*inputs).backward()
    for t in inputs:
        assert t.grad is not None and t.grad.shape == t.shape


def test_out_argument_traces_as_op_and_copy():
    def f(x, w, out):
        return K.rms_norm(x, w, out=out)

    x, w = torch.empty(4, 64, dtype=H, device="meta"), torch.empty(64, dtype=H, device="meta")
    explained = torch._dynamo.explain(f)(x, w, torch.empty_like(x))
    assert explained.graph_break_count == 0


def test_differentiable_ops_take_grad_inputs_and_the_rest_refuse():
    x = torch.randn(4, 64).half().requires_grad_()
    # A differentiable op goes on to its checks (a CPU tensor is not a CUDA tensor)...
    with pytest.raises(ValueError, match=r"^rms_norm: x must be a CUDA tensor"):
        K.rms_norm(x, torch.ones(64).half())
    # ... one without a backward refuses before anything runs.
    with pytest.raises(RuntimeError, match=r"^row_max: x requires grad, but row_max has no backward yet"):
        K.row_max(x)


def test_argument_errors_name_the_argument_before_the_dispatcher():
    with pytest.raises(ValueError, match=r"^rms_norm: eps must be a non-negative finite float, got 'a'"):
        K.rms_norm(torch.ones(4, 8).half(), torch.ones(8).half(), "a")
    with pytest.raises(TypeError, match=r"rms_norm: x"):
        K.rms_norm("not a tensor", torch.ones(8).half())
    with pytest.raises(ValueError, match=r"^flash_attention: layout must be one of"):
        FA.flash_attention(torch.ones(1, 8, 1, 16).half(), torch.ones(1, 8, 1, 16).half(),
                          torch.ones(1, 8, 1, 16).half(), layout="sbhd")
    with pytest.raises(ValueError, match=r"^matmul: activation must be"):
        K.matmul(torch.ones(8, 8).half(), torch.ones(8, 8).half(), activation="tanh")


# ---- a user's kernel as an op --------------------------------------------------------

@tegula.jit(out_idx=[-1])
def _scale_add(N, dtype="float32"):
    M = T.dynamic("m")

    @T.prim_func
    def scale_add(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype), s: T.float32,
                  Z: T.Tensor((M, N), dtype)):
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                Z[bx, j] = X[bx, j] * s + Y[bx, j]

    return scale_add


@tegula.jit(out_idx=[1, 2])
def _two_outputs(M, N):
    @T.prim_func
    def split(X: T.Tensor((M, N), "float16"), A: T.Tensor((M, N), "float16"), S: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=128) as bx:
            for j in T.Parallel(N):
                A[bx, j] = X[bx, j]
            S[bx] = 0.0

    return split


def test_custom_op_schema_and_fake_from_the_kernel():
    op = tegula.custom_op(_kernel(_scale_add, 256), "tegula_test::scale_add")
    assert str(op._opoverload._schema) == "tegula_test::scale_add(Tensor X, Tensor Y, float s) -> Tensor"
    assert torch.ops.tegula_test.scale_add.default is op._opoverload
    x = torch.empty(37, 256, device="meta")
    assert op(x, x, 2.0).shape == (37, 256)   # the dynamic size comes from X's first dimension
    with FakeTensorMode():
        y = torch.empty(5, 256, device="cuda", dtype=torch.float32)
        z = op(y, y, 1.5)
        assert z.shape == (5, 256) and z.device.type == "cuda" and z.dtype == torch.float32

    def f(a, b):
        return op(a, b, 3.0) * 2

    assert torch._dynamo.explain(f)(x, x).graph_break_count == 0


def test_custom_op_with_two_outputs():
    op = tegula.custom_op(_kernel(_two_outputs, 12, 64), "tegula_test::two_outputs")
    assert str(op._opoverload._schema) == "tegula_test::two_outputs(Tensor X) -> (Tensor, Tensor)"
    a, s = op(torch.empty(12, 64, dtype=H, device="meta"))
    assert a.shape == (12, 64) and a.dtype == H and s.shape == (12,) and s.dtype == torch.float32


def test_custom_op_refuses_what_it_cannot_describe():
    with pytest.raises(TypeError, match="must be a compiled JITKernel"):
        tegula.custom_op(_scale_add, "tegula_test::lazy")
    with pytest.raises(ValueError, match="name must be 'namespace::op_name'"):
        tegula.custom_op(_kernel(_scale_add, 128), "no_namespace")
    no_out = tegula.compile(_scale_add.fn(64), target="sm_90a")
    with pytest.raises(ValueError, match="has no out_idx"):
        tegula.custom_op(no_out, "tegula_test::no_out")


def _kernel(jit_fn, *sizes):
    """The kernel for `sizes`, compiled for sm_90a (no GPU here)."""
    return tegula.compile(jit_fn.fn(*sizes), out_idx=jit_fn.settings["out_idx"], target="sm_90a")


def test_eager_calls_skip_the_dispatcher_and_keep_the_formula(monkeypatch):
    """An eager call with an input that requires grad runs the op's implementation and its
    registered formula as a torch.autograd.Function (no dispatcher); here with torch's own
    softmax standing in for the kernels, so the wiring is checked on the CPU."""
    calls = []
    monkeypatch.setitem(ops._IMPLS, "softmax", lambda x: calls.append("fwd") or torch.softmax(x, -1))

    def softmax_backward(dy, y):
        calls.append("bwd")
        return y * (dy - (dy * y).sum(-1, keepdim=True))

    monkeypatch.setitem(ops._IMPLS, "softmax_backward", softmax_backward)
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    g = torch.randn(5, 7, dtype=torch.float64)
    (grad,) = torch.autograd.grad(K.softmax(x), x, g)
    (want,) = torch.autograd.grad(torch.softmax(x, -1), x, g)
    assert calls == ["fwd", "bwd"]
    assert torch.allclose(grad, want, rtol=1e-12, atol=1e-12)
    # Without grad the plain implementation runs, and returns no graph.
    with torch.no_grad():
        assert K.softmax(x).grad_fn is None
    assert calls == ["fwd", "bwd", "fwd"]
