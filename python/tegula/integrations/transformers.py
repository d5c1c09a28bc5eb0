"""Tegula's kernels inside a Hugging Face `transformers` Llama-family model.

    import tegula.integrations.transformers as tt
    report = tt.apply(model)      # {"rms_norm": 65, "rope": 32, "attention": 32, "mlp": 32}
    cache = tt.KVCache(model, batch=8, max_length=1152)
    logits = model(input_ids, past_key_values=cache, use_cache=True).logits

`apply` patches, in place, every module of the layout Llama, Mistral and Qwen2 share
(`model.model.layers[i]` with `self_attn` {q,k,v,o}_proj, `mlp` {gate,up,down}_proj and
the `input_layernorm` / `post_attention_layernorm` RMSNorms, and the final `norm`):

    RMSNorm       tegula.kernels.rms_norm; the norm after attention fuses the residual add
                  (`add_rms_norm`: h = x + residual and rms_norm(h) in one pass)
    rotary        tegula.kernels.rotary_embedding on q and k together, in place, from a cos/sin cache
                  built once from the model's own `rotary_emb.inv_freq` and
                  `attention_scaling` (so Llama-3's scaled frequencies are kept)
    attention     prefill: tegula.kernels.flash_attention (causal, GQA, read in the
                  projections' (B, S, H, D) layout); decode: flash_decode over the KV cache
    MLP           gate and up as one product with the SwiGLU epilogue fused
                  (`swiglu_linear`) where Tegula's GEMM is the faster (decode), else one
                  cuBLAS product of the concatenated [gate; up] weight and the `swiglu`
                  kernel; down_proj as a plain product

and returns a `PatchReport`: the dict of counts, plus `.gemm`, which says which GEMM ran
where (see `gemm=` below).

What runs on Tegula and what does not, so nothing is silently approximated:

- Attention needs the causal mask alone. A batch with padding (an attention_mask with
  zeros) makes the model pass an explicit mask: the patched attention then calls torch's
  scaled_dot_product_attention with that mask (counted in `report.fallbacks`).
- Decode through flash_decode needs the cache to hold keys in Tegula's layout: pass a
  `KVCache` (a transformers `Cache` whose layers keep (B, max_length, Hkv, D) buffers). With
  transformers' own DynamicCache the keys are (B, Hkv, L, D), L growing every step: decode
  then runs through SDPA (prefill still runs flash_attention), also counted in `fallbacks`.
- Rotary types whose frequencies change with the length (`dynamic`, `longrope`) are not
  patched (their count stays out of "rope"; transformers' rotation runs).
- Training: the patched forwards are for inference (the model in eval mode, no grad);
  `apply` refuses a model in training mode.

Tensor parallelism: a model whose attention and MLP were sharded with torch's API
(`torch.distributed.tensor.parallel.parallelize_module`: q/k/v and gate/up
ColwiseParallel, o_proj and down_proj RowwiseParallel, on a 1-D mesh) is patched the same
way; the forwards multiply by each rank's local shards, run attention on the rank's heads
and all-reduce the row-parallel products' partial sums (see _tensor_parallel.py and
docs/multi_gpu.md). A split the forwards cannot follow is refused by name.

`ops="torch"` patches the same structure with torch implementations of every op (the
reference semantics of each kernel call), which is what the CPU tests run and what to
compare with when a patched model disagrees with the original: the two differ only in the
kernels.
"""
from __future__ import annotations

import sys
import types
from typing import Optional

import torch
import torch.nn.functional as F

from . import _tensor_parallel as tp
from ._kv_cache import GraphDecoder, KVCache, _kv_layer, _transformers
from ._timing import OP_CLASSES, OpTimer, attribute_gpu_time, gpu_time_by_range

