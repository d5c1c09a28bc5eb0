"""The shipped kernels as PyTorch operators: `torch.ops.tegula.<name>`, each with a fake
implementation (shapes and dtypes) so `torch.compile(fullgraph=True)` traces through
them, and, where the op has one, a backward written in the language and registered with
`torch.library.register_autograd`. A fake first runs its entry point's argument checks
(`check_<name>_args` in the kernel's module), so a traced call names a bad argument as an
eager call does, before anything else sees the shapes; `out=` is checked the same way.

Three layers, for one op:

    tegula.kernels.rms_norm(x, w, eps)           the public function (also bound as
    (= tegula.kernels.rmsnorm.rms_norm)          rmsnorm.rms_norm, see `_publish`): converts
        -> _call("rms_norm", x, w, eps)  DLPack / __cuda_array_interface__ inputs,
           -> EAGER["rms_norm"](x, w, eps)       checks what tracing must see (an op with no
                                                 backward refuses inputs that require grad)
                                                 and calls the op, whose implementation is
                                                 the module's eager entry point: it checks
                                                 every argument and launches.

An eager call (no torch.compile, no FakeTensorMode or other mode, plain tensors) skips the
dispatcher: `_call` runs the op's implementation itself, or, when an input requires grad,
the same implementation and autograd formula as a torch.autograd.Function. The op proper
is what tracing sees. Both ways run one implementation and one formula.

`out=` calls run the eager entry point directly (it writes `out` in place, which an op
returning a fresh tensor cannot); under torch.compile they become the op and a copy. Every
op returns fresh tensors, never a view of an input (opcheck verifies).

Backward formulas, all through kernels of the language except where the gradient is the
incoming gradient itself or a reshape of it:

    rms_norm, rms_norm_silu  rms_norm_backward   (dx, dweight)
    layer_norm               layer_norm_backward (dx, dweight, dbias)
    softmax                  softmax_backward    dx from the saved output
    add                      dx = dy; dy summed over rows by column_sum when y was one row
    transpose                the transpose of dy
    row_sum                  dy broadcast along the row
    matmul                   matmul_backward     (da, db, dbias): two GEMMs and a column sum
    flash_attention          flash_attention_backward (dq, dk, dv) from the saved log-sum-exp

row_max, row_min, flash_decode, mla_decode and matmul_tuned have none: called on an input
that requires grad (with grad recording on) they raise an error naming the op, before
anything runs. Neither have the model kernels (rope, swiglu, swiglu_linear, add_rms_norm,
grouped_gemm, moe_align_block_size, moe_permute, moe_combine), whose operators, fakes and
public functions are kernels/_model_ops.py's, registered here with the rest, nor the
low-precision kernels (fp8_gemm, quantize_fp8, rms_norm_quantize_fp8, w4a16_gemm:
kernels/_quant_ops.py's); rope and
add_rms_norm with inplace=True call operators of their own, `rope_` and `add_rms_norm_`,
whose schemas name the inputs they write.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _calls, _index_checks as index_checks
from . import _model_ops, _quant_ops, elementwise, flash_attention as _fa, flash_decoding as _fd
from . import gemm as _gemm, gemm_backward as _gemm_bwd, layernorm as _ln, mla_decode as _mla, reduce as _reduce
from . import matrix_transpose as _transpose_mod, rmsnorm as _rms, row_softmax as _softmax_mod
from ._attention import check_flag, check_kv_scale, check_num_split, check_sm_scale
from ._attention_fakes import (_flash_attention_backward_fake, _flash_attention_fake, _flash_decode_fake,
                              _mla_decode_fake)
from ._calls import EAGER, NS, _FUNCTIONS, _IMPLS, _call, _eager, _op, _refuse_all, _tensor, _with_out  # noqa: F401
from ._common import check_eps, refuse_grad
from ._model_ops import (INPLACE_OPS, add_rms_norm, grouped_gemm, moe_align_block_size,  # noqa: F401 (_publish)
                         moe_combine, moe_permute, rope, swiglu, swiglu_linear)
from ._quant_ops import fp8_gemm, quantize_fp8, rms_norm_quantize_fp8, w4a16_gemm  # noqa: F401 (_publish)

# The eager entry points, taken before `publish` rebinds the modules' public names to the
# functions below.
_PUBLIC = {
    _rms: ("rms_norm", "rms_norm_silu"), _ln: ("layer_norm",), _softmax_mod: ("softmax",),
    elementwise: ("add",), _reduce: ("row_sum", "row_max", "row_min"), _transpose_mod: ("transpose",),
    _gemm: ("matmul", "matmul_tuned"), _fa: ("flash_attention",), _fd: ("flash_decode",), _mla: ("mla_decode",),
    **_model_ops.PUBLIC, **_quant_ops.PUBLIC,
}
EAGER.update({name: getattr(module, name) for module, names in _PUBLIC.items() for name in names})


def _define(name: str, fn, fake, backward=None, setup=None):
    """Registers `tegula::name` running `fn`, with `fake` for tracing and, when given, an
    autograd formula. The schema comes from fn's annotations; the inputs it writes, from
    `_model_ops.MUTATES`."""
    op = torch.library.custom_op(f"{NS}::{name}", fn, mutates_args=_model_ops.MUTATES.get(name, ()))
    op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup)
    return op


def _needs(ctx, i: int) -> bool:
    return ctx.needs_input_grad[i]


# ---------------------------------------------------------------------------------------
# Row-wise kernels.

def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return EAGER["rms_norm"](x, weight, eps)


def _rms_norm_silu(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return EAGER["rms_norm_silu"](x, weight, eps)


def _rms_fake(op: str):
    def fake(x, weight, eps):
        _rms.check_rms_norm_args(op, x, weight, eps)
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return fake


def _rms_setup(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _rms_backward(silu: bool):
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dw = _call("rms_norm_backward", dy, x, weight, ctx.eps, silu)
        return (dx if _needs(ctx, 0) else None), (dw if _needs(ctx, 1) else None), None

    return backward


def _rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float,
                       silu: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _rms.rms_norm_backward(dy, x, weight, eps, silu=silu)


def _rms_norm_backward_fake(dy, x, weight, eps, silu):
    _rms.check_rms_norm_backward_args("rms_norm_backward", dy, x, weight, eps)
    return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight)


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return EAGER["layer_norm"](x, weight, bias, eps)


def _layer_norm_fake(x, weight, bias, eps):
    _ln.check_layer_norm_args("layer_norm", x, weight, bias, eps)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _layer_norm_setup(ctx, inputs, output):
    x, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.eps = eps


def _layer_norm_bwd(ctx, dy):
    x, weight, bias = ctx.saved_tensors
    dx, dw, db = _call("layer_norm_backward", dy, x, weight, bias, ctx.eps)
    return tuple(g if _needs(ctx, i) else None for i, g in enumerate((dx, dw, db))) + (None,)


def _layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _ln.layer_norm_backward(dy, x, weight, bias, eps)


def _layer_norm_backward_fake(dy, x, weight, bias, eps):
    _ln.check_layer_norm_backward_args("layer_norm_backward", dy, x, weight, bias, eps)
    return (torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight),
            torch.empty_like(bias))


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return EAGER["softmax"](x)


def _softmax_fake(x):
    _softmax_mod.check_softmax_args("softmax", x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_bwd(ctx, dy):
    (y,) = ctx.saved_tensors
    return _call("softmax_backward", dy, y)


def _softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _softmax_mod.softmax_backward(dy, y)


def _softmax_backward_fake(dy, y):
    _softmax_mod.check_softmax_backward_args("softmax_backward", dy, y)
    return torch.empty_like(y, memory_format=torch.contiguous_format)


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return EAGER["add"](x, y)


def _add_fake(x, y):
    elementwise.check_add_args("add", x, y)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _add_setup(ctx, inputs, output):
    x, y = inputs
    ctx.y_shape = tuple(y.shape)
    ctx.broadcast = tuple(y.shape) != tuple(x.shape)


def _add_bwd(ctx, dy):
    dx = dy if _needs(ctx, 0) else None
    if not _needs(ctx, 1):
        return dx, None
    dyy = _call("column_sum", dy).reshape(ctx.y_shape) if ctx.broadcast else dy
    return dx, dyy


def _column_sum(x: torch.Tensor) -> torch.Tensor:
    return _reduce.column_sum(x)


def _column_sum_fake(x):
    _reduce.check_column_sum_args("column_sum", x)
    return x.new_empty(x.shape[-1:])


def _row_reduce(kind: str):
    def run(x: torch.Tensor) -> torch.Tensor:
        return EAGER[f"row_{kind}"](x)

    return run


def _row_fake(kind: str):
    def fake(x):
        _reduce.check_row_reduce_args(f"row_{kind}", kind, x)
        return x.new_empty(x.shape[:-1])

    return fake


def _row_sum_setup(ctx, inputs, output):
    ctx.shape = tuple(inputs[0].shape)


def _row_sum_bwd(ctx, dy):
    return dy.unsqueeze(-1).expand(ctx.shape)


def _transpose(x: torch.Tensor) -> torch.Tensor:
    return EAGER["transpose"](x)


def _transpose_fake(x):
    _transpose_mod.check_transpose_args("transpose", x)
    return x.new_empty((x.shape[1], x.shape[0]))


def _transpose_bwd(ctx, dy):
    return _call("transpose", dy)


# ---------------------------------------------------------------------------------------
# GEMM.

def _matmul(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], activation: str) -> torch.Tensor:
    return EAGER["matmul"](a, b, bias, activation)


def _matmul_fake(a, b, bias, activation):
    _gemm.check_matmul_args("matmul", a, b, bias, activation)
    return a.new_empty((a.shape[0], b.shape[1]))


def _matmul_setup(ctx, inputs, output):
    a, b, bias, activation = inputs
    ctx.activation = activation
    ctx.has_bias = bias is not None
    ctx.save_for_backward(a, b, bias, output)


def _matmul_bwd(ctx, dc):
    a, b, bias, c = ctx.saved_tensors
    needs = [_needs(ctx, 0), _needs(ctx, 1), ctx.has_bias and _needs(ctx, 2)]
    grads = _call("matmul_backward", dc, a, b, bias, ctx.activation, c, needs)
    return tuple(g if need else None for g, need in zip(grads, needs)) + (None,)


# An op returns tensors, never None: a gradient that was not asked for is an empty tensor.
def _matmul_backward(dc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor],
                     activation: str, c: torch.Tensor,
                     needs: list[bool]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = _gemm_bwd.matmul_backward(dc, a, b, bias is not None, activation=activation, c=c, bias=bias,
                                  needs=tuple(needs))
    return tuple(a.new_empty(0) if g is None else g for g in grads)


def _matmul_backward_fake(dc, a, b, bias, activation, c, needs):
    _gemm_bwd.check_matmul_backward_args("matmul_backward", dc, a, b, bias is not None, activation, c, bias,
                                     tuple(needs))
    like = (a, b, bias)
    return tuple(torch.empty_like(like[i]) if needs[i] and like[i] is not None else a.new_empty(0)
                 for i in range(3))


def _matmul_tuned(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return EAGER["matmul_tuned"](a, b)


def _matmul_tuned_fake(a, b):
    _gemm.check_matmul_tuned_args("matmul_tuned", a, b)
    return a.new_empty((a.shape[0], b.shape[1]))


# ---------------------------------------------------------------------------------------
# Attention.

def _flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, window: Optional[int],
                     layout: str, sm_scale: Optional[float]) -> tuple[torch.Tensor, torch.Tensor]:
    return EAGER["flash_attention"](q, k, v, causal=causal, window=window, layout=layout, sm_scale=sm_scale,
                               return_lse=True)



def _flash_attention_setup(ctx, inputs, output):
    q, k, v, causal, window, layout, sm_scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.args = (causal, window, layout, sm_scale)


def _flash_attention_bwd(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    causal, window, layout, sm_scale = ctx.args
    dq, dk, dv = _call("flash_attention_backward", dout, q, k, v, out, lse, dlse, causal, window, layout, sm_scale)
    return dq, dk, dv, None, None, None, None


def _flash_attention_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              out: torch.Tensor, lse: torch.Tensor, dlse: Optional[torch.Tensor], causal: bool,
                              window: Optional[int], layout: str,
                              sm_scale: Optional[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from .flash_attention_bwd import flash_attention_backward

    return flash_attention_backward(dout, q, k, v, out, lse, causal=causal, window=window, layout=layout,
                                            sm_scale=sm_scale, dlse=dlse)



def _flash_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                  sm_scale: Optional[float], num_split: Optional[int],
                  check_indices: Optional[bool] = None) -> torch.Tensor:
    return EAGER["flash_decode"](q, k_cache, v_cache, cache_seqlens, sm_scale=sm_scale, num_split=num_split,
                                 check_indices=check_indices)



def _mla_decode(q: torch.Tensor, kv_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                block_table: Optional[torch.Tensor], sm_scale: Optional[float],
                num_split: Optional[int], check_indices: Optional[bool] = None,
                kv_scale: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    return EAGER["mla_decode"](q, kv_cache, cache_seqlens, block_table=block_table, sm_scale=sm_scale,
                               num_split=num_split, return_lse=True, check_indices=check_indices,
                               kv_scale=kv_scale)



# ---------------------------------------------------------------------------------------
# Registration: (name, implementation, fake, backward, setup_context).

_OPS = [
    ("rms_norm", _rms_norm, _rms_fake("rms_norm"), _rms_backward(False), _rms_setup),
    ("rms_norm_silu", _rms_norm_silu, _rms_fake("rms_norm_silu"), _rms_backward(True), _rms_setup),
    ("rms_norm_backward", _rms_norm_backward, _rms_norm_backward_fake, None, None),
    ("layer_norm", _layer_norm, _layer_norm_fake, _layer_norm_bwd, _layer_norm_setup),
    ("layer_norm_backward", _layer_norm_backward, _layer_norm_backward_fake, None, None),
    ("softmax", _softmax, _softmax_fake, _softmax_bwd, _softmax_setup),
    ("softmax_backward", _softmax_backward, _softmax_backward_fake, None, None),
    ("add", _add, _add_fake, _add_bwd, _add_setup),
    ("column_sum", _column_sum, _column_sum_fake, None, None),
    ("row_sum", _row_reduce("sum"), _row_fake("sum"), _row_sum_bwd, _row_sum_setup),
    ("row_max", _row_reduce("max"), _row_fake("max"), None, None),
    ("row_min", _row_reduce("min"), _row_fake("min"), None, None),
    ("transpose", _transpose, _transpose_fake, _transpose_bwd, lambda ctx, inputs, output: None),
    ("matmul", _matmul, _matmul_fake, _matmul_bwd, _matmul_setup),
    ("matmul_backward", _matmul_backward, _matmul_backward_fake, None, None),
    ("matmul_tuned", _matmul_tuned, _matmul_tuned_fake, None, None),
    ("flash_attention", _flash_attention, _flash_attention_fake, _flash_attention_bwd, _flash_attention_setup),
    ("flash_attention_backward", _flash_attention_backward, _flash_attention_backward_fake, None, None),
    ("flash_decode", _flash_decode, _flash_decode_fake, None, None),
    ("mla_decode", _mla_decode, _mla_decode_fake, None, None),
    *_model_ops.OPS,
    *_quant_ops.OPS,
]

def _function(name, impl, backward, setup):
    """The op's forward and formula as a torch.autograd.Function, for eager calls."""
    def forward(*args):
        return _IMPLS[name](*args)

    def setup_context(ctx, inputs, output):
        setup(ctx, inputs, output)

    def run_backward(ctx, *grads):
        return backward(ctx, *grads)

    return type(f"{name}_function", (torch.autograd.Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
        "backward": staticmethod(run_backward)})


