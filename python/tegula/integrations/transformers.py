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
    rotary        tegula.kernels.rope on q and k together, in place, from a cos/sin cache
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

`ops="torch"` patches the same structure with torch implementations of every op (the
reference semantics of each kernel call), which is what the CPU tests run and what to
compare with when a patched model disagrees with the original: the two differ only in the
kernels.
"""
from __future__ import annotations

import sys
import time
import types
from typing import Optional

import torch
import torch.nn.functional as F

__all__ = ["apply", "KVCache", "GraphDecoder", "PatchReport", "OpTimer", "OP_CLASSES", "GEMM_POLICIES"]

GEMM_POLICIES = ("auto", "tegula", "torch")
OP_CLASSES = ("GEMM", "attention", "norm", "RoPE", "MLP activation", "other")

# gemm="auto" takes Tegula's GEMM only where it measured faster than cuBLAS on the
# projections of a Llama-3-8B layer (benchmarks/bench_model_gemm.py, H100, bf16): the
# gate/up product with the SwiGLU epilogue fused, for at most this many rows (decode:
# 1.04-1.12x cuBLAS followed by torch's silu * up). The plain projections measured
# 0.73-0.98x cuBLAS at 8-64 rows and 0.86-0.94x at 8192, so "auto" leaves them to cuBLAS;
# prefill's gate/up is cuBLAS's product of the concatenated weight and the swiglu kernel.
AUTO_TEGULA_MAX_ROWS = 64


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import cache_utils
    except ImportError as e:  # pragma: no cover - exercised where transformers is absent
        raise ImportError("tegula.integrations.transformers needs the `transformers` package: "
                          "pip install 'tegula[transformers]'") from e
    return cache_utils


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


# --- timing per op class -------------------------------------------------------------

class OpTimer:
    """Time per op class, from the GPU's own record of its kernels.

    `scope(label)` (or `push(label)` / `pop()`) brackets the work of one op class. Scopes
    nest; work belongs to its innermost scope, so a GEMM inside the MLP counts as GEMM.
    `measure(fn)` runs fn with the scopes on and returns (fn's result, {label: ms}):

    - on a CUDA device, the scopes are profiler ranges (torch.autograd.profiler's
      record_function) and the times are the durations of the kernels, copies and fills
      the GPU ran inside each range, from torch.profiler's CUDA activity record. Time the
      GPU sat idle waiting for the host counts nowhere, so the classes add up to the GPU's
      busy time however slow the instrumented host is. Work outside every scope is "other".
    - on the CPU, each scope's own wall-clock time (its children's excluded).

    Off (the default, outside `measure`) a scope costs one attribute test."""

    def __init__(self, device="cuda"):
        self.enabled = False
        self.cuda = torch.device(device).type == "cuda"
        self._records = []   # CPU: [label, start, end, parent index]
        self._stack = []

    def reset(self):
        self._records.clear()
        self._stack.clear()

    def push(self, label: str):
        if not self.enabled:
            return
        if self.cuda:
            scope = torch.autograd.profiler.record_function(label)
            scope.__enter__()
            self._stack.append(scope)
            return
        parent = self._stack[-1] if self._stack else None
        self._stack.append(len(self._records))
        self._records.append([label, time.perf_counter(), None, parent])

    def pop(self):
        if not self.enabled:
            return
        if self.cuda:
            self._stack.pop().__exit__(None, None, None)
            return
        self._records[self._stack.pop()][2] = time.perf_counter()

    def scope(self, label: str):
        """A context manager bracketing its body in `label` (a shared no-op one when off)."""
        if not self.enabled:
            return _OFF
        return _Scope(self, label)

    def measure(self, fn):
        """(fn(), {label: ms}) with the scopes on (see the class note)."""
        self.reset()
        self.enabled = True
        try:
            if not self.cuda:
                out = fn()
                return out, self._wall_totals()
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                out = fn()
                torch.cuda.synchronize()
            return out, gpu_time_by_range(prof)
        finally:
            self.enabled = False
            self.reset()

    def _wall_totals(self) -> dict:
        inclusive = [(end - start) * 1e3 for _, start, end, _ in self._records]
        own = list(inclusive)
        for i, (_, _, _, parent) in enumerate(self._records):
            if parent is not None:
                own[parent] -= inclusive[i]
        out = {}
        for (label, *_), t in zip(self._records, own):
            out[label] = out.get(label, 0.0) + t
        return out


class _Off:
    """The scope of a timer that is off: nothing to do, and nothing allocated per call
    (the patched ops enter one per op, so it is on the decode step's host path)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _Scope:
    def __init__(self, timer, label):
        self.timer, self.label = timer, label

    def __enter__(self):
        self.timer.push(self.label)

    def __exit__(self, *exc):
        self.timer.pop()
        return False


_OFF = _Off()
_GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_time_by_range(prof) -> dict:
    """{label: ms} from a finished torch.profiler run: each GPU activity (kernel, copy,
    fill) counted in the innermost profiler range around it on the GPU's timeline (the
    trace's gpu_user_annotation spans), "other" outside every range."""
    import json
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    return attribute_gpu_time(events)


def attribute_gpu_time(events) -> dict:
    """The attribution of `gpu_time_by_range` over chrome-trace events (ts and dur in µs):
    a sweep over start times keeping the open ranges on a stack (ranges nest), each piece
    of GPU work going to the range on top that contains it."""
    spans = [(e["ts"], e["ts"] + e.get("dur", 0), e["name"]) for e in events
             if e.get("cat") == "gpu_user_annotation" and e.get("ph") == "X"]
    work = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events
            if e.get("cat") in _GPU_WORK and e.get("ph") == "X"]
    # At one start time: ranges before work, the longer (outer) range first.
    items = sorted([(s, 0, -(t - s), t, name) for s, t, name in spans]
                   + [(s, 1, 0, t, None) for s, t in work])
    open_ranges, totals = [], {}     # open_ranges: (end, name), innermost last
    for start, kind, _, end, name in items:
        while open_ranges and open_ranges[-1][0] <= start:
            open_ranges.pop()
        if kind == 0:
            open_ranges.append((end, name))
            continue
        label = "other"
        for range_end, range_name in reversed(open_ranges):
            if range_end >= end:
                label = range_name
                break
        totals[label] = totals.get(label, 0.0) + (end - start) / 1e3
    return totals


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
        import importlib

        from tegula import kernels as K

        # Modules by import path: tegula.kernels re-exports some functions over their modules' names.
        mod = {n: importlib.import_module("tegula.kernels." + n)
               for n in ("flash_attention", "fused_norm", "rope", "swiglu")}
        self.K, self.fa, self.fused_norm = K, mod["flash_attention"], mod["fused_norm"]
        self.rope_mod, self.swiglu_mod = mod["rope"], mod["swiglu"]
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