# The cache and the graph decoder live in _kv_cache.py, the op timer in _timing.py; this
# module is where a user finds them.
__all__ = ["apply", "instrument", "KVCache", "GraphDecoder", "PatchReport", "OpTimer", "OP_CLASSES", "GEMM_POLICIES",
           "attribute_gpu_time", "gpu_time_by_range"]

GEMM_POLICIES = ("auto", "tegula", "torch")

# gemm="auto" takes Tegula's GEMM only where it measured faster than cuBLAS on the
# projections of a Llama-3-8B layer (benchmarks/bench_model_gemm.py, H100, bf16): the
# gate/up product with the SwiGLU epilogue fused, for at most this many rows (decode:
# 1.04-1.12x cuBLAS followed by torch's silu * up). The plain projections measured
# 0.73-0.98x cuBLAS at 8-64 rows and 0.86-0.94x at 8192, so "auto" leaves them to cuBLAS;
# prefill's gate/up is cuBLAS's product of the concatenated weight and the swiglu kernel.
AUTO_TEGULA_MAX_ROWS = 64


class PatchReport(dict):
    """What `apply` replaced: {"rms_norm": n, "rope": n, "attention": n, "mlp": n}, and
    `gemm` (which library ran which products), `ops` ("tegula" or "torch") and
    `fallbacks`, a running count of calls that took torch's path (see the module doc)."""

    def __init__(self, counts, gemm: str, ops: str):
        super().__init__(counts)
        self.gemm = gemm
        self.ops = ops
        self.fallbacks = {"attention_mask": 0, "dynamic_cache_decode": 0}

    def __repr__(self):
        return f"PatchReport({dict(self)}, gemm={self.gemm!r}, ops={self.ops!r}, fallbacks={self.fallbacks})"


# --- the ops, two implementations ------------------------------------------------------

class _TorchOps:
    """Each op the patched model calls, in torch: the reference semantics."""

    name = "torch"

    def __init__(self, timer: OpTimer):
        self.timer = timer

    def linear(self, x, weight, bias=None):
        with self.timer.scope("GEMM"):
            return F.linear(x, weight, bias)

    def rms_norm(self, x, weight, eps):
        with self.timer.scope("norm"):
            return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)

    def all_reduce(self, x, group):
        """A row-parallel product's partial sums, summed over the ranks in place."""
        with self.timer.scope("communication"):
            return tp.all_reduce(x, group)

    def add_rms_norm(self, x, residual, weight, eps):
        with self.timer.scope("norm"):
            h = x + residual
            return F.rms_norm(h.float(), (h.shape[-1],), weight.float(), eps).to(x.dtype), h

    def rope(self, q, k, cos, sin, positions):
        """q (B, S, Hq, D), k (B, S, Hk, D) rotated in place (half-split form); cos/sin
        (P, D/2) float32; positions (S,) or (B, S)."""
        with self.timer.scope("RoPE"):
            c, s = cos[positions], sin[positions]                   # (..., S, D/2)
            if c.dim() == 2:
                c, s = c[None], s[None]
            c, s = c[:, :, None, :], s[:, :, None, :]
            for t in (q, k):
                half = t.shape[-1] // 2
                x1, x2 = t[..., :half].float(), t[..., half:].float()
                r1 = x1 * c - x2 * s
                r2 = x2 * c + x1 * s
                t.copy_(torch.cat((r1, r2), dim=-1).to(t.dtype))
            return q, k

    def attention(self, q, k, v, scale):
        """Causal attention, q (B, Sq, H, D), k/v (B, Skv, Hk, D): the last query sees
        the last key."""
        with self.timer.scope("attention"):
            return _sdpa_bshd(q, k, v, scale, None)

    def decode(self, q, k_cache, v_cache, seqlens, length, scale):
        """One query per sequence, q (B, 1, H, D), over the first `length` cached keys."""
        with self.timer.scope("attention"):
            return _sdpa_bshd(q, k_cache[:, :length], v_cache[:, :length], scale, None)

    def swiglu_linear(self, x, w_gate_up):
        with self.timer.scope("GEMM"):
            h = F.linear(x, w_gate_up)
        return self.swiglu(h)

    def swiglu(self, h):
        with self.timer.scope("MLP activation"):
            inter = h.shape[-1] // 2
            return (F.silu(h[..., :inter].float()) * h[..., inter:].float()).to(h.dtype)


