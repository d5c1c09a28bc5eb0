"""The shipped kernels as torch.library operators, on the CPU: every entry point is an op
in torch.ops.tegula; each traces under FakeTensorMode with CUDA fake tensors (forward, and
the registered backward formula), runs the autograd engine on meta tensors, and compiles
with torch.compile(fullgraph=True) with no graph break. The model kernels' fakes give the
eager layouts, their in-place forms are operators that name what they write (traced through
functionalization with CPU stand-ins for the kernels), and their argument errors come from
the public function, before the dispatcher. A user's kernel becomes an op in one line
(tegula.custom_op). The numbers are the GPU tier's (test_torch_ops_gpu.py)."""
import importlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import tegula
import tegula.kernels as K
import tegula.language as T

ops = importlib.import_module("tegula.kernels._ops")
FA = importlib.import_module("tegula.kernels.flash_attention")
MLA = importlib.import_module("tegula.kernels.mla_decode")

MODEL = {"rope", "swiglu", "swiglu_linear", "add_rms_norm", "grouped_gemm", "moe_align_block_size", "moe_permute",
         "moe_combine"}
QUANT = {"fp8_gemm", "quantize_fp8", "rms_norm_quantize_fp8", "w4a16_gemm"}
FORWARD = {"rms_norm", "rms_norm_silu", "layer_norm", "softmax", "add", "row_sum", "row_max", "row_min",
           "transpose", "matmul", "matmul_tuned", "flash_attention", "flash_decode", "mla_decode"} | MODEL | QUANT
INPLACE = {"rope_": "rope", "add_rms_norm_": "add_rms_norm"}
BACKWARD_HALVES = {"rms_norm_backward", "layer_norm_backward", "softmax_backward", "matmul_backward",
                   "flash_attention_backward", "column_sum"}
DIFFERENTIABLE = {"rms_norm", "rms_norm_silu", "layer_norm", "softmax", "add", "row_sum", "transpose", "matmul",
                  "flash_attention"}

H = torch.float16
E4M3 = torch.float8_e4m3fn


def _inputs(device, requires_grad=False):
    """(public function, its tensor arguments, expected output shapes) per forward op, at
    ragged sizes."""
    def t(*shape, dtype=H):
        return torch.empty(shape, dtype=dtype, device=device).requires_grad_(requires_grad and dtype.is_floating_point)

    def lens(*shape):
        return torch.empty(shape, dtype=torch.int32, device=device)

    x = (3, 5, 72)
    attention = lambda q, k, v: FA.flash_attention(q, k, v, causal=True, return_lse=True)  # noqa: E731
    qk = (t(3, 5, 6, 40), t(3, 5, 2, 40), t(16, 20, dtype=torch.float32), t(16, 20, dtype=torch.float32))
    # MoE: 5 tokens to 2 of 8 experts in blocks of 16: 10 + 8 * 15 = 130 slots in 9 blocks.
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
        "rope": (K.rope, qk, [(3, 5, 6, 40), (3, 5, 2, 40)]),
        "rope_": (lambda q, k, c, s: K.rope(q, k, c, s, inplace=True), qk, [(3, 5, 6, 40), (3, 5, 2, 40)]),
        "swiglu": (K.swiglu, (t(3, 5, 144),), [x]),
        "swiglu_linear": (K.swiglu_linear, (t(3, 5, 40), t(112, 40)), [(3, 5, 56)]),
        "add_rms_norm": (lambda x, r, w: K.add_rms_norm(x, r, w, 1e-5), (t(*x), t(*x), t(72)), [x, x]),
        "add_rms_norm_": (lambda x, r, w: K.add_rms_norm(x, r, w, inplace=True), (t(*x), t(*x), t(72)), [x, x]),
        "grouped_gemm": (K.grouped_gemm, (t(37, 40), t(3, 40, 56), lens(4)), [(37, 56)]),
        "moe_align_block_size": (lambda ids: K.moe_align_block_size(ids, 8, 16), (lens(5, 2),),
                                 [(130,), (9,), (1,), (9,), (5, 2)]),
        "moe_permute": (lambda x, ids: K.moe_permute(x, ids, 2), (t(5, 72), lens(130)), [(130, 72)]),
        "moe_combine": (K.moe_combine, (t(130, 72), t(5, 2, dtype=torch.float32), lens(5, 2)), [(5, 72)]),
        "fp8_gemm": (K.fp8_gemm, (t(40, 48, dtype=E4M3), t(56, 48, dtype=E4M3), t(1, dtype=torch.float32),
                                  t(1, dtype=torch.float32)), [(40, 56)]),
        "quantize_fp8": (lambda x: K.quantize_fp8(x, 32), (t(3, 5, 72),), [(3, 5, 72), (3, 5, 3)]),
        "rms_norm_quantize_fp8": (K.rms_norm_quantize_fp8, (t(7, 72), t(72)), [(7, 72), (7, 1)]),
        "w4a16_gemm": (lambda x, q, s: K.w4a16_gemm(x, q, s, group_size=128),
                       (t(5, 256), t(72, 128, dtype=torch.uint8), t(72, 2)), [(5, 72)]),
    }


