"""The model kernels as PyTorch operators: rotary embeddings, SwiGLU (alone and fused into
the gate/up GEMM), residual add + RMSNorm, the grouped GEMM and the mixture-of-experts
routing. kernels/_ops.py registers them beside the others, in the same three layers (the
public function here, `_calls._call`, the module's eager entry point `_calls.EAGER[name]`).
None has a backward: each public function refuses a floating input that requires grad
(with grad recording on) before anything runs.

Two entry points write an input when asked (`inplace=True`); each has a second operator
whose schema names what it writes, so torch.compile's functionalization sees the write:

    rope(q, k, ...)                      tegula::rope   -> (q_out, k_out)
    rope(q, k, ..., inplace=True)        tegula::rope_  writes q and k, returns nothing;
                                                        the function returns (q, k)
    add_rms_norm(x, residual, w, eps)    tegula::add_rms_norm  -> (y, h)
    add_rms_norm(..., inplace=True)      tegula::add_rms_norm_ writes h into residual and
                                                        returns y; the function (y, residual)

An op returns tensors, never None: rope's q or k given as None comes back from the op as
an empty tensor, which the public function turns into None again. moe_align_block_size's
op returns its five tensors, which the function wraps in a MoeAlignment. `out=` (swiglu,
add_rms_norm) runs the eager entry point, which writes out itself; traced, it is the op
and a copy into out (as `_calls._with_out`). The ops that take index tensors take
`check_indices` too (kernels/_index_checks.py): None lets TEGULA_CHECK_INDICES decide.

The fakes run the entry points' argument checks, then give each output the shape, dtype and strides the eager entry point gives it;
rope's outputs follow the layout the kernel reads in place (q itself, or the transposed
view of a contiguous tensor of the other layout), on the assumption that storage starts on
a 16-byte boundary, as torch's allocator gives it.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _index_checks as index_checks
from . import _calls
from . import expert_gemm as _grouped, fused_norm as _fused_norm, gated_mlp as _swiglu, moe as _moe
from . import rotary_embedding as _rope
from ._attention import check_flag
from ._common import VECTOR_BYTES, check_eps, check_out, describe

# The modules' public functions that become the operators' callers (see _ops._publish).
PUBLIC = {
    _rope: ("rope",), _swiglu: ("swiglu", "swiglu_linear"), _fused_norm: ("add_rms_norm",),
    _grouped: ("grouped_gemm",), _moe: ("moe_align_block_size", "moe_permute", "moe_combine"),
}
# The ops that write inputs, what they write, and the public function that calls them.
MUTATES = {"rope_": ("q", "k"), "add_rms_norm_": ("residual",)}
INPLACE_OPS = {"rope_": "rope", "add_rms_norm_": "add_rms_norm"}

Tensor = torch.Tensor


def _eager(name: str):
    return _calls.EAGER[name]


# ---------------------------------------------------------------------------------------
# Rotary embedding.

def _rope_impl(q: Optional[Tensor], k: Optional[Tensor], cos: Optional[Tensor], sin: Optional[Tensor],
               positions: Optional[Tensor], interleaved: bool, layout: str, base: float,
               check_indices: Optional[bool] = None) -> tuple[Tensor, Tensor]:
    q_out, k_out = _eager("rope")(q, k, cos, sin, positions, interleaved=interleaved, layout=layout, base=base,
                                  check_indices=check_indices)
    first = q if q is not None else k
    return (first.new_empty(0) if q_out is None else q_out), (first.new_empty(0) if k_out is None else k_out)


def _rope_inplace_impl(q: Optional[Tensor], k: Optional[Tensor], cos: Optional[Tensor], sin: Optional[Tensor],
                       positions: Optional[Tensor], interleaved: bool, layout: str, base: float,
                       check_indices: Optional[bool] = None) -> None:
    _eager("rope")(q, k, cos, sin, positions, interleaved=interleaved, inplace=True, layout=layout, base=base,
                   check_indices=check_indices)


def _reads_in_place(t: Tensor) -> bool:
    """rope's `is_launchable` for a fake tensor: contiguous, and its first element on a
    16-byte boundary of a storage that starts on one."""
    return t.is_contiguous() and t.storage_offset() * t.element_size() % VECTOR_BYTES == 0


def _rotated_like(t: Tensor) -> Tensor:
    """What rope returns for t out of place: a clone's layout when t is empty; else a new
    tensor like the one the kernel reads (t, or t.transpose(1, 2) when that is the
    contiguous one, returned transposed back), else contiguous (t was copied)."""
    if t.numel() == 0 or _reads_in_place(t):
        return torch.empty_like(t)
    swapped = t.transpose(1, 2)
    if _reads_in_place(swapped):
        return torch.empty_like(swapped).transpose(1, 2)
    return torch.empty_like(t, memory_format=torch.contiguous_format)


def _rope_fake(q, k, cos, sin, positions, interleaved, layout, base, check_indices=None):
    _rope.check_rope_args("rope", q, k, cos, sin, positions, interleaved, False, layout, base)
    first = q if q is not None else k
    return tuple(first.new_empty(0) if t is None else _rotated_like(t) for t in (q, k))


def _rope_inplace_fake(q, k, cos, sin, positions, interleaved, layout, base, check_indices=None):
    _rope.check_rope_args("rope", q, k, cos, sin, positions, interleaved, True, layout, base)
    return None


# ---------------------------------------------------------------------------------------
# SwiGLU and the fused norm.

def _swiglu_impl(x: Tensor, up: Optional[Tensor]) -> Tensor:
    return _eager("swiglu")(x, up)


def _swiglu_fake(x, up):
    _swiglu.check_swiglu_args("swiglu", x, up)
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2 if up is None else x.shape[-1]))


def _swiglu_linear_impl(x: Tensor, w_gate: Tensor, w_up: Optional[Tensor]) -> Tensor:
    return _eager("swiglu_linear")(x, w_gate, w_up)


def _swiglu_linear_fake(x, w_gate, w_up):
    _swiglu.check_swiglu_linear_args("swiglu_linear", x, w_gate, w_up)
    return x.new_empty((*x.shape[:-1], w_gate.shape[0] // 2 if w_up is None else w_gate.shape[0]))


def _add_rms_norm_impl(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return _eager("add_rms_norm")(x, residual, weight, eps)


def _add_rms_norm_fake(x, residual, weight, eps):
    _fused_norm.check_add_rms_norm_args("add_rms_norm", x, residual, weight, eps)
    return x.new_empty(x.shape), x.new_empty(x.shape)


def _add_rms_norm_inplace_impl(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> Tensor:
    y, _ = _eager("add_rms_norm")(x, residual, weight, eps, inplace=True)
    return y


def _add_rms_norm_inplace_fake(x, residual, weight, eps):
    _fused_norm.check_add_rms_norm_args("add_rms_norm", x, residual, weight, eps, True)
    return x.new_empty(x.shape)


# ---------------------------------------------------------------------------------------
# Grouped GEMM and MoE routing.

def _grouped_gemm_impl(a: Tensor, w: Tensor, offsets: Tensor, trans_w: bool,
                       check_indices: Optional[bool] = None) -> Tensor:
    return _eager("grouped_gemm")(a, w, offsets, trans_w=trans_w, check_indices=check_indices)


def _grouped_gemm_fake(a, w, offsets, trans_w, check_indices=None):
    _grouped.check_grouped_gemm_args("grouped_gemm", a, w, offsets, trans_w)
    return a.new_empty((a.shape[0], w.shape[1] if trans_w else w.shape[2]))


def _moe_align_impl(topk_ids: Tensor, num_experts: int, block_size: int,
                    check_indices: Optional[bool] = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    return tuple(_eager("moe_align_block_size")(topk_ids, num_experts, block_size, check_indices=check_indices))


def _moe_align_fake(topk_ids, num_experts, block_size, check_indices=None):
    """T k + E (block_size - 1) slots, the blocks of block_size that cover them, the padded
    total, E + 1 offsets, and a position per id: all int32."""
    _moe.check_moe_align_args("moe_align_block_size", topk_ids, num_experts, block_size)
    slots = topk_ids.numel() + num_experts * (block_size - 1)
    ids = dict(dtype=torch.int32)
    return (topk_ids.new_empty((slots,), **ids), topk_ids.new_empty(((slots + block_size - 1) // block_size,), **ids),
            topk_ids.new_empty((1,), **ids), topk_ids.new_empty((num_experts + 1,), **ids),
            topk_ids.new_empty(topk_ids.shape, **ids))


def _moe_permute_impl(x: Tensor, sorted_token_ids: Tensor, top_k: int,
                      check_indices: Optional[bool] = None) -> Tensor:
    return _eager("moe_permute")(x, sorted_token_ids, top_k, check_indices=check_indices)


def _moe_permute_fake(x, sorted_token_ids, top_k, check_indices=None):
    _moe.check_moe_permute_args("moe_permute", x, sorted_token_ids, top_k)
    return x.new_empty((sorted_token_ids.shape[0], x.shape[1]))


def _moe_combine_impl(y: Tensor, topk_weights: Tensor, token_positions: Tensor,
                      check_indices: Optional[bool] = None) -> Tensor:
    return _eager("moe_combine")(y, topk_weights, token_positions, check_indices=check_indices)


def _moe_combine_fake(y, topk_weights, token_positions, check_indices=None):
    _moe.check_moe_combine_args("moe_combine", y, topk_weights, token_positions)
    return y.new_empty((topk_weights.shape[0], y.shape[1]))


# (name, implementation, fake, backward, setup_context), as kernels/_ops.py's _OPS.
OPS = [
    ("rope", _rope_impl, _rope_fake, None, None),
    ("rope_", _rope_inplace_impl, _rope_inplace_fake, None, None),
    ("swiglu", _swiglu_impl, _swiglu_fake, None, None),
    ("swiglu_linear", _swiglu_linear_impl, _swiglu_linear_fake, None, None),
    ("add_rms_norm", _add_rms_norm_impl, _add_rms_norm_fake, None, None),
    ("add_rms_norm_", _add_rms_norm_inplace_impl, _add_rms_norm_inplace_fake, None, None),
    ("grouped_gemm", _grouped_gemm_impl, _grouped_gemm_fake, None, None),
    ("moe_align_block_size", _moe_align_impl, _moe_align_fake, None, None),
    ("moe_permute", _moe_permute_impl, _moe_permute_fake, None, None),
    ("moe_combine", _moe_combine_impl, _moe_combine_fake, None, None),
]


# ---------------------------------------------------------------------------------------
# The public functions (re-exported by tegula.kernels).

def _optional(op: str, name: str, value):
    """None, or `_calls._tensor`'s tensor for value."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor) and not (hasattr(value, "__dlpack__")
                                                    or hasattr(value, "__cuda_array_interface__")):
        raise TypeError(f"{op}: {name} must be None or a torch.Tensor (or an array exposing __dlpack__ or "
                        f"__cuda_array_interface__), got {describe(value)}")
    return _calls._tensor(op, name, value)