def _sdpa_bshd(q, k, v, scale, mask):
    """torch's attention on (B, S, H, D) tensors: causal (aligned at the end) without a
    mask, else the given additive/boolean mask; GQA by repeating the key heads."""
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    group = qh.shape[1] // kh.shape[1]
    if group > 1:
        kh, vh = kh.repeat_interleave(group, dim=1), vh.repeat_interleave(group, dim=1)
    if mask is None:
        sq, skv = qh.shape[2], kh.shape[2]
        allowed = torch.ones(sq, skv, dtype=torch.bool, device=q.device).tril(skv - sq)
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, scale=scale)
    else:
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
    return out.transpose(1, 2)


class _TegulaOps(_TorchOps):
    """The same ops on Tegula's kernels; GEMMs by `policy` (see GEMM_POLICIES)."""

    name = "tegula"

    def __init__(self, timer: OpTimer, policy: str):
        super().__init__(timer)
        from tegula import kernels as K
        from tegula.kernels import flash_attention, fused_norm, gated_mlp, rotary_embedding

        self.K, self.fa, self.fused_norm = K, flash_attention, fused_norm
        self.rope_mod, self.swiglu_mod = rotary_embedding, gated_mlp
        self.policy = policy

    def linear(self, x, weight, bias=None):
        with self.timer.scope("GEMM"):
            if self.policy != "tegula":
                return F.linear(x, weight, bias)
            x2 = x.reshape(-1, x.shape[-1])
            return self.K.matmul(x2, weight.t(), bias).view(*x.shape[:-1], weight.shape[0])

    def rms_norm(self, x, weight, eps):
        with self.timer.scope("norm"):
            return self.K.rms_norm(x, weight, eps)

    def add_rms_norm(self, x, residual, weight, eps):
        with self.timer.scope("norm"):
            return self.fused_norm.add_rms_norm(x, residual, weight, eps)

    def rope(self, q, k, cos, sin, positions):
        with self.timer.scope("RoPE"):
            return self.rope_mod.rope(q, k, cos, sin, positions, inplace=True)

    def attention(self, q, k, v, scale):
        with self.timer.scope("attention"):
            return self.fa.flash_attention(q, k, v, causal=True, layout="bshd", sm_scale=scale)

    def decode(self, q, k_cache, v_cache, seqlens, length, scale):
        with self.timer.scope("attention"):
            B, _, H, D = q.shape
            return self.K.flash_decode(q.view(B, H, D), k_cache, v_cache, seqlens, sm_scale=scale).view(B, 1, H, D)

    def swiglu_linear(self, x, w_gate_up):
        x2 = x.reshape(-1, x.shape[-1])
        inter = w_gate_up.shape[0] // 2
        if self.policy == "tegula" or (self.policy == "auto" and x2.shape[0] <= AUTO_TEGULA_MAX_ROWS):
            with self.timer.scope("GEMM"):   # the product and its SwiGLU epilogue, one kernel
                return self.swiglu_mod.swiglu_linear(x2, w_gate_up).view(*x.shape[:-1], inter)
        with self.timer.scope("GEMM"):
            h = F.linear(x, w_gate_up)
        return self.swiglu(h)

    def swiglu(self, h):
        with self.timer.scope("MLP activation"):
            return self.swiglu_mod.swiglu(h)


# --- the patched forwards --------------------------------------------------------------------

