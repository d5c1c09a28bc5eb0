"""The entry points of tegula.kernels without a GPU: every argument error that can be raised
before a launch names the argument and what was expected (the checks run type and dtype,
then rank and shapes, then device, so structural errors show on CPU tensors), and every
shipped kernel still compiles to machine code for sm_80 and sm_90a, with max / min
spelled as the NaN-propagating device functions (the .NaN PTX instructions)."""
import importlib
import re

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

import tegula.kernels as K  # noqa: E402
from tegula.kernels._common import plan_rows, plan_tile  # noqa: E402

fa = importlib.import_module("tegula.kernels.flash_attention")
fd = importlib.import_module("tegula.kernels.flash_decoding")
gemm = importlib.import_module("tegula.kernels.gemm")
_ops = importlib.import_module("tegula.kernels._ops")
mla = importlib.import_module("tegula.kernels.mla_decode")
softmax_mod = importlib.import_module("tegula.kernels.row_softmax")
transpose_mod = importlib.import_module("tegula.kernels.matrix_transpose")
from tegula.kernels import elementwise, layernorm, reduce, rmsnorm  # noqa: E402

H16 = torch.float16


def _raises(fn, exc, pattern):
    with pytest.raises(exc, match=pattern):
        fn()


x = torch.randn(4, 64).half()
w = torch.ones(64).half()
q = torch.randn(1, 16, 4, 64).half()
kv = torch.randn(1, 16, 2, 64).half()
dq = torch.randn(2, 8, 64).half()
cache = torch.randn(2, 32, 2, 64).half()
lens = torch.full((2,), 32, dtype=torch.int32)