def rope(q, k, cos=None, sin=None, positions=None, *, interleaved: bool = False, inplace: bool = False,
         layout: str = "bshd", base: float = 10000.0, check_indices: Optional[bool] = None):
    """Rotary position embedding of q and k in one launch: (q_out, k_out), or with
    inplace=True q and k rotated in place and returned. See `rope` in
    kernels/rotary_embedding.py for the arguments, and kernels/_index_checks.py for
    check_indices. No backward."""
    op = "rope"
    if not isinstance(layout, str) or layout not in _rope.LAYOUTS:
        raise ValueError(f"{op}: layout must be one of {_rope.LAYOUTS}, got {layout!r}")
    check_flag(op, "interleaved", interleaved)
    check_flag(op, "inplace", inplace)
    if q is None and k is None:
        raise TypeError(f"{op}: q and k are both None; pass at least one tensor to rotate")
    q = None if q is None else _calls._tensor(op, "q", q)
    k = None if k is None else _calls._tensor(op, "k", k)
    cos, sin, positions = (_optional(op, "cos", cos), _optional(op, "sin", sin),
                           _optional(op, "positions", positions))
    _calls._refuse_all(op, q=q, k=k, cos=cos, sin=sin)
    _rope._check_base(op, base)
    index_checks.check_switch(op, check_indices)
    args = (q, k, cos, sin, positions, interleaved, layout, float(base), check_indices)
    if inplace:
        _calls._call("rope_", *args)
        return q, k
    q_out, k_out = _calls._call("rope", *args)
    return (None if q is None else q_out), (None if k is None else k_out)