def _is_rms_norm(module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight") and \
        hasattr(module, "variance_epsilon")


def _norm_forward(state):
    def forward(self, hidden_states):
        return state.ops.rms_norm(hidden_states, _weight(self), self.variance_epsilon)
    return forward


def _weight(module):
    """A module's weight as the patched forwards use it: the local value of a replicated
    DTensor (kept by `apply`), else the module's own."""
    return module.__dict__.get("_tegula_weight", module.weight)


def _proj(module):
    """(weight, bias) of an nn.Linear as the patched forwards multiply with: its local
    shard when the model is tensor-parallel (kept by `apply`), else the module's own."""
    lin = module.__dict__.get("_tegula_linear")
    return (module.weight, module.bias) if lin is None else (lin.weight, lin.bias)


def _row_linear(ops, x, module):
    """x @ W.T + b for the layer whose output leaves the block (o_proj, down_proj): when
    it is RowwiseParallel, the local product's partial sums are all-reduced over the mesh
    and the bias is added once, after the reduction."""
    lin = module.__dict__.get("_tegula_linear")
    if lin is None or lin.split != "row":
        return ops.linear(x, *_proj(module))
    y = ops.all_reduce(ops.linear(x, lin.weight), lin.group)
    return y if lin.bias is None else y + lin.bias


def _attention_forward(state, rope_tables):
    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None,
                **kwargs):
        ops = state.ops
        B, S, _ = hidden_states.shape
        D, Hq, Hk = self.head_dim, self._tegula_heads, self._tegula_kv_heads
        q = ops.linear(hidden_states, *_proj(self.q_proj)).view(B, S, Hq, D)
        k = ops.linear(hidden_states, *_proj(self.k_proj)).view(B, S, Hk, D)
        v = ops.linear(hidden_states, *_proj(self.v_proj)).view(B, S, Hk, D)
        if rope_tables is not None:
            positions = kwargs.get("position_ids")
            if positions is None:
                past = past_key_values.get_seq_length(self.layer_idx) if past_key_values is not None else 0
                positions = torch.arange(past, past + S, device=q.device)
            elif positions.dim() == 2 and positions.shape[0] == 1:
                positions = positions[0]
            cos, sin = rope_tables.get(q.device)
            q, k = ops.rope(q, k, cos, sin, positions)
        else:   # transformers' rotation, on its (B, H, S, D) views of the same tensors
            cos, sin = position_embeddings
            qr, kr = self._tegula_apply_rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            q, k = qr.transpose(1, 2), kr.transpose(1, 2)
        scale = self.scaling
        layer = _kv_layer(past_key_values, self.layer_idx) if past_key_values is not None else None
        if layer is not None:
            with state.timer.scope("attention"):   # the cache write, counted with attention as in transformers
                layer.append(k, v)
            keys, values, length = layer.keys, layer.values, layer.length
        elif past_key_values is not None:
            kh, vh = past_key_values.update(k.transpose(1, 2), v.transpose(1, 2), self.layer_idx)
            keys, values, length = kh.transpose(1, 2), vh.transpose(1, 2), kh.shape[2]
        else:
            keys, values, length = k, v, S
        if attention_mask is not None and not (layer is not None and S == 1 and layer.causal_decode):
            state.report.fallbacks["attention_mask"] += 1
            mask = attention_mask[..., :length] if attention_mask.dim() == 4 else attention_mask
            with state.timer.scope("attention"):
                out = _sdpa_bshd(q, keys[:, :length], values[:, :length], scale, mask)
        elif length == S:                          # prefill from an empty cache
            out = ops.attention(q, k, v, scale)
        elif S == 1 and layer is not None:         # decode over Tegula's cache
            out = ops.decode(q, keys, values, layer.seqlens, length, scale)
        elif S == 1:
            state.report.fallbacks["dynamic_cache_decode"] += 1
            with state.timer.scope("attention"):
                out = _sdpa_bshd(q, keys, values, scale, None)
        else:                                      # a continued prefill: the cached keys too
            out = ops.attention(q, keys[:, :length], values[:, :length], scale)
        out = _row_linear(ops, out.reshape(B, S, Hq * D), self.o_proj)
        return out, None
    return forward