# --- the KV cache ------------------------------------------------------------------------

def _cache_layer_class():
    cache_utils = _transformers()

    class KVCacheLayer(cache_utils.CacheLayerMixin):
        """One layer's keys and values, (B, max_length, Hkv, D) each, written in place;
        `length` tokens are valid. `update` takes transformers' (B, Hkv, S, D) states and
        returns (B, Hkv, length, D) views, so an unpatched attention reads it correctly.

        The layers of one cache share two small device tensors: `cursor` (int64 (1,), the
        position the next token is written at) and `seqlens` (int32 (B,), what flash_decode
        reads). A step's writes take their position from `cursor`, the first layer adds the
        step's tokens to `seqlens` and the last to `cursor`: no host value enters the
        device work, so a decode step can be captured in a CUDA graph and replayed
        (`GraphDecoder`). `length` keeps the host's count, for transformers' bookkeeping and
        the max_length check."""

        is_compileable = False
        is_sliding = False
        is_croppable = False

        def __init__(self, batch, max_length, kv_heads, head_dim, dtype, device, shared=None, last=False):
            super().__init__()
            self.keys = torch.zeros(batch, max_length, kv_heads, head_dim, dtype=dtype, device=device)
            self.values = torch.zeros_like(self.keys)
            self.length = 0
            self.max_length = max_length
            self.first = shared is None
            self.last = last
            if shared is None:
                shared = (torch.zeros(1, dtype=torch.int64, device=device),
                          torch.zeros(batch, dtype=torch.int32, device=device))
            self.cursor, self.seqlens = shared
            # Set while GraphDecoder captures a step: transformers builds the causal mask
            # explicitly under stream capture, and for one query over a cache without
            # padding that mask allows every cached key, so the attention may ignore it.
            self.causal_decode = False
            self.is_initialized = True
            self.dtype, self.device = dtype, torch.device(device)

        def lazy_initialization(self, key_states, value_states):
            pass

        def append(self, k, v):
            """k, v (B, S, Hkv, D): stored at [cursor, cursor + S)."""
            B, S = k.shape[:2]
            if B != self.keys.shape[0] or tuple(k.shape[2:]) != tuple(self.keys.shape[2:]):
                raise ValueError(f"KVCache: keys of shape {tuple(k.shape)} do not fit a cache of "
                                 f"{tuple(self.keys.shape)} (batch, max_length, kv heads, head dim)")
            if self.length + S > self.max_length:
                raise ValueError(f"KVCache: {self.length} cached + {S} new tokens exceed max_length "
                                 f"{self.max_length}; make the cache longer")
            index = self.cursor if S == 1 else self.cursor + torch.arange(S, device=self.cursor.device)
            self.keys.index_copy_(1, index, k)
            self.values.index_copy_(1, index, v)
            self.length += S
            if self.first:
                self.seqlens.add_(S)
            if self.last:
                self.cursor.add_(S)

        def update(self, key_states, value_states, *args, **kwargs):
            self.append(key_states.transpose(1, 2), value_states.transpose(1, 2))
            n = self.length
            return self.keys[:, :n].transpose(1, 2), self.values[:, :n].transpose(1, 2)

        def get_mask_sizes(self, query_length: int):
            return self.length + query_length, 0

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return self.max_length

        def reset(self):
            self.length = 0
            if self.first:
                self.seqlens.zero_()
                self.cursor.zero_()

    return KVCacheLayer