# (call, exception, pattern): the pattern names the op and the argument at fault.
ERRORS = {
    "rms_norm-dtype": (lambda: K.rms_norm(x.double(), w), ValueError, r"rms_norm: x must be a tensor of float16"),
    "rms_norm-None": (lambda: K.rms_norm(None, w), TypeError, r"rms_norm: x must be a torch\.Tensor"),
    "rms_norm-weight-dtype": (lambda: K.rms_norm(x, w.float()), ValueError, r"rms_norm: weight must be a float16"),
    "rms_norm-weight-shape": (lambda: K.rms_norm(x, w[:32]), ValueError, r"rms_norm: weight must have shape \(64,\)"),
    "rms_norm-scalar": (lambda: K.rms_norm(x[0, 0], w), ValueError, r"rms_norm: x must have at least one dim"),
    "rms_norm-eps": (lambda: K.rms_norm(x, w, eps=-1.0), ValueError, r"rms_norm: eps"),
    "rms_norm-cpu": (lambda: K.rms_norm(x, w), ValueError, r"rms_norm: x must be a CUDA tensor"),
    "rms_norm_silu-cpu": (lambda: K.rms_norm_silu(x, w), ValueError, r"rms_norm_silu: x must be a CUDA tensor"),
    "layer_norm-bias-None": (lambda: K.layer_norm(x, w, None), TypeError, r"layer_norm: bias must be a torch\.Tensor"),
    "layer_norm-bias-shape": (lambda: K.layer_norm(x, w, w[:8]), ValueError, r"layer_norm: bias must have shape"),
    "layer_norm-cpu": (lambda: K.layer_norm(x, w, w), ValueError, r"layer_norm: x must be a CUDA tensor"),
    "softmax-int": (lambda: K.softmax(x.int()), ValueError, r"softmax: x must be a tensor of float16"),
    "softmax-cpu": (lambda: K.softmax(x), ValueError, r"softmax: x must be a CUDA tensor"),
    "row_sum-list": (lambda: K.row_sum(x.tolist()), TypeError, r"row_sum: x must be a torch\.Tensor"),
    "row_max-empty-rows": (lambda: K.row_max(x[:, :0]), ValueError, r"row_max: the last dimension of x is empty"),
    "row_min-cpu": (lambda: K.row_min(x), ValueError, r"row_min: x must be a CUDA tensor"),
    "add-y-dtype": (lambda: K.add(x, x.float()), ValueError, r"add: y must be a float16"),
    "add-y-shape": (lambda: K.add(x, x[:2]), ValueError, r"add: y must have x's shape"),
    "add-y-scalar": (lambda: K.add(x, 1.0), TypeError, r"add: y must be a torch\.Tensor"),
    "add-cpu": (lambda: K.add(x, x), ValueError, r"add: x must be a CUDA tensor"),
    "transpose-3d": (lambda: K.transpose(x.view(2, 2, 64)), ValueError, r"transpose: x must be a 2-D"),
    "transpose-cpu": (lambda: K.transpose(x), ValueError, r"transpose: x must be a CUDA tensor"),
    "matmul-float32": (lambda: gemm.matmul(x.float(), x.t().float()), ValueError, r"matmul: a must be a tensor of float16"),
    "matmul-b-dtype": (lambda: gemm.matmul(x, x.t().bfloat16()), ValueError, r"matmul: b must be a float16"),
    "matmul-b-rank": (lambda: gemm.matmul(x, w), ValueError, r"matmul: b must be 2-D"),
    "matmul-inner": (lambda: gemm.matmul(x, x), ValueError, r"matmul: b must have shape \(64, N\)"),
    "matmul-bias-shape": (lambda: gemm.matmul(x, x.t(), bias=w), ValueError, r"matmul: bias must have shape \(4,\)"),
    "matmul-activation": (lambda: gemm.matmul(x, x.t(), activation="tanh"), ValueError, r"matmul: activation"),
    "matmul-cpu": (lambda: gemm.matmul(x, x.t()), ValueError, r"matmul: a must be a CUDA tensor"),
    "matmul_tuned-rank": (lambda: gemm.matmul_tuned(x[0], x.t()), ValueError, r"matmul_tuned: a must be 2-D"),
    "attention-q-float32": (lambda: fa.flash_attention(q.float(), kv, kv), ValueError, r"flash_attention: q must be a tensor of float16"),
    "attention-k-dtype": (lambda: fa.flash_attention(q, kv.bfloat16(), kv), ValueError, r"flash_attention: k must have q's dtype"),
    "attention-v-rank": (lambda: fa.flash_attention(q, kv, kv[0]), ValueError, r"flash_attention: v must be 4-D"),
    "attention-v-shape": (lambda: fa.flash_attention(q, kv, kv[:, :8]), ValueError, r"flash_attention: v must have k's shape"),
    "attention-heads": (lambda: fa.flash_attention(q, kv[:, :, :0], kv[:, :, :0]), ValueError, r"heads of q \(4\)"),
    "attention-head-dim": (lambda: fa.flash_attention(q[..., :40], kv[..., :40], kv[..., :40]), ValueError,
                           r"head dimension"),
    "attention-causal": (lambda: fa.flash_attention(q, kv, kv, causal="yes"), TypeError, r"causal must be a bool"),
    "attention-sm-scale": (lambda: fa.flash_attention(q, kv, kv, sm_scale=float("inf")), ValueError, r"sm_scale"),
    "attention-cpu": (lambda: fa.flash_attention(q, kv, kv), ValueError, r"flash_attention: q must be a CUDA tensor"),
    "decode-q-rank": (lambda: fd.flash_decode(q, cache, cache, lens), ValueError, r"flash_decode: q must be 3-D"),
    "decode-cache-dtype": (lambda: fd.flash_decode(dq, cache.float(), cache, lens), ValueError,
                           r"flash_decode: k_cache must be a tensor of float16"),
    "decode-v-shape": (lambda: fd.flash_decode(dq, cache, cache[:, :8], lens), ValueError, r"v_cache must have"),
    "decode-seqlens": (lambda: fd.flash_decode(dq, cache, cache, lens.long()), ValueError, r"cache_seqlens must be an int32"),
    "decode-num-split": (lambda: fd.flash_decode(dq, cache, cache, lens, num_split=True), ValueError, r"num_split"),
    "decode-cpu": (lambda: fd.flash_decode(dq, cache, cache, lens), ValueError, r"flash_decode: q must be a CUDA tensor"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_argument_errors_name_the_argument(name):
    fn, exc, pattern = ERRORS[name]
    _raises(fn, exc, pattern)


def test_missing_arguments_are_named_by_python():
    with pytest.raises(TypeError, match=r"weight"):
        K.rms_norm(x)  # noqa
    with pytest.raises(TypeError, match=r"cache_seqlens"):
        fd.flash_decode(dq, cache, cache)  # noqa


# --- every kernel compiles for sm_80 and sm_90a ------------------------------------------------

FAST = {tegula.PassConfigKey.TL_ENABLE_FAST_MATH: True}


def _rows(fn, n, dtype, *args):
    p = plan_rows(n, 4 if dtype == "float32" else 2)
    return fn(n, dtype, *args, p.blk_m, p.threads, p.n_pad)


PROGRAMS = {
    "row_max": lambda: (_rows(reduce.row_reduce_program, 1000, "float16", "max"), None),
    "row_min": lambda: (_rows(reduce.row_reduce_program, 520, "float32", "min"), None),
    "row_sum": lambda: (_rows(reduce.row_reduce_program, 4104, "bfloat16", "sum"), None),
    "softmax": lambda: (_rows(softmax_mod.softmax_program, 1000, "float16"), None),
    "rms_norm": lambda: (_rows(rmsnorm.rms_norm_program, 4096, "bfloat16", 1e-6, False), None),
    "rms_norm_silu": lambda: (_rows(rmsnorm.rms_norm_program, 520, "float16", 1e-6, True), None),
    "layer_norm": lambda: (_rows(layernorm.layer_norm_program, 1000, "float32", 1e-5), None),
    "add": lambda: (elementwise.add_program(1000, "float16", True, *vars(plan_tile(1000, 2)).values()), None),
    "transpose": lambda: (transpose_mod.transpose_program(100, 200, "float16", 64, 256, 2), None),
    "matmul_bias_relu": lambda: (gemm.matmul_program(300, 200, 136, epilogue="bias_relu"), None),
    "flash_attention": lambda: (fa.flash_attention_program(2, 4, 2, 300, 257, 128, is_causal=True,
                                                           **fa.default_config(300, 128, True)), FAST),
    "decode_split": lambda: (fd.decode_split_program(3, 8, 2, 1000, 64, 4), FAST),
    "decode_combine": lambda: (fd.decode_combine_program(3, 8, 64, 4), None),
}
# Kernels whose float max/min must be the NaN-propagating device functions.
USES_MAX = {"row_max": "max", "row_min": "min", "softmax": "max", "matmul_bias_relu": "max",
            "flash_attention": "max", "decode_split": "max", "decode_combine": "max"}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_kernel_compiles(name, target):
    program, configs = PROGRAMS[name]()
    kernel = tegula.compile(program, target=target, pass_configs=configs)
    source = kernel.get_kernel_source()
    assert len(kernel.cubin()) > 0
    if name in USES_MAX:
        op = USES_MAX[name]
        assert f"tegula::{op}(" in source, f"{name}: no tegula::{op} in the source"
    # CUDA's global max(float, float) is fmaxf, which drops NaN: a float max must never
    # be printed unqualified. (Integer index math may use it: its operands are ints.)
    for m in re.finditer(r"(?<![:\w])(max|min)\(([^,]*)", source):
        assert not re.search(r"\d\.\d*f\b|infinity<float>|\bfloat\b", m.group(2)), \
            f"{name}: float {m.group(1)} printed unqualified: {m.group(0)}"


def _g(t):
    return t.detach().clone().requires_grad_(True)


# (call with one argument requiring grad, the op, that argument): every entry point that
# has no backward. (The differentiable ones are tests/python/cpu/test_torch_ops.py's.)
NO_BACKWARD = {
    "row_max": (lambda: K.row_max(_g(x)), "row_max", "x"),
    "row_min": (lambda: K.row_min(_g(x)), "row_min", "x"),
    "matmul_tuned-b": (lambda: K.matmul_tuned(x, _g(x.t())), "matmul_tuned", "b"),
    "decode-k_cache": (lambda: K.flash_decode(dq, _g(cache), cache, lens), "flash_decode", "k_cache"),
    "mla-q": (lambda: mla.mla_decode(_g(torch.randn(2, 16, 576).half()), torch.randn(2, 64, 576).half(), lens),
              "mla_decode", "q"),
    # The eager entry points below the operators refuse too.
    "eager-rms_norm": (lambda: _ops.EAGER["rms_norm"](_g(x), w), "rms_norm", "x"),
    "eager-attention-v": (lambda: _ops.EAGER["flash_attention"](q, kv, _g(kv)), "flash_attention", "v"),
    "eager-matmul-b": (lambda: _ops.EAGER["matmul"](x, _g(x.t())), "matmul", "b"),
}


@pytest.mark.parametrize("name", list(NO_BACKWARD))
def test_inputs_that_require_grad_are_refused_not_detached(name):
    call, op, arg = NO_BACKWARD[name]
    with pytest.raises(RuntimeError, match=rf"^{op}: {arg} requires grad, but {op} has no backward yet") as info:
        call()
    assert "torch.no_grad()" in str(info.value)
    # Without grad recording nothing is lost: the call goes on to the next check (here, the
    # CUDA device of these CPU tensors).
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"must be a CUDA tensor"):
            call()