def _mlp_forward(state):
    def forward(self, x):
        ops = state.ops
        return _row_linear(ops, ops.swiglu_linear(x, self._tegula_gate_up), self.down_proj)
    return forward


def _layer_forward(state):
    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=False, position_embeddings=None, **kwargs):
        residual = hidden_states
        h = self.input_layernorm(hidden_states)
        h, _ = self.self_attn(hidden_states=h, attention_mask=attention_mask, position_ids=position_ids,
                              past_key_values=past_key_values, use_cache=use_cache,
                              position_embeddings=position_embeddings, **kwargs)
        norm = self.post_attention_layernorm
        h, hidden = state.ops.add_rms_norm(h, residual, _weight(norm), norm.variance_epsilon)
        h = self.mlp(h)
        with state.timer.scope("other"):
            return hidden + h
    return forward


class _RopeTables:
    """cos and sin (max_positions, D/2) float32, from the model's rotary module, built once
    per device on first use."""

    def __init__(self, rotary, max_positions: int):
        self.inv_freq = rotary.inv_freq.detach().float()
        self.scaling = float(getattr(rotary, "attention_scaling", 1.0))
        self.max_positions = max_positions
        self._tables = {}

    def get(self, device):
        key = str(device)
        if key not in self._tables:
            pos = torch.arange(self.max_positions, dtype=torch.float32, device=device)
            freqs = torch.outer(pos, self.inv_freq.to(device))
            self._tables[key] = ((freqs.cos() * self.scaling).contiguous(), (freqs.sin() * self.scaling).contiguous())
        return self._tables[key]


class _State:
    def __init__(self, ops, timer, report):
        self.ops, self.timer, self.report = ops, timer, report


