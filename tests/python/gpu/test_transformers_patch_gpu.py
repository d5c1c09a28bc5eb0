"""tegula.integrations.transformers on the GPU: a tiny Llama / Mistral / Qwen2 with random
weights, patched onto Tegula's kernels, gives eager transformers' logits at prefill and at
every decode step (over a KVCache, through flash_decode), with each GEMM policy."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

import tegula.integrations.transformers as tt  # noqa: E402

pytestmark = pytest.mark.gpu

FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
}
# head_dim 64; intermediate 344 is not a multiple of the GEMM tiles (ragged N).
SMALL = dict(vocab_size=512, hidden_size=256, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)
RTOL = 2e-2   # max |patched - eager| / max |eager|, as the model command checks


def _pair(family, dtype):
    config_cls, model_cls = FAMILIES[family]
    config = config_cls(**SMALL)
    torch.manual_seed(0)
    with torch.device("cuda"):
        ref = model_cls(config).to(dtype).eval()
        pat = model_cls(config).to(dtype).eval()
    pat.load_state_dict(ref.state_dict())
    return ref, pat


def _rel(a, b):
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / a.abs().max()).item()


def _compare(ref, pat, batch, prompt, steps, gemm):
    """Relative logit differences at prefill and at each decode step (fed eager's tokens)."""
    report = tt.apply(pat, gemm=gemm)
    gen = torch.Generator(device="cuda").manual_seed(batch * 100 + prompt)
    ids = torch.randint(0, SMALL["vocab_size"], (batch, prompt), device="cuda", generator=gen)
    diffs = []
    with torch.no_grad():
        out_r = ref(ids, use_cache=True)
        cache = tt.KVCache(pat, batch, prompt + steps)
        out_p = pat(ids, past_key_values=cache, use_cache=True)
        diffs.append(_rel(out_r.logits, out_p.logits))
        pkv, tok = out_r.past_key_values, out_r.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(steps):
            lr = ref(tok, past_key_values=pkv, use_cache=True).logits
            lp = pat(tok, past_key_values=cache, use_cache=True).logits
            diffs.append(_rel(lr, lp))
            tok = lr[:, -1].argmax(-1, keepdim=True)
    return report, diffs


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_patched_logits_match_eager(family, dtype):
    ref, pat = _pair(family, dtype)
    report, diffs = _compare(ref, pat, batch=3, prompt=37, steps=6, gemm="auto")
    assert dict(report) == {"rms_norm": 5, "rope": 2, "attention": 2, "mlp": 2}
    assert max(diffs) < RTOL, diffs
    assert report.fallbacks == {"attention_mask": 0, "dynamic_cache_decode": 0}


@pytest.mark.parametrize("gemm", ["tegula", "torch"])
def test_gemm_policies(gemm):
    ref, pat = _pair("llama", torch.bfloat16)
    report, diffs = _compare(ref, pat, batch=2, prompt=80, steps=3, gemm=gemm)
    assert max(diffs) < RTOL, diffs
    assert ("Tegula for every" in report.gemm) == (gemm == "tegula")


def test_padding_falls_back_and_matches():
    ref, pat = _pair("llama", torch.float16)
    report = tt.apply(pat)
    ids = torch.randint(0, SMALL["vocab_size"], (2, 24), device="cuda")
    mask = torch.ones(2, 24, dtype=torch.long, device="cuda")
    mask[0, :5] = 0
    with torch.no_grad():
        lr, lp = ref(ids, attention_mask=mask).logits, pat(ids, attention_mask=mask).logits
    assert _rel(lr[1], lp[1]) < RTOL and _rel(lr[0, 5:], lp[0, 5:]) < RTOL
    assert report.fallbacks["attention_mask"] == 2


def test_graph_decoder_replays_the_patched_steps():
    """Decode steps replayed from a CUDA graph give the logits of the same steps launched
    one by one (the same kernels, up to cuBLAS's choices inside a capture), stay within RTOL of eager, and a step taken outside
    the decoder (positions resynchronised) does not derail it."""
    ref, pat = _pair("llama", torch.bfloat16)
    report = tt.apply(pat)
    batch, prompt, steps = 3, 29, 6
    ids = torch.randint(0, SMALL["vocab_size"], (batch, prompt), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(5))
    with torch.no_grad():
        out_r = ref(ids, use_cache=True)
        plain = tt.KVCache(pat, batch, prompt + steps + 1)
        graphed = tt.KVCache(pat, batch, prompt + steps + 1)
        pat(ids, past_key_values=plain, use_cache=True)
        pat(ids, past_key_values=graphed, use_cache=True)
        decoder = tt.GraphDecoder(pat, graphed)
        pkv, tok = out_r.past_key_values, out_r.logits[:, -1].argmax(-1, keepdim=True)
        diffs, eager_diffs = [], []
        for step in range(steps):
            lr = ref(tok, past_key_values=pkv, use_cache=True).logits[:, -1]
            lp = pat(tok, past_key_values=plain, use_cache=True).logits[:, -1]
            if step == 3:   # one step outside the decoder
                lg = pat(tok, past_key_values=graphed, use_cache=True).logits[:, -1]
            else:
                lg = decoder.step(tok).clone()
            diffs.append(_rel(lp, lg))
            eager_diffs.append(_rel(lr, lg))
            tok = lr.argmax(-1, keepdim=True)
    assert decoder.graph is not None
    assert graphed.get_seq_length() == plain.get_seq_length() == prompt + steps
    assert max(diffs) < 1e-3, diffs      # the same kernels: equal up to library algorithm choices
    assert max(eager_diffs) < RTOL, eager_diffs
    assert report.fallbacks == {"attention_mask": 0, "dynamic_cache_decode": 0}
    with pytest.raises(ValueError, match="exceed the cache's max_length"):
        decoder.step(tok)
        decoder.step(tok)


def test_graph_decoder_refusals():
    ref, pat = _pair("llama", torch.float16)
    cache = tt.KVCache(ref, 1, 8)
    with pytest.raises(ValueError, match="not patched"):
        tt.GraphDecoder(ref, cache)
    tt.apply(pat)
    with pytest.raises(ValueError, match="tegula KVCache"):
        tt.GraphDecoder(pat, object())