def KVCache(model, batch: int, max_length: int, dtype: Optional[torch.dtype] = None, device=None):
    """A transformers `Cache` for `model` whose layers keep keys and values in Tegula's
    (B, max_length, Hkv, D) layout, so the patched attention decodes with flash_decode
    reading them in place. Every sequence of the batch has the same length (no padding)."""
    cache_utils = _transformers()
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") \
        else model.config
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"KVCache: batch must be a positive int, got {batch!r}")
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"KVCache: max_length must be a positive int, got {max_length!r}")
    param = next(model.parameters())
    dtype = dtype or param.dtype
    device = device or param.device
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    layer_cls = _cache_layer_class()
    n = config.num_hidden_layers
    first = layer_cls(batch, max_length, kv_heads, head_dim, dtype, device, last=n == 1)
    layers = [first] + [layer_cls(batch, max_length, kv_heads, head_dim, dtype, device,
                                  shared=(first.cursor, first.seqlens), last=i == n - 1) for i in range(1, n)]
    return cache_utils.Cache(layers=layers)


class GraphDecoder:
    """Decode steps of a patched model replayed from one CUDA graph.

        cache = KVCache(model, batch, max_length)
        logits = model(prompts, past_key_values=cache, use_cache=True).logits   # prefill
        decoder = GraphDecoder(model, cache)
        for _ in range(n):
            token = decoder.step(token)[:, None] ... # step(tokens (B, 1)) -> logits (B, vocab)

    A decode step of a patched model launches a few hundred small kernels; at a batch of a
    few sequences the GPU finishes each before Python has issued the next, so the host sets
    the pace. The first `step` runs one step to compile every kernel, then captures the
    step's launches (the model's forward on static token and position buffers, the cache
    written at its device cursor) in a CUDA graph; every step replays it: one launch for
    the whole forward. The logits returned live in the graph's memory and are overwritten
    by the next step (clone them to keep them).

    Needs a model patched by `apply` (ops="tegula") and its `KVCache`, a CUDA device, and
    every decode step of that cache to go through `step` once the decoder exists."""

    def __init__(self, model, cache):
        if getattr(model, "_tegula_report", None) is None:
            raise ValueError("GraphDecoder: the model is not patched (call tegula.integrations.transformers.apply "
                             "first)")
        layers = getattr(cache, "layers", None)
        if not layers or not all(hasattr(layer, "cursor") for layer in layers):
            raise ValueError("GraphDecoder: cache must be a tegula KVCache")
        if layers[0].keys.device.type != "cuda":
            raise ValueError("GraphDecoder: CUDA graphs need the model and cache on a CUDA device")
        self.model, self.cache, self.layers = model, cache, layers
        batch, device = layers[0].keys.shape[0], layers[0].keys.device
        self.tokens = torch.zeros(batch, 1, dtype=torch.int64, device=device)
        self.positions = torch.zeros(1, 1, dtype=torch.int64, device=device)
        self.graph = None
        self.logits = None
        self._length = None   # the cache length the device buffers stand for

    def _forward(self):
        out = self.model(self.tokens, position_ids=self.positions, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=1)
        self.positions.add_(1)
        return out.logits[:, -1]

    def _set_lengths(self, length: int):
        for layer in self.layers:
            layer.length = length

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """One decode step: tokens (B, 1) (or (B,)) int -> logits (B, vocab)."""
        length = self.layers[0].length
        if length + 1 > self.layers[0].max_length:
            raise ValueError(f"GraphDecoder: {length} cached + 1 new token exceed the cache's max_length "
                             f"{self.layers[0].max_length}")
        self.tokens.copy_(tokens.view(self.tokens.shape))
        if self._length != length:           # a step taken outside the decoder, or the first
            self.positions.fill_(length)
        if self.graph is None:
            self._capture(length)
        self.graph.replay()
        self._set_lengths(length + 1)
        self._length = length + 1
        return self.logits

    def _capture(self, length: int):
        cursor, seqlens = self.layers[0].cursor, self.layers[0].seqlens
        saved = cursor.clone(), seqlens.clone(), self.positions.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(side):   # compiles every kernel; its writes are redone below
            self._forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        for layer in self.layers:
            layer.causal_decode = True
        for restore in range(2):                          # before capture, and after it (capture runs nothing
            cursor.copy_(saved[0])                        # but leaves the host counts advanced)
            seqlens.copy_(saved[1])
            self.positions.copy_(saved[2])
            self._set_lengths(length)
            if restore == 0:
                try:
                    with torch.no_grad(), torch.cuda.graph(graph):
                        self.logits = self._forward()
                finally:
                    for layer in self.layers:
                        layer.causal_decode = False
        self.graph = graph