def _find_layers(model):
    """The decoder layers and the final norm of a Llama-family model (or its base model)."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise TypeError(f"apply: {type(model).__name__} has no `.model.layers` / `.layers`: not a "
                        f"Llama-family model (Llama, Mistral, Qwen2 share that layout)")
    for i, layer in enumerate(layers):
        for name in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm"):
            if not hasattr(layer, name):
                raise TypeError(f"apply: layer {i} ({type(layer).__name__}) has no `{name}`: not the "
                                f"Llama-family layout")
        attn, mlp = layer.self_attn, layer.mlp
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if not isinstance(getattr(attn, name, None), torch.nn.Linear):
                raise TypeError(f"apply: layer {i}'s attention has no nn.Linear {name}: not the Llama-family layout")
        for name in ("gate_proj", "up_proj", "down_proj"):
            proj = getattr(mlp, name, None)
            if not isinstance(proj, torch.nn.Linear) or proj.bias is not None:
                raise TypeError(f"apply: layer {i}'s MLP needs an nn.Linear {name} without a bias "
                                f"(the fused gate/up product has no bias)")
        act = getattr(getattr(mlp, "config", None), "hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise TypeError(f"apply: layer {i}'s MLP activation is {act!r}; the patch fuses SiLU only")
    return base, layers


def _fuse_gate_up(mlp, gate: tp.Linear, up: tp.Linear):
    """One (2I, K) weight holding gate's rows then up's (this rank's rows of each when the
    MLP is tensor-parallel); gate_proj.weight and up_proj.weight become views of it (no
    second copy of the weights)."""
    fused, (gate_view, up_view) = tp.fused_gate_up(gate, up, mlp.gate_proj.weight, mlp.up_proj.weight)
    mlp.gate_proj.weight = torch.nn.Parameter(gate_view, requires_grad=False)
    mlp.up_proj.weight = torch.nn.Parameter(up_view, requires_grad=False)
    return fused


def _shard_layer(i, attn, mlp):
    """The tensor-parallel split of layer i's projections, checked (see _tensor_parallel):
    {name: tp.Linear}; modules that are split keep theirs as `_tegula_linear`."""
    names = {"q_proj": attn.q_proj, "k_proj": attn.k_proj, "v_proj": attn.v_proj, "o_proj": attn.o_proj,
             "gate_proj": mlp.gate_proj, "up_proj": mlp.up_proj, "down_proj": mlp.down_proj}
    where = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn"}
    lin = {n: tp.linear(m, f"layer {i}'s {where.get(n, 'mlp')}.{n}") for n, m in names.items()}
    tp.check_pair(f"layer {i}'s attention", {n: lin[n] for n in ("q_proj", "k_proj", "v_proj")},
                  ("o_proj", lin["o_proj"]))
    tp.check_pair(f"layer {i}'s MLP", {n: lin[n] for n in ("gate_proj", "up_proj")}, ("down_proj", lin["down_proj"]))
    for n, m in names.items():
        if lin[n].mesh is not None:
            m._tegula_linear = lin[n]
    return lin


def apply(model, *, gemm: str = "auto", ops: str = "tegula", max_positions: Optional[int] = None,
          timer: Optional[OpTimer] = None) -> PatchReport:
    """Patch `model` (a transformers Llama, Mistral or Qwen2 model, in eval mode; the
    attention projections may have biases, as Qwen2's do, the MLP's may not) in place to run on Tegula's kernels; returns a PatchReport.

    gemm: "auto" (Tegula's GEMM where it measured faster: the fused gate/up + SwiGLU
    product at most AUTO_TEGULA_MAX_ROWS rows, i.e. decode; cuBLAS for the rest), "tegula"
    (every product ours) or "torch" (every product cuBLAS; the SwiGLU still ours). ops: "tegula",
    or "torch" for the same patched structure on torch's ops (the reference semantics).
    max_positions: the rotary table's length (default the config's
    max_position_embeddings). timer: an OpTimer the patched ops report to (enable it to
    time each op class). Applying twice is refused."""
    _transformers()
    if gemm not in GEMM_POLICIES:
        raise ValueError(f"apply: gemm must be one of {GEMM_POLICIES}, got {gemm!r}")
    if ops not in ("tegula", "torch"):
        raise ValueError(f"apply: ops must be 'tegula' or 'torch', got {ops!r}")
    if getattr(model, "_tegula_report", None) is not None:
        raise ValueError("apply: this model is already patched (its report: model._tegula_report)")
    if model.training:
        raise ValueError("apply: the model is in training mode; the patched forwards are for inference "
                         "(call model.eval() first)")
    base, layers = _find_layers(model)
    timer = timer or OpTimer()
    impl = _TegulaOps(timer, gemm) if ops == "tegula" else _TorchOps(timer)
    gemm_text = {"auto": f"Tegula for the gate/up product with its SwiGLU epilogue fused at <= "
                         f"{AUTO_TEGULA_MAX_ROWS} rows (decode), cuBLAS for every other product",
                 "tegula": "Tegula for every product", "torch": "cuBLAS for every product"}[gemm]
    if ops == "torch":
        gemm_text = "cuBLAS for every product (ops='torch')"
    counts = {"rms_norm": 0, "rope": 0, "attention": 0, "mlp": 0}
    report = PatchReport(counts, gemm_text, ops)
    state = _State(impl, timer, report)

    rotary = getattr(base, "rotary_emb", None)
    config = model.config
    rope_type = getattr(rotary, "rope_type", "default") if rotary is not None else None
    rope_tables = None
    if rotary is not None and rope_type in ("default", "llama3", "linear", "yarn"):
        max_positions = max_positions or getattr(config, "max_position_embeddings", None) or 4096
        rope_tables = _RopeTables(rotary, int(max_positions))

    norms = [m for m in model.modules() if _is_rms_norm(m)]
    # The splits of every layer, checked before anything is changed.
    shards = [_shard_layer(i, layer.self_attn, layer.mlp) for i, layer in enumerate(layers)]
    for m in norms:
        if tp.is_dtensor(m.weight):
            m._tegula_weight = tp.local(m.weight, f"{type(m).__name__}.weight")
    for m in norms:
        m.forward = types.MethodType(_norm_forward(state), m)
    report["rms_norm"] = len(norms)

    head_dim = None
    for i, (layer, lin) in enumerate(zip(layers, shards)):
        attn, mlp = layer.self_attn, layer.mlp
        head_dim = attn.head_dim
        q_rows, k_rows = lin["q_proj"].weight.shape[0], lin["k_proj"].weight.shape[0]
        if q_rows % head_dim or k_rows % head_dim or (q_rows // head_dim) % (k_rows // head_dim):
            raise ValueError(f"apply: layer {i}: this rank's q_proj ({q_rows} rows) and k_proj ({k_rows}) do not "
                             f"hold whole heads of {head_dim} in whole query groups; shard by heads")
        attn._tegula_heads = q_rows // head_dim      # this rank's heads when tensor-parallel
        attn._tegula_kv_heads = k_rows // head_dim
        if rope_tables is None:
            module = sys.modules[type(attn).__module__]
            attn._tegula_apply_rope = module.apply_rotary_pos_emb
        attn.forward = types.MethodType(_attention_forward(state, rope_tables), attn)
        report["attention"] += 1
        report["rope"] += rope_tables is not None
        mlp._tegula_gate_up = _fuse_gate_up(mlp, lin["gate_proj"], lin["up_proj"])
        mlp.forward = types.MethodType(_mlp_forward(state), mlp)
        report["mlp"] += 1
        layer.forward = types.MethodType(_layer_forward(state), layer)
    if head_dim is not None and head_dim % 2:
        raise ValueError(f"apply: head_dim {head_dim} is odd; rotary needs pairs")
    # Masks: with "sdpa", transformers passes none where the causal mask alone is meant (no
    # padding), which is what lets the patched attention run Tegula's kernels.
    if getattr(config, "_attn_implementation", "sdpa") != "sdpa":
        model.set_attn_implementation("sdpa")
    model._tegula_report = report
    model._tegula_timer = timer
    return report


def instrument(model, timer: OpTimer):
    """Forward hooks that bracket a model's modules in `timer`'s op classes: nn.Linear as
    GEMM, RMSNorm as norm, the MLP's own work (its Linear children apart: the activation
    and the product) as "MLP activation", the attention module's own work (projections
    and rotary apart: the attention proper and the cache update) as "attention", the
    rotary module and transformers' apply_rotary_pos_emb as RoPE. On a patched model the
    patched ops label themselves inside these brackets, which then catch only what is
    left (lm_head as GEMM, the cache write as attention). Returns a function removing
    the hooks."""
    handles = []

    def bracket(module, label):
        handles.append(module.register_forward_pre_hook(lambda *_: timer.push(label)))
        handles.append(module.register_forward_hook(lambda *_: timer.pop()))

    base, layers = _find_layers(model)
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            bracket(m, "GEMM")
        elif _is_rms_norm(m):
            bracket(m, "norm")
    for layer in layers:
        bracket(layer.mlp, "MLP activation")     # minus its Linear children: silu and the product
        bracket(layer.self_attn, "attention")    # minus projections and rotary: the attention proper
    rotary = getattr(base, "rotary_emb", None)
    if rotary is not None:
        bracket(rotary, "RoPE")
    module = sys.modules[type(layers[0].self_attn).__module__]
    original = module.apply_rotary_pos_emb

    def timed_rope(*args, **kwargs):
        with timer.scope("RoPE"):
            return original(*args, **kwargs)

    module.apply_rotary_pos_emb = timed_rope

    def remove():
        for h in handles:
            h.remove()
        module.apply_rotary_pos_emb = original

    return remove