OPS = {}
for _name, _fn, _fake, _bwd, _setup in _OPS:
    OPS[_name] = _define(_name, _fn, _fake, _bwd, _setup)
    _IMPLS[_name] = _fn
    if _bwd is not None:
        _FUNCTIONS[_name] = _function(_name, _fn, _bwd, _setup)
# name -> (backward, setup_context), as registered: the tests trace the formulas with fake
# tensors directly (the autograd engine itself needs a GPU for CUDA tensors).
AUTOGRAD = {name: (bwd, setup) for name, _, _, bwd, setup in _OPS if bwd is not None}

# The ops whose autograd formula exists; the others refuse inputs that require grad.
DIFFERENTIABLE = frozenset(AUTOGRAD)
# The ops a user calls (the others are the backward halves the formulas call, and the
# in-place forms, INPLACE_OPS: op -> the public function that calls it with inplace=True).
FORWARD_OPS = tuple(name for name, *_ in _OPS
                    if not name.endswith("_backward") and name != "column_sum" and name not in INPLACE_OPS)


# ---------------------------------------------------------------------------------------
# The public functions (re-exported by tegula.kernels).

def rms_norm(x, weight, eps: float = 1e-6, out=None):
    """torch.nn.functional.rms_norm(x, (N,), weight, eps) over the last dimension: see
    `tegula.kernels.rmsnorm.rms_norm` for the arguments. Differentiable in x and weight."""
    op = "rms_norm"
    x, weight, eps = _tensor(op, "x", x), _tensor(op, "weight", weight), check_eps(op, eps)
    if out is not None:
        return _with_out(EAGER["rms_norm"], out, x, weight, eps)
    return _call("rms_norm", x, weight, eps)