def _kv_layer(cache, layer_idx):
    layers = getattr(cache, "layers", None)
    if layers is None or layer_idx >= len(layers):
        return None
    layer = layers[layer_idx]
    return layer if hasattr(layer, "append") and hasattr(layer, "seqlens") else None


# --- the patched forwards --------------------------------------------------------------------

def _is_rms_norm(module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight") and \
        hasattr(module, "variance_epsilon")


def _norm_forward(state):
    def forward(self, hidden_states):
        return state.ops.rms_norm(hidden_states, self.weight, self.variance_epsilon)
    return forward


def _attention_forward(state, rope_tables):
    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_values=None,
                **kwargs):
        ops = state.ops
        B, S, _ = hidden_states.shape
        D, Hq, Hk = self.head_dim, self._tegula_heads, self._tegula_kv_heads
        q = ops.linear(hidden_states, self.q_proj.weight, self.q_proj.bias).view(B, S, Hq, D)
        k = ops.linear(hidden_states, self.k_proj.weight, self.k_proj.bias).view(B, S, Hk, D)
        v = ops.linear(hidden_states, self.v_proj.weight, self.v_proj.bias).view(B, S, Hk, D)
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
        out = ops.linear(out.reshape(B, S, Hq * D), self.o_proj.weight, self.o_proj.bias)
        return out, None
    return forward


def _mlp_forward(state):
    def forward(self, x):
        ops = state.ops
        return ops.linear(ops.swiglu_linear(x, self._tegula_gate_up), self.down_proj.weight)
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
        h, hidden = state.ops.add_rms_norm(h, residual, norm.weight, norm.variance_epsilon)
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


def _fuse_gate_up(mlp):
    """One (2I, K) weight holding gate's rows then up's; gate_proj.weight and
    up_proj.weight become views of it (no second copy of the weights)."""
    gate, up = mlp.gate_proj.weight, mlp.up_proj.weight
    fused = torch.cat([gate.detach(), up.detach()], dim=0)
    inter = gate.shape[0]
    mlp.gate_proj.weight = torch.nn.Parameter(fused[:inter], requires_grad=False)
    mlp.up_proj.weight = torch.nn.Parameter(fused[inter:], requires_grad=False)
    return fused


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
    for m in norms:
        m.forward = types.MethodType(_norm_forward(state), m)
    report["rms_norm"] = len(norms)

    head_dim = None
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        head_dim = attn.head_dim
        attn._tegula_heads = attn.q_proj.weight.shape[0] // head_dim
        attn._tegula_kv_heads = attn.k_proj.weight.shape[0] // head_dim
        if rope_tables is None:
            module = sys.modules[type(attn).__module__]
            attn._tegula_apply_rope = module.apply_rotary_pos_emb
        attn.forward = types.MethodType(_attention_forward(state, rope_tables), attn)
        report["attention"] += 1
        report["rope"] += rope_tables is not None
        mlp._tegula_gate_up = _fuse_gate_up(mlp)
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