def test_every_entry_point_is_an_op():
    registered = {name for name in dir(torch.ops.tegula) if isinstance(getattr(torch.ops.tegula, name),
                                                                       torch._ops.OpOverloadPacket)}
    assert registered == FORWARD | set(INPLACE) | BACKWARD_HALVES
    assert set(ops.FORWARD_OPS) == FORWARD
    assert ops.INPLACE_OPS == INPLACE
    assert ops.DIFFERENTIABLE == DIFFERENTIABLE
    # The public functions, in the package and in each kernel module, are the op callers.
    for module, names in ops._PUBLIC.items():
        for name in names:
            assert getattr(module, name) is getattr(ops, name), f"{module.__name__}.{name} does not call the op"
            if hasattr(K, name) and not isinstance(getattr(K, name), type(ops)):
                assert getattr(K, name) is getattr(ops, name)
    assert {n for names in ops._PUBLIC.values() for n in names} == FORWARD


@pytest.mark.parametrize("name", sorted(FORWARD | set(INPLACE)))
def test_forward_traces_with_cuda_fake_tensors(name):
    with FakeTensorMode():
        fn, args, shapes = _inputs("cuda")[name]
        out = fn(*args)
        outs = out if isinstance(out, tuple) else (out,)
        assert [tuple(o.shape) for o in outs] == [tuple(s) for s in shapes]
        assert all(o.device.type == "cuda" for o in outs)
        if name in INPLACE:   # the written inputs come back: rope's q and k, add_rms_norm's residual
            written = args[:2] if name == "rope_" else args[1:2]
            assert all(o is a for o, a in zip(outs[-len(written):], written))


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


# ---- the model kernels ----------------------------------------------------------------

