"""The KV cache a patched model decodes from (`KVCache`: transformers `Cache` layers in
Tegula's (B, max_length, Hkv, D) layout, written at a device cursor) and `GraphDecoder`,
which replays a decode step from a CUDA graph."""
from __future__ import annotations

import functools
from typing import Optional

import torch


def _transformers():
    try:
        import transformers  # noqa: F401
        from transformers import cache_utils
    except ImportError as e:  # pragma: no cover - exercised where transformers is absent
        raise ImportError("tegula.integrations.transformers needs the `transformers` package: "
                          "pip install 'tegula[transformers]'") from e
    return cache_utils


@functools.lru_cache(maxsize=None)
def _cache_layer_class():
    """The layer class, made once (it subclasses transformers' CacheLayerMixin, which is
    imported only when a cache is first made)."""
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
    reading them in place. Every sequence of the batch has the same length (no padding).
    On a tensor-parallel model, Hkv is this rank's key heads."""
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
    kv_heads = _local_kv_heads(model) or getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    layer_cls = _cache_layer_class()
    n = config.num_hidden_layers
    first = layer_cls(batch, max_length, kv_heads, head_dim, dtype, device, last=n == 1)
    layers = [first] + [layer_cls(batch, max_length, kv_heads, head_dim, dtype, device,
                                  shared=(first.cursor, first.seqlens), last=i == n - 1) for i in range(1, n)]
    return cache_utils.Cache(layers=layers)


def _local_kv_heads(model):
    """This rank's key heads when the model is tensor-parallel (the patched attention's
    count, or the local rows of a sharded k_proj), else None."""
    layers = getattr(getattr(model, "model", model), "layers", None)
    if not layers:
        return None
    attn = getattr(layers[0], "self_attn", None)
    if hasattr(attn, "_tegula_kv_heads"):
        return attn._tegula_kv_heads
    k_proj = getattr(attn, "k_proj", None)
    weight = getattr(k_proj, "weight", None)
    if weight is not None and hasattr(weight, "to_local") and hasattr(attn, "head_dim"):
        return weight.to_local().shape[0] // attn.head_dim
    return None


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