def rms_norm_silu(x, weight, eps: float = 1e-6, out=None):
    """silu(rms_norm(x, weight, eps)) in one pass; differentiable in x and weight."""
    op = "rms_norm_silu"
    x, weight, eps = _tensor(op, "x", x), _tensor(op, "weight", weight), check_eps(op, eps)
    if out is not None:
        return _with_out(EAGER["rms_norm_silu"], out, x, weight, eps)
    return _call("rms_norm_silu", x, weight, eps)


def layer_norm(x, weight, bias, eps: float = 1e-5, out=None):
    """torch.nn.functional.layer_norm(x, (N,), weight, bias, eps): see
    `tegula.kernels.layernorm.layer_norm`. Differentiable in x, weight and bias."""
    op = "layer_norm"
    x, weight, bias = _tensor(op, "x", x), _tensor(op, "weight", weight), _tensor(op, "bias", bias)
    eps = check_eps(op, eps)
    if out is not None:
        return _with_out(EAGER["layer_norm"], out, x, weight, bias, eps)
    return _call("layer_norm", x, weight, bias, eps)


def _one_tensor(op: str, x, out, differentiable: bool):
    """The public function of an op of one tensor x (and an optional out)."""
    x = _tensor(op, "x", x)
    if not differentiable:
        refuse_grad(op, "x", x)
    if out is not None:
        return _with_out(EAGER[op], out, x)
    return _call(op, x)


