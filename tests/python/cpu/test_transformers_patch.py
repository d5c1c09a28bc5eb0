"""tegula.integrations.transformers on the CPU: the patch on a meta-device model reports
every module it replaced; the patched structure, run with ops="torch" (the reference
semantics of each kernel call), gives eager's logits at prefill and at every decode step,
for Llama, Mistral and Qwen2; fallbacks and refusals; the `python -m tegula model` command
on a tiny model."""
import types

import pytest
import torch

transformers = pytest.importorskip("transformers")

import tegula.integrations.transformers as tt  # noqa: E402
from tegula.cli import model as model_cli  # noqa: E402

FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
}
TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)


def _pair(family, **overrides):
    """(reference, to-be-patched) models of one family with the same random weights."""
    config_cls, model_cls = FAMILIES[family]
    config = config_cls(**dict(TINY, **overrides))
    torch.manual_seed(0)
    ref = model_cls(config).eval()
    pat = model_cls(config).eval()
    pat.load_state_dict(ref.state_dict())
    return ref, pat


def _rel(a, b):
    return ((a - b).abs().max() / a.abs().max()).item()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_meta_device_patch_reports_every_module(family):
    config_cls, model_cls = FAMILIES[family]
    config = config_cls(**TINY)
    with torch.device("meta"):
        model = model_cls(config).eval()
    report = tt.apply(model)
    layers = config.num_hidden_layers
    assert dict(report) == {"rms_norm": 2 * layers + 1, "rope": layers, "attention": layers, "mlp": layers}
    assert report.ops == "tegula" and "cuBLAS" in report.gemm
    for layer in model.model.layers:
        for module in (layer, layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm):
            assert isinstance(module.forward, types.MethodType)
            assert module.forward.__func__.__module__ == tt.__name__
        # gate and up are views of one fused weight: no second copy of the MLP's weights
        fused = layer.mlp._tegula_gate_up
        assert layer.mlp.gate_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
        assert fused.shape == (2 * config.intermediate_size, config.hidden_size)
    assert model._tegula_report is report


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_patched_structure_matches_eager(family):
    ref, pat = _pair(family)
    report = tt.apply(pat, ops="torch")
    assert report["attention"] == 3
    ids = torch.randint(0, 128, (3, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert _rel(ref(ids).logits, pat(ids).logits) < 1e-5
        out_r = ref(ids, use_cache=True)
        cache = tt.KVCache(pat, 3, 20)
        out_p = pat(ids, past_key_values=cache, use_cache=True)
        assert _rel(out_r.logits, out_p.logits) < 1e-5
        pkv, tok = out_r.past_key_values, out_r.logits[:, -1].argmax(-1, keepdim=True)
        for step in range(5):
            lr = ref(tok, past_key_values=pkv, use_cache=True).logits
            lp = pat(tok, past_key_values=cache, use_cache=True).logits
            assert _rel(lr, lp) < 1e-5, step
            assert cache.get_seq_length() == 12 + step
            tok = lr[:, -1].argmax(-1, keepdim=True)
    assert report.fallbacks == {"attention_mask": 0, "dynamic_cache_decode": 0}


def test_rotation_is_checked():
    """A patched model whose rotary positions are wrong disagrees with eager: the match
    above is not vacuous."""
    ref, pat = _pair("llama")
    tt.apply(pat, ops="torch")
    original = tt._TorchOps.rope
    try:
        tt._TorchOps.rope = lambda self, q, k, cos, sin, positions: original(self, q, k, cos, sin, positions * 2)
        ids = torch.randint(0, 128, (2, 9), generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            assert _rel(ref(ids).logits, pat(ids).logits) > 1e-3
    finally:
        tt._TorchOps.rope = original


def test_padding_and_dynamic_cache_fall_back_to_torch():
    ref, pat = _pair("llama")
    report = tt.apply(pat, ops="torch")
    ids = torch.randint(0, 128, (3, 10), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, :4] = 0
    with torch.no_grad():
        lr, lp = ref(ids, attention_mask=mask).logits, pat(ids, attention_mask=mask).logits
        assert _rel(lr[1:], lp[1:]) < 1e-5 and _rel(lr[0, 4:], lp[0, 4:]) < 1e-5
        assert report.fallbacks["attention_mask"] == 3
        pkv = pat(ids, use_cache=True).past_key_values          # transformers' DynamicCache
        tok = ids[:, -1:]
        lp = pat(tok, past_key_values=pkv, use_cache=True).logits
        lr = ref(tok, past_key_values=ref(ids, use_cache=True).past_key_values, use_cache=True).logits
        assert _rel(lr, lp) < 1e-5
        assert report.fallbacks["dynamic_cache_decode"] == 3


def test_refusals():
    ref, pat = _pair("llama")
    with pytest.raises(ValueError, match="gemm must be one of"):
        tt.apply(pat, gemm="cublas")
    with pytest.raises(ValueError, match="ops must be"):
        tt.apply(pat, ops="numpy")
    pat.train()
    with pytest.raises(ValueError, match="training mode"):
        tt.apply(pat)
    pat.eval()
    tt.apply(pat, ops="torch")
    with pytest.raises(ValueError, match="already patched"):
        tt.apply(pat)
    with pytest.raises(TypeError, match="not a Llama-family model"):
        tt.apply(torch.nn.Linear(4, 4).eval())
    _, biased = _pair("llama", mlp_bias=True)
    with pytest.raises(TypeError, match="without a bias"):
        tt.apply(biased)
    cache = tt.KVCache(ref, 2, 4)
    with torch.no_grad(), pytest.raises(ValueError, match="exceed max_length 4"):
        pat(torch.zeros(2, 5, dtype=torch.long), past_key_values=cache, use_cache=True)
    with pytest.raises(ValueError, match="max_length must be a positive int"):
        tt.KVCache(ref, 2, 0)


def test_op_timer_excludes_children():
    import time

    timer = tt.OpTimer("cpu")

    def work():
        with timer.scope("MLP activation"):
            time.sleep(0.02)
            with timer.scope("GEMM"):
                time.sleep(0.05)
        return 7

    out, totals = timer.measure(work)
    assert out == 7 and not timer.enabled
    assert 45 <= totals["GEMM"] < 200
    assert 15 <= totals["MLP activation"] < 45   # its own 20 ms, not the GEMM's 50
    with timer.scope("GEMM"):                     # off outside measure: nothing recorded
        pass
    assert timer._records == []


def test_gpu_time_goes_to_the_innermost_range():
    """The attribution of kernel time to profiler ranges, on a hand-made trace (µs)."""
    def ev(cat, ts, dur, name="kernel"):
        return {"cat": cat, "ph": "X", "ts": ts, "dur": dur, "name": name}

    events = [ev("gpu_user_annotation", 0, 100, "MLP activation"), ev("gpu_user_annotation", 10, 50, "GEMM"),
              ev("kernel", 10, 30), ev("kernel", 45, 15),          # inside GEMM (ends with it)
              ev("kernel", 70, 20),                                 # MLP's own
              ev("gpu_memcpy", 120, 5),                             # outside every range
              ev("gpu_user_annotation", 200, 10, "norm"), ev("kernel", 200, 10),
              ev("gpu_user_annotation", 210, 40, "RoPE"), ev("gpu_memset", 215, 4),
              ev("cpu_op", 0, 1000)]                                # not GPU work
    totals = tt.attribute_gpu_time(events)
    assert totals == pytest.approx({"GEMM": 0.045, "MLP activation": 0.020, "other": 0.005, "norm": 0.010,
                                    "RoPE": 0.004})


def test_model_command_on_cpu(tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    model_cli.add_arguments(parser)
    png = tmp_path / "ops.png"
    args = parser.parse_args(["--size", "tiny", "--device", "cpu", "--ops", "torch", "--plot", str(png),
                              "--no-progress", "--repeat", "1", "--new-tokens", "4"])
    assert model_cli.run(args) == 0
    out = capsys.readouterr().out
    assert "logits: 5 steps checked" in out and "PASS" in out
    assert "greedy tokens: patched agrees with eager for the first 4 of 4 steps" in out
    assert "decode ms/token" in out and "time per op class" in out
    for cls in tt.OP_CLASSES:
        assert cls in out
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_op_plot_values(tmp_path):
    eager = ({"GEMM": 5.0, "attention": 2.0}, {"GEMM": 1.0, "norm": 0.25})
    patched = ({"GEMM": 4.0, "attention": 1.0}, {"GEMM": 0.5, "norm": 0.1})
    values = model_cli.plot_ops(str(tmp_path / "p.png"), eager, patched, "t")
    assert values[("prefill", "eager", "GEMM")] == 5.0
    assert values[("prefill", "patched", "attention")] == 1.0
    assert values[("decode (per token)", "patched", "norm")] == 0.1
    assert values[("decode (per token)", "eager", "RoPE")] == 0.0


def test_model_command_compiled_baseline_on_cpu(capsys):
    import argparse

    parser = argparse.ArgumentParser()
    model_cli.add_arguments(parser)
    args = parser.parse_args(["--size", "tiny", "--device", "cpu", "--ops", "torch", "--plot", "", "--no-progress",
                              "--repeat", "1", "--new-tokens", "3", "--compiled-baseline", "on"])
    assert model_cli.run(args) == 0
    out = capsys.readouterr().out
    # transformers' StaticCache under torch.compile, fed eager's tokens, agrees with eager.
    line = next(l for l in out.splitlines() if l.startswith("compiled baseline"))
    assert float(line.rsplit(" ", 1)[1]) <= 2e-2, line
    header = next(l for l in out.splitlines() if "vs compiled" in l)
    assert header.split() == ["eager", "compiled", "patched", "vs", "eager", "vs", "compiled"]
    decode = next(l for l in out.splitlines() if l.startswith("decode ms/token")).split()
    assert len(decode) == 7 and all(float(v.rstrip("x")) > 0 for v in decode[2:])