def swiglu(x, up=None, out=None):
    """silu(gate) * up: x (..., 2I) holding gate then up, or x the gate and up of its
    shape. See the module `tegula.kernels.gated_mlp`. No backward."""
    op = "swiglu"
    x, up = _calls._tensor(op, "x", x), _optional(op, "up", up)
    _calls._refuse_all(op, x=x, up=up)
    if out is not None:
        return _calls._with_out(_eager("swiglu"), out, x, up)
    return _calls._call("swiglu", x, up)


def swiglu_linear(x, w_gate, w_up=None):
    """silu(x @ w_gateᵀ) * (x @ w_upᵀ) in one GEMM kernel; w_gate alone (2I, K) holds the
    gate rows, then the up rows. See the module `tegula.kernels.gated_mlp`. No backward."""
    op = "swiglu_linear"
    x, w_gate, w_up = _calls._tensor(op, "x", x), _calls._tensor(op, "w_gate", w_gate), _optional(op, "w_up", w_up)
    _calls._refuse_all(op, x=x, w_gate=w_gate, w_up=w_up)
    return _calls._call("swiglu_linear", x, w_gate, w_up)


def add_rms_norm(x, residual, weight, eps: float = 1e-6, inplace: bool = False, out=None):
    """(y, h): h = x + residual, y = rms_norm(h, weight, eps), in one pass; with
    inplace=True h is written into residual and the h returned is residual. See
    `tegula.kernels.fused_norm.add_rms_norm`. No backward."""
    op = "add_rms_norm"
    x, residual, weight = _calls._tensor(op, "x", x), _calls._tensor(op, "residual", residual), \
        _calls._tensor(op, "weight", weight)
    eps = check_eps(op, eps)
    check_flag(op, "inplace", inplace)
    _calls._refuse_all(op, x=x, residual=residual, weight=weight)
    if out is not None and _calls._eager((x, residual, weight, out)):
        return _eager("add_rms_norm")(x, residual, weight, eps, inplace, out=out)
    if inplace:
        y, h = _calls._call("add_rms_norm_", x, residual, weight, eps), residual
    else:
        y, h = _calls._call("add_rms_norm", x, residual, weight, eps)
    if out is None:
        return y, h
    check_out(op, out, y.shape, y)
    return out.copy_(y), h