def softmax(x, out=None):
    """torch.softmax(x, dim=-1); differentiable."""
    return _one_tensor("softmax", x, out, differentiable=True)


def add(x, y, out=None):
    """x + y, y of x's shape or one row (see `tegula.kernels.elementwise.add`);
    differentiable in both."""
    x, y = _tensor("add", "x", x), _tensor("add", "y", y)
    if out is not None:
        return _with_out(EAGER["add"], out, x, y)
    return _call("add", x, y)


def row_sum(x, out=None):
    """x.sum(-1) in x's dtype; differentiable."""
    return _one_tensor("row_sum", x, out, differentiable=True)


def row_max(x, out=None):
    """x.amax(-1) in x's dtype (no backward)."""
    return _one_tensor("row_max", x, out, differentiable=False)


def row_min(x, out=None):
    """x.amin(-1) in x's dtype (no backward)."""
    return _one_tensor("row_min", x, out, differentiable=False)


def transpose(x, out=None):
    """x.t().contiguous() of a 2-D tensor; differentiable."""
    return _one_tensor("transpose", x, out, differentiable=True)


def matmul(a, b, bias=None, activation: str = "none", *, path: str = "auto"):
    """a @ b [+ bias], then an optional activation: see `tegula.kernels.gemm.matmul`.
    Differentiable in a, b and bias. path="legacy" (comparing the engine's code paths) runs
    the eager entry point directly and has no backward."""
    op = "matmul"
    a, b = _tensor(op, "a", a), _tensor(op, "b", b)
    if bias is not None:
        bias = _tensor(op, "bias", bias)
    if path != "auto":
        return EAGER["matmul"](a, b, bias, activation, path=path)
    if not isinstance(activation, str) or activation not in ("none", "relu", "gelu"):
        raise ValueError(f"{op}: activation must be 'none', 'relu' or 'gelu', got {activation!r}")
    return _call("matmul", a, b, bias, activation)