def test_model_op_fakes_give_the_eager_layouts():
    """Each fake's dtype and strides are what the eager entry point returns: rope's outputs
    follow the layout the kernel reads in place (a "bhsd" view of a contiguous "bshd"
    tensor comes back as such a view; a strided view, contiguous); the routing is int32."""
    with FakeTensorMode():
        def t(*shape, dtype=H):
            return torch.empty(shape, dtype=dtype, device="cuda")

        bshd = t(2, 9, 4, 32)
        q_view = bshd.transpose(1, 2)                  # "bhsd" (2, 4, 9, 32), read in place
        k_strided = t(2, 4, 9, 48)[..., :32]           # neither layout contiguous: copied
        q_out, k_out = K.rope(q_view, k_strided, layout="bhsd")
        assert q_out.shape == q_view.shape and q_out.stride() == q_view.stride()
        assert k_out.shape == k_strided.shape and k_out.is_contiguous()
        q_alone, none = K.rope(bshd, None)
        assert none is None and q_alone.stride() == bshd.stride()
        none, k_alone = K.rope(None, bshd, base=500000.0)
        assert none is None and k_alone.shape == bshd.shape
        y, h = K.add_rms_norm(t(3, 72)[:, :64], t(3, 64), t(64))   # a strided x: contiguous results
        assert y.is_contiguous() and h.is_contiguous() and y.dtype == H
        assert K.swiglu(t(7, 40), t(7, 40)).shape == (7, 40)
        assert K.swiglu_linear(t(7, 40), t(24, 40), t(24, 40)).shape == (7, 24)
        assert K.grouped_gemm(t(37, 40), t(3, 56, 40), t(4, dtype=torch.int32), trans_w=True).shape == (37, 56)
        align = K.moe_align_block_size(t(1000, 6, dtype=torch.int64), 64, 32)
        assert type(align).__name__ == "MoeAlignment"
        slots = 6000 + 64 * 31
        assert [tuple(a.shape) for a in align] == [(slots,), (-(-slots // 32),), (1,), (65,), (1000, 6)]
        assert all(a.dtype == torch.int32 for a in align)
        assert K.moe_combine(t(130, 72), t(5, 2), t(5, 2, dtype=torch.int32)).dtype == H


def _g(*shape, dtype=H):
    return torch.empty(shape, dtype=dtype, device="meta").requires_grad_()


def _m(*shape, dtype=H):
    return torch.empty(shape, dtype=dtype, device="meta")


# (call with one argument requiring grad, the op, that argument), on meta tensors: without
# the public function's refusal each would reach the op and return a detached output.
NO_BACKWARD = {
    "rope-k": (lambda: K.rope(_m(1, 4, 2, 16), _g(1, 4, 2, 16)), "rope", "k"),
    "rope_-q": (lambda: K.rope(_g(1, 4, 2, 16), None, inplace=True), "rope", "q"),
    "rope-cos": (lambda: K.rope(_m(1, 4, 2, 16), None, _g(4, 8, dtype=torch.float32), _m(4, 8, dtype=torch.float32)),
                 "rope", "cos"),
    "swiglu-up": (lambda: K.swiglu(_m(3, 8), _g(3, 8)), "swiglu", "up"),
    "swiglu_linear-w_up": (lambda: K.swiglu_linear(_m(3, 8), _m(4, 8), _g(4, 8)), "swiglu_linear", "w_up"),
    "add_rms_norm-weight": (lambda: K.add_rms_norm(_m(3, 8), _m(3, 8), _g(8)), "add_rms_norm", "weight"),
    "add_rms_norm_-residual": (lambda: K.add_rms_norm(_m(3, 8), _g(3, 8), _m(8), inplace=True), "add_rms_norm",
                               "residual"),
    "grouped_gemm-w": (lambda: K.grouped_gemm(_m(9, 8), _g(2, 8, 16), _m(3, dtype=torch.int32)), "grouped_gemm", "w"),
    "moe_permute-x": (lambda: K.moe_permute(_g(5, 8), _m(40, dtype=torch.int32), 2), "moe_permute", "x"),
    "moe_combine-topk_weights": (lambda: K.moe_combine(_m(40, 8), _g(5, 2, dtype=torch.float32),
                                                       _m(5, 2, dtype=torch.int32)), "moe_combine", "topk_weights"),
}


@pytest.mark.parametrize("name", list(NO_BACKWARD))
def test_model_ops_refuse_inputs_that_require_grad(name):
    call, op, arg = NO_BACKWARD[name]
    with pytest.raises(RuntimeError, match=rf"^{op}: {arg} requires grad, but {op} has no backward yet"):
        call()
    with torch.no_grad():   # nothing is lost without grad recording: the op runs (its fake, on meta)
        out = call()
    assert all(o is None or o.device.type == "meta" for o in (out if isinstance(out, tuple) else (out,)))


def test_model_argument_errors_come_from_the_function_before_the_dispatcher():
    """Under FakeTensorMode every call goes to the op, whose fake checks nothing: each error
    below is the public function's."""
    with FakeTensorMode():
        def t(*shape, dtype=H):
            return torch.empty(shape, dtype=dtype, device="cuda")

        q, k, ids = t(1, 4, 2, 16), t(1, 4, 1, 16), t(4, 2, dtype=torch.int32)
        errors = [
            (lambda: K.rope(q, k, layout="sbhd"), ValueError, r"^rope: layout must be one of \('bshd', 'bhsd'\)"),
            (lambda: K.rope(None, None), TypeError, r"^rope: q and k are both None"),
            (lambda: K.rope(q, k, interleaved=1), TypeError, r"^rope: interleaved must be a bool, got 1"),
            (lambda: K.rope(q, k, inplace="yes"), TypeError, r"^rope: inplace must be a bool"),
            (lambda: K.rope(q, [1.0]), TypeError, r"^rope: k must be a torch\.Tensor \(or an array exposing"),
            (lambda: K.rope(q, k, positions=[0, 1]), TypeError, r"^rope: positions must be None or a torch\.Tensor"),
            (lambda: K.rope(q, k, base=1.0), ValueError, r"^rope: base must be a finite number greater than 1"),
            (lambda: K.swiglu("x"), TypeError, r"^swiglu: x must be a torch\.Tensor"),
            (lambda: K.swiglu_linear(t(3, 16), t(8, 16), w_up=3), TypeError, r"^swiglu_linear: w_up must be None or"),
            (lambda: K.add_rms_norm(t(3, 16), t(3, 16), t(16), eps="a"), ValueError,
             r"^add_rms_norm: eps must be a non-negative finite float, got 'a'"),
            (lambda: K.add_rms_norm(t(3, 16), t(3, 16), t(16), inplace=1), TypeError,
             r"^add_rms_norm: inplace must be a bool"),
            (lambda: K.grouped_gemm(t(9, 16), t(2, 16, 8), t(3, dtype=torch.int32), trans_w=1), TypeError,
             r"^grouped_gemm: trans_w must be a bool"),
            (lambda: K.grouped_gemm(t(9, 16), t(2, 16, 8), [0, 4, 9]), TypeError, r"^grouped_gemm: offsets must be a"),
            (lambda: K.moe_align_block_size(ids, 0, 16), ValueError,
             r"^moe_align_block_size: num_experts must be an int"),
            (lambda: K.moe_align_block_size(ids, 8, 16.0), ValueError,
             r"^moe_align_block_size: block_size must be an int in \[1, 1024\]"),
            (lambda: K.moe_permute(t(4, 16), t(40, dtype=torch.int32), 0), ValueError, r"^moe_permute: top_k must be"),
            (lambda: K.moe_combine(t(40, 16), t(4, 2), None), TypeError, r"^moe_combine: token_positions must be a"),
        ]
        for call, exc, pattern in errors:
            with pytest.raises(exc, match=pattern):
                call()


E_TEST = 4   # experts of the MoE below


def _model_block(x, residual, w, q, k, cos, sin, w_gate_up, topk_ids, topk_weights, w13, w2, out):
    """A decoder layer's worth of the model kernels: the fused norm (out of place, in place
    and into out), RoPE (out of place, then in place on its own outputs), the fused MLP, and
    a MoE routed through align -> permute -> grouped_gemm -> swiglu -> grouped_gemm -> combine."""
    y, h = K.add_rms_norm(x, residual, w)
    y2, _ = K.add_rms_norm(y, h, w, inplace=True)
    K.add_rms_norm(y2, x, w, 1e-5, out=out)
    q2, k2 = K.rope(q, k, cos, sin)
    K.rope(q2, k2, cos, sin, inplace=True)
    mlp = K.swiglu_linear(y2, w_gate_up)
    align = K.moe_align_block_size(topk_ids, E_TEST, 16)
    xs = K.moe_permute(y2, align.sorted_token_ids, topk_ids.shape[1])
    hs = K.swiglu(K.grouped_gemm(xs, w13, align.expert_offsets, trans_w=True))
    moe = K.moe_combine(K.grouped_gemm(hs, w2, align.expert_offsets, trans_w=True), topk_weights,
                        align.token_positions)
    return (mlp.float().sum() + moe.float().sum() + q2.float().sum() + k2.float().sum() + out.float().sum()
            + h.float().sum())


def _model_inputs(device):
    def t(*shape, dtype=H):
        return torch.empty(shape, dtype=dtype, device=device)

    return (t(6, 64), t(6, 64), t(64), t(1, 6, 4, 32), t(1, 6, 2, 32), t(8, 16, dtype=torch.float32),
            t(8, 16, dtype=torch.float32), t(96, 64), t(6, 2, dtype=torch.int32), t(6, 2, dtype=torch.float32),
            t(E_TEST, 96, 64), t(E_TEST, 64, 48), t(6, 64))


def test_compile_fullgraph_of_the_model_kernels_has_no_graph_break():
    explained = torch._dynamo.explain(_model_block)(*_model_inputs("meta"))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    names = {str(node.target) for gm in explained.graphs for node in gm.graph.nodes if node.op == "call_function"}
    for op in sorted(MODEL | set(INPLACE)):
        assert f"tegula.{op}" in names, (op, names)
    compiled = torch.compile(_model_block, fullgraph=True, backend="eager")
    assert compiled(*_model_inputs("meta")).shape == ()


def _rope_standin(q, k, cos=None, sin=None, positions=None, *, interleaved=False, inplace=False, layout="bshd",
                  base=10000.0, check_indices=None):
    """The eager entry point's contract on the CPU, for (P, D/2) tables, "bshd", positions
    0..S-1: half-split pairs turned in float32."""
    def turn(x):
        c, s = cos[:x.shape[1], None, :], sin[:x.shape[1], None, :]
        a, b = x.float().chunk(2, -1)
        return torch.cat((a * c - b * s, b * c + a * s), -1).to(x.dtype)

    outs = [None if t is None else turn(t) for t in (q, k)]
    if not inplace:
        return tuple(outs)
    for t, o in zip((q, k), outs):
        if t is not None:
            t.copy_(o)
    return q, k


def _add_rms_norm_standin(x, residual, weight, eps=1e-6, inplace=False, out=None):
    h = x + residual
    y = F.rms_norm(h.float(), (h.shape[-1],), weight.float(), eps).to(x.dtype)
    if inplace:
        h = residual.copy_(h)
    return (y if out is None else out.copy_(y)), h


def _inplace_step(x, residual, w, q, k, cos, sin):
    y, h = K.add_rms_norm(x, residual, w, inplace=True)
    q1, k1 = K.rope(q, k, cos, sin, inplace=True)
    q2, none = K.rope(q1 * 2, None, cos, sin)
    return y, h * 1, q2, none


def test_inplace_forms_write_their_inputs_through_functionalization(monkeypatch):
    """rope_ and add_rms_norm_ under torch.compile (aot_eager: functionalization, then the
    writes copied back into the caller's tensors) against the same calls eagerly, with CPU
    stand-ins for the kernels; rope's None comes back as None."""
    monkeypatch.setitem(ops.EAGER, "rope", _rope_standin)
    monkeypatch.setitem(ops.EAGER, "add_rms_norm", _add_rms_norm_standin)
    gen = torch.Generator().manual_seed(0)
    inputs = [torch.randn(shape, generator=gen) for shape in ((5, 32), (5, 32), (32,), (2, 5, 4, 16), (2, 5, 2, 16),
                                                             (8, 8), (8, 8))]
    eager_in = [t.clone() for t in inputs]
    compiled_in = [t.clone() for t in inputs]
    want = _inplace_step(*eager_in)
    torch._dynamo.reset()
    got = torch.compile(_inplace_step, fullgraph=True, backend="aot_eager")(*compiled_in)
    assert want[3] is None and got[3] is None
    for a, b in zip(want[:3], got[:3]):
        assert torch.equal(a, b)
    for name, before, a, b in zip(("x", "residual", "w", "q", "k"), inputs, eager_in, compiled_in):
        assert torch.equal(a, b), name                      # the same writes, in both
        assert torch.equal(a, before) == (name in ("x", "w")), name   # residual, q and k written; x, w not
    # The reference the stand-ins encode: residual became x + residual; q turned by the tables.
    assert torch.allclose(eager_in[1], inputs[0] + inputs[1])
    assert torch.allclose(eager_in[3], _rope_standin(inputs[3], None, inputs[5], inputs[6])[0])


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