def grouped_gemm(a, w, offsets, *, trans_w: bool = False, check_indices: Optional[bool] = None):
    """c (M, N) with c[offsets[e]:offsets[e+1]] = a[offsets[e]:offsets[e+1]] @ w[e] for
    every expert e, in one launch. See `tegula.kernels.expert_gemm`, and
    kernels/_index_checks.py for check_indices. No backward."""
    op = "grouped_gemm"
    a, w, offsets = _calls._tensor(op, "a", a), _calls._tensor(op, "w", w), _calls._tensor(op, "offsets", offsets)
    check_flag(op, "trans_w", trans_w)
    index_checks.check_switch(op, check_indices)
    _calls._refuse_all(op, a=a, w=w)
    return _calls._call("grouped_gemm", a, w, offsets, trans_w, check_indices)


def moe_align_block_size(topk_ids, num_experts: int, block_size: int, check_indices: Optional[bool] = None):
    """The routed (token, slot) pairs sorted by expert, each expert padded to a multiple of
    block_size: a MoeAlignment. See `tegula.kernels.moe.moe_align_block_size`, and
    kernels/_index_checks.py for check_indices."""
    op = "moe_align_block_size"
    topk_ids = _calls._tensor(op, "topk_ids", topk_ids)
    # A size torch.compile traces symbolically (topk_ids.shape[1]) is checked by the eager
    # entry point, on the value it gets (moe._check_int).
    _moe._check_int(op, "num_experts", num_experts, 1, _moe.MAX_EXPERTS, "the experts ids may name")
    _moe._check_int(op, "block_size", block_size, 1, 1024, "the row tile of the expert GEMMs")
    index_checks.check_switch(op, check_indices)
    return _moe.MoeAlignment(*_calls._call("moe_align_block_size", topk_ids, num_experts, block_size, check_indices))


def moe_permute(x, sorted_token_ids, top_k: int, check_indices: Optional[bool] = None):
    """Rows of x in the experts' order: row r is x[sorted_token_ids[r] // top_k], zeros for
    padding. See `tegula.kernels.moe.moe_permute`, and kernels/_index_checks.py for
    check_indices. No backward."""
    op = "moe_permute"
    x, sorted_token_ids = _calls._tensor(op, "x", x), _calls._tensor(op, "sorted_token_ids", sorted_token_ids)
    _moe._check_int(op, "top_k", top_k, 1, 1 << 16, "the experts a token is routed to")
    index_checks.check_switch(op, check_indices)
    _calls._refuse_all(op, x=x)
    return _calls._call("moe_permute", x, sorted_token_ids, top_k, check_indices)


def moe_combine(y, topk_weights, token_positions, check_indices: Optional[bool] = None):
    """out[t] = sum_j topk_weights[t, j] * y[token_positions[t, j]]: the experts' outputs
    back in token order. See `tegula.kernels.moe.moe_combine`, and
    kernels/_index_checks.py for check_indices. No backward."""
    op = "moe_combine"
    y, topk_weights = _calls._tensor(op, "y", y), _calls._tensor(op, "topk_weights", topk_weights)
    token_positions = _calls._tensor(op, "token_positions", token_positions)
    index_checks.check_switch(op, check_indices)
    _calls._refuse_all(op, y=y, topk_weights=topk_weights)
    return _calls._call("moe_combine", y, topk_weights, token_positions, check_indices)