def matmul_tuned(a, b):
    """a @ b with the tile timed fastest for this shape (no backward)."""
    a, b = _tensor("matmul_tuned", "a", a), _tensor("matmul_tuned", "b", b)
    _refuse_all("matmul_tuned", a=a, b=b)
    return _call("matmul_tuned", a, b)


def _check_window(op, causal, window):
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"{op}: window must be None or a positive int, got {window!r}")


def flash_attention(q, k, v, causal=False, window=None, layout="bshd", sm_scale=None, return_lse=False, **config):
    """softmax(q kᵀ · sm_scale + mask) v: see `tegula.kernels.flash_attention.flash_attention`
    for the arguments. Differentiable in q, k and v (the log-sum-exp too, when returned and
    used). Tile overrides in `config` (tuning) run the eager entry point directly, without a
    backward."""
    op = "flash_attention"
    q, k, v = _tensor(op, "q", q), _tensor(op, "k", k), _tensor(op, "v", v)
    if config:
        return EAGER["flash_attention"](q, k, v, causal, window, layout, sm_scale, return_lse, **config)
    check_flag(op, "causal", causal)
    check_flag(op, "return_lse", return_lse)
    _check_window(op, causal, window)
    if not isinstance(layout, str) or layout not in _fa.LAYOUTS:
        raise ValueError(f"{op}: layout must be one of {_fa.LAYOUTS}, got {layout!r}")
    check_sm_scale(op, sm_scale)
    out, lse = _call("flash_attention", q, k, v, causal, window, layout, None if sm_scale is None else float(sm_scale))
    return (out, lse) if return_lse else out


def flash_decode(q, k_cache, v_cache, cache_seqlens, sm_scale=None, num_split=None, *, check_indices=None,
                 **config):
    """One query token per sequence over a KV cache: see
    `tegula.kernels.flash_decoding.flash_decode` (no backward). check_indices: see
    kernels/_index_checks.py."""
    op = "flash_decode"
    q, k_cache, v_cache = _tensor(op, "q", q), _tensor(op, "k_cache", k_cache), _tensor(op, "v_cache", v_cache)
    cache_seqlens = _tensor(op, "cache_seqlens", cache_seqlens)
    _refuse_all(op, q=q, k_cache=k_cache, v_cache=v_cache)
    index_checks.check_switch(op, check_indices)
    if config:
        return EAGER["flash_decode"](q, k_cache, v_cache, cache_seqlens, sm_scale, num_split,
                                     check_indices=check_indices, **config)
    check_sm_scale(op, sm_scale)
    check_num_split(op, num_split)
    return _call("flash_decode", q, k_cache, v_cache, cache_seqlens, None if sm_scale is None else float(sm_scale),
                 num_split, check_indices)


def mla_decode(q, kv_cache, cache_seqlens, block_table=None, sm_scale=None, num_split=None, return_lse=False,
               check_indices=None, kv_scale=None):
    """One decode step of multi-head latent attention: see `tegula.kernels.mla_decode.mla_decode`
    (no backward; kv_scale: the float8_e4m3fn cache's scale). check_indices: see
    kernels/_index_checks.py."""
    op = "mla_decode"
    q, kv_cache = _tensor(op, "q", q), _tensor(op, "kv_cache", kv_cache)
    cache_seqlens = _tensor(op, "cache_seqlens", cache_seqlens)
    if block_table is not None:
        block_table = _tensor(op, "block_table", block_table)
    _refuse_all(op, q=q, kv_cache=kv_cache)
    check_flag(op, "return_lse", return_lse)
    index_checks.check_switch(op, check_indices)
    check_sm_scale(op, sm_scale)
    check_num_split(op, num_split)
    check_kv_scale(op, kv_scale, kv_cache.dtype == torch.float8_e4m3fn)
    out, lse = _call("mla_decode", q, kv_cache, cache_seqlens, block_table,
                     None if sm_scale is None else float(sm_scale), num_split, check_indices,
                     None if kv_scale is None else float(kv_scale))
    return (out, lse) if return_lse else out


def _publish() -> None:
    """Each kernel module's public function becomes the one above (or _model_ops's), so
    `tegula.kernels.rmsnorm.rms_norm`, `tegula.kernels.flash_attention.flash_attention` and
    `tegula.kernels.rms_norm` are one function, the operator's, wrapped in its entry plans
    (`_calls.planned`: eager calls of a signature seen before replay what it recorded). The
    eager entry points stay reachable as `EAGER[name]`."""
    here = globals()
    for module, names in _PUBLIC.items():
        for name in names:
            here[name] = _calls.planned(here[name])
            setattr(module, name, here[name])
            for owner in (_model_ops, _quant_ops):
                if getattr(owner, name, None) is getattr(here[name], "__wrapped__", None):
                    setattr(owner, name, here[name])


_publish()
