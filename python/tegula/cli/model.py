"""`python -m tegula model`: a Llama-style transformers model with random weights, run eager
and patched by `tegula.integrations.transformers.apply`, compared and timed.

    python -m tegula model                      # a small model (about 0.3 B parameters)
    python -m tegula model --size 8b            # Llama-3-8B's shapes, bf16: needs ~40 GB
    python -m tegula model --size tiny --device cpu --ops torch   # the plumbing, on a CPU

Steps: build the model from a config (weights drawn by transformers' initialiser, seeded);
run prefill of `--batch` prompts of `--prompt-len` random tokens and greedy decoding of
`--new-tokens` tokens eager (transformers as shipped: SDPA attention, DynamicCache),
keeping the logits of every step; patch the same model; run the same prefill and, fed the
eager run's tokens (so each step sees the same input), the same decode steps on a
`KVCache`. The baseline a serving user would pick besides (`--compiled-baseline`, on by
default on a GPU): transformers' own fast path, a `StaticCache` and the model's forward
under `torch.compile(mode="reduce-overhead", fullgraph=True)` (CUDA graphs), fed the same
tokens, checked against eager the same way and timed the same way (its compiles and graph
captures untimed); and on a GPU the eager model on a `StaticCache` with each decode step
captured in one CUDA graph (no compiler). Compare the logits step by step (||patched - eager|| / ||eager||, target
--rtol; the worst element's difference is printed too) and the greedy tokens; then time both (median of CUDA-event timings: prefill
tokens/s and decode ms/token), and time each op class in one instrumented pass (GEMM,
attention, norm, RoPE, MLP activation, other) for the table and the PNG (--plot).
Exit status 1 when the logits disagree beyond --rtol.
"""
from __future__ import annotations

import statistics
import sys
import time

SIZES = {
    # name: (hidden, intermediate, layers, heads, kv heads, vocab, rope)
    "tiny": dict(hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512),
    "small": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=12, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=32000),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256),
}
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def add_arguments(p) -> None:
    p.add_argument("--size", choices=tuple(SIZES), default="small",
                   help="model shape: tiny, small (default) or 8b (Llama-3-8B's)")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    p.add_argument("--batch", type=int, default=None, help="prompts (default 8; 2 for tiny)")
    p.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (default 1024; 16 for tiny)")
    p.add_argument("--new-tokens", type=int, default=None, help="decoded tokens (default 128; 8 for tiny)")
    p.add_argument("--check-steps", type=int, default=None,
                   help="decode steps whose logits are compared (default: all)")
    p.add_argument("--rtol", type=float, default=2e-2,
                   help="largest ||patched - eager|| / ||eager|| of one step's logits (Frobenius norms)")
    p.add_argument("--gemm", choices=("auto", "tegula", "torch"), default="auto",
                   help="which GEMM the patch uses (see tegula.integrations.transformers.apply)")
    p.add_argument("--ops", choices=("tegula", "torch"), default="tegula",
                   help="'torch' runs the patched structure on torch's ops (the reference)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--repeat", type=int, default=5, help="timed prefill repetitions (median)")
    p.add_argument("--plot", default="model_ops.png", help="PNG of the time per op class ('' for none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fp32-reference", action="store_true",
                   help="also run a float32 copy of the model on eager's tokens and report how far eager and "
                        "patched each are from it (needs memory for the float32 weights)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-cuda-graph", action="store_true",
                   help="skip the decode through tegula.integrations.transformers.GraphDecoder")
    p.add_argument("--compiled-baseline", choices=("auto", "on", "off"), default="auto",
                   help="also run transformers with a StaticCache under torch.compile(mode='reduce-overhead') "
                        "(auto: on a GPU)")


def _progress(iterable, total, desc, enabled):
    if enabled:
        try:
            from tqdm import tqdm

            return tqdm(iterable, total=total, desc=desc, leave=False, file=sys.stderr)
        except ImportError:
            pass
    return iterable


def build_model(size: str, dtype, device, seed: int = 0, max_positions: int = 8192):
    """A LlamaForCausalLM of `size` (SIZES) with seeded random weights, in eval mode."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(SIZES[size])
    rope = dict(LLAMA3_ROPE) if size == "8b" else {"rope_type": "default", "rope_theta": 10000.0}
    # Llama-3.1's context (131072) for the 8b shape; its rope scaling needs more than 8192.
    context = 131072 if size == "8b" else max(max_positions, 8192)
    config = LlamaConfig(**shape, max_position_embeddings=context, rope_parameters=rope,
                         rms_norm_eps=1e-5, attn_implementation="sdpa", tie_word_embeddings=False)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


class _Clock:
    """Wall time of GPU work: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device):
        import torch

        self.torch = torch
        self.cuda = torch.device(device).type == "cuda"

    def time(self, fn):
        torch = self.torch
        if not self.cuda:
            t0 = time.perf_counter()
            out = fn()
            return out, (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        return out, start.elapsed_time(end)


def _rel(a, b) -> float:
    """||b - a|| / ||a|| (Frobenius), a the reference."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / a.norm().clamp_min(1e-300)).item()


def _rel_max(a, b) -> float:
    """max |b - a| / max |a|: the worst element, for the record."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / a.abs().max().clamp_min(1e-300)).item()


def run(args) -> int:
    import torch

    import tegula.integrations.transformers as tt

    tiny = args.size == "tiny"
    batch = args.batch or (2 if tiny else 8)
    prompt_len = args.prompt_len or (16 if tiny else 1024)
    new_tokens = args.new_tokens if args.new_tokens is not None else (8 if tiny else 128)
    for name, value in (("--batch", batch), ("--prompt-len", prompt_len), ("--new-tokens", new_tokens)):
        if value < 1:
            print(f"model: {name} must be >= 1, got {value}", file=sys.stderr)
            return 2
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("model: no CUDA device; use --device cpu --ops torch to run the patched structure on the CPU",
              file=sys.stderr)
        return 2
    if args.ops == "tegula" and device.type != "cuda":
        print("model: Tegula's kernels need a CUDA device (--ops torch runs on the CPU)", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    progress = not args.no_progress
    total_len = prompt_len + new_tokens
    use_graph = device.type == "cuda" and args.ops == "tegula" and not args.no_cuda_graph
    use_compiled = args.compiled_baseline == "on" or (args.compiled_baseline == "auto" and device.type == "cuda")
    clock = _Clock(device)

    print(f"building the {args.size} model ({args.dtype}, random weights) ...", flush=True)
    model = build_model(args.size, dtype, device, args.seed, total_len)
    n_params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"model: {args.size}, {n_params / 1e9:.2f} B parameters, hidden {cfg.hidden_size}, "
          f"{cfg.num_hidden_layers} layers, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}; "
          f"batch {batch} x {prompt_len} prompt tokens, {new_tokens} new; device {dev_name}")
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    prompts = torch.randint(0, cfg.vocab_size, (batch, prompt_len), generator=gen).to(device)

    def eager_cache():
        return None   # transformers makes its DynamicCache

    def decode_run(cache_maker, tokens=None, label="", keep=True, net=None, graph=False):
        """prefill + decode; tokens: the inputs of each decode step (None: greedy own);
        graph: decode steps through a GraphDecoder."""
        net = net or model
        logits, chosen = [], []
        cache = cache_maker()
        out = net(prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        last = out.logits[:, -1]
        decoder = tt.GraphDecoder(net, cache) if graph else None
        if keep:
            logits.append(last.float().cpu())
        steps = range(new_tokens)
        for i in _progress(steps, new_tokens, label, progress):
            nxt = last.argmax(-1, keepdim=True)
            chosen.append(nxt)
            feed = nxt if tokens is None else tokens[i]
            if decoder is not None:
                last = decoder.step(feed)
            else:
                last = net(feed, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
            if keep:
                logits.append(last.float().cpu())
        return logits, chosen

    def timed(cache_maker, label):
        """(prefill ms median, decode ms per token)."""
        prefill = []
        for _ in range(args.repeat):
            _, ms = clock.time(lambda: model(prompts, past_key_values=cache_maker(), use_cache=True,
                                             logits_to_keep=1))
            prefill.append(ms)
        cache = cache_maker()
        out = model(prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)

        def decode():
            tok = nxt
            for _ in _progress(range(new_tokens), new_tokens, f"timing {label} decode", progress):
                tok = model(tok, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1] \
                    .argmax(-1, keepdim=True)
            return tok

        _, ms = clock.time(decode)
        return statistics.median(prefill), ms / new_tokens

    def compiled_baseline(tokens):
        """transformers' fast path: a StaticCache and the forward under torch.compile(mode=
        "reduce-overhead", fullgraph=True). (logits fed `tokens`, prefill ms median, decode
        ms per token); the compiles and graph captures run before anything is timed."""
        from transformers import StaticCache

        import torch._inductor.config as inductor_config

        # Inductor's static launcher crashes the process (SIGSEGV) in the decode step's first
        # graph warm-up with torch 2.11 on an H200; Triton's own launcher runs the same kernels.
        if hasattr(inductor_config, "use_static_cuda_launcher"):
            inductor_config.use_static_cuda_launcher = False
        forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        cache = StaticCache(config=model.config, max_cache_len=total_len + 1)
        positions = torch.arange(prompt_len, device=device)
        steps = [torch.tensor([prompt_len + i], device=device) for i in range(new_tokens)]

        def prefill():
            cache.reset()
            return forward(prompts, past_key_values=cache, use_cache=True, cache_position=positions,
                           logits_to_keep=1).logits[:, -1].clone()

        def step(i, tok):
            # The graph's outputs are overwritten by its next replay: taken at once.
            return forward(tok, past_key_values=cache, use_cache=True, cache_position=steps[i],
                           logits_to_keep=1).logits[:, -1].clone()

        from torch._dynamo.utils import counters

        def graph_skips():
            return {k: v for k, v in counters["inductor"].items() if "cudagraph_skip" in k}

        skips_before = graph_skips()
        for _ in range(2):  # compile and capture both shapes (a replay needs a warm graph)
            last = prefill()
            step(0, last.argmax(-1, keepdim=True))
        # Inductor falls back to launching the kernels where it cannot graph a compiled region
        # (a mutated input): say so, since the baseline is then not all it claims.
        skipped = {k: v - skips_before.get(k, 0) for k, v in graph_skips().items() if v > skips_before.get(k, 0)}
        if skipped and device.type == "cuda":
            print(f"note: inductor left parts of the compiled baseline out of its CUDA graphs: {skipped}")
        logits = [prefill().float().cpu()]
        for i in _progress(range(new_tokens), new_tokens, "compiled", progress):
            logits.append(step(i, tokens[i]).float().cpu())
        pre = statistics.median(clock.time(prefill)[1] for _ in range(args.repeat))
        nxt = prefill().argmax(-1, keepdim=True)

        def decode():
            tok = nxt
            for i in _progress(range(new_tokens), new_tokens, "timing compiled decode", progress):
                tok = step(i, tok).argmax(-1, keepdim=True)
            return tok

        _, ms = clock.time(decode)
        del forward, cache
        torch._dynamo.reset()  # its graphs and their memory go before the patched runs
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return logits, pre, ms / new_tokens

    def graphed_baseline(tokens):
        """The eager model on a StaticCache, each decode step one CUDA graph (no compiler:
        what torch.cuda.graphs give a serving user as shipped). (logits fed `tokens`,
        decode ms per token); the capture is untimed. The prefill runs eager (a graph of
        it would time the same kernels)."""
        from transformers import StaticCache

        cache = StaticCache(config=model.config, max_cache_len=total_len + 1)
        positions = torch.arange(prompt_len, device=device)
        tok = torch.zeros(batch, 1, dtype=torch.long, device=device)
        pos = torch.full((1,), prompt_len, dtype=torch.long, device=device)

        def prefill():
            cache.reset()
            return model(prompts, past_key_values=cache, use_cache=True, cache_position=positions,
                         logits_to_keep=1).logits[:, -1]

        def forward():
            return model(tok, past_key_values=cache, use_cache=True, cache_position=pos,
                         logits_to_keep=1).logits[:, -1]

        prefill()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up off the capture (lazy initialisations, workspaces)
                forward()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = forward()

        def step(i, feed):
            tok.copy_(feed)
            pos.fill_(prompt_len + i)
            graph.replay()
            return out.clone()

        last = prefill()
        logits = [last.float().cpu()]
        for i in _progress(range(new_tokens), new_tokens, "eager + CUDA graph", progress):
            logits.append(step(i, tokens[i]).float().cpu())
        nxt = prefill().argmax(-1, keepdim=True)

        def decode():
            t = nxt
            for i in _progress(range(new_tokens), new_tokens, "timing eager + CUDA graph decode", progress):
                t = step(i, t).argmax(-1, keepdim=True)
            return t

        _, ms = clock.time(decode)
        del graph, cache
        torch.cuda.empty_cache()
        return logits, ms / new_tokens

    def timed_graph():
        """Decode ms per token through a GraphDecoder (its capture, on the first step, untimed)."""
        cache = tt.KVCache(model, batch, total_len + 1)
        out = model(prompts, past_key_values=cache, use_cache=True, logits_to_keep=1)
        decoder = tt.GraphDecoder(model, cache)
        nxt = decoder.step(out.logits[:, -1].argmax(-1, keepdim=True)).argmax(-1, keepdim=True)

        def decode():
            tok = nxt
            for _ in _progress(range(new_tokens), new_tokens, "timing patched + CUDA graph decode", progress):
                tok = decoder.step(tok).argmax(-1, keepdim=True)
            return tok

        _, ms = clock.time(decode)
        return ms / new_tokens

    def op_profile(timer, cache_maker):
        """Time per op class, ms: (prefill, decode per token) from one instrumented pass
        of each (see OpTimer: on a GPU the kernels' own durations)."""
        cache = cache_maker()
        out, pre = timer.measure(lambda: model(prompts, past_key_values=cache, use_cache=True, logits_to_keep=1))
        cache = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        steps = min(new_tokens, 16)

        def decode():
            tok = nxt
            for _ in range(steps):
                tok = model(tok, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1] \
                    .argmax(-1, keepdim=True)

        _, dec = timer.measure(decode)
        return pre, {k: v / steps for k, v in dec.items()}

    with torch.no_grad():
        # --- eager: reference logits and tokens, timings, op profile
        ref_logits, ref_tokens = decode_run(eager_cache, label="eager")
        eager_pre, eager_dec = timed(eager_cache, "eager")
        fp32_logits = fp32_tokens = None
        if args.fp32_reference:
            import copy

            reference = copy.deepcopy(model).float()
            fp32_logits, fp32_tokens = decode_run(eager_cache, tokens=ref_tokens, label="float32", net=reference)
            del reference
            if device.type == "cuda":
                torch.cuda.empty_cache()
        comp_logits = comp_pre = comp_dec = None
        if use_compiled:
            print("transformers with a StaticCache under torch.compile(mode='reduce-overhead') ...", flush=True)
            try:
                comp_logits, comp_pre, comp_dec = compiled_baseline(ref_tokens)
            except Exception as err:  # noqa: BLE001 - a baseline that does not run is reported, not fatal
                print(f"compiled baseline: not measured: {type(err).__name__}: {str(err).strip().splitlines()[0][:300]}")
                torch._dynamo.reset()
        graphed_logits = graphed_dec = None
        if use_compiled and device.type == "cuda":
            print("the eager model on a StaticCache, each decode step a CUDA graph ...", flush=True)
            try:
                graphed_logits, graphed_dec = graphed_baseline(ref_tokens)
            except Exception as err:  # noqa: BLE001 - reported, not fatal
                print(f"graphed baseline: not measured: {type(err).__name__}: "
                      f"{str(err).strip().splitlines()[0][:300]}")
        timer = tt.OpTimer(device)
        remove = tt.instrument(model, timer)
        eager_ops = op_profile(timer, eager_cache)
        remove()

        # --- patched
        report = tt.apply(model, gemm=args.gemm, ops=args.ops, max_positions=total_len, timer=timer)
        print(f"patched: {dict(report)}; GEMM: {report.gemm}")
        fallbacks_before = dict(report.fallbacks)

        def our_cache():
            return tt.KVCache(model, batch, total_len)

        pat_logits, pat_tokens = decode_run(our_cache, tokens=ref_tokens, label="patched")
        pat_pre, pat_dec = timed(our_cache, "patched")
        graph_logits = graph_dec = None
        if use_graph:
            graph_logits, _ = decode_run(our_cache, tokens=ref_tokens, label="patched + CUDA graph", graph=True)
            graph_dec = timed_graph()
        remove = tt.instrument(model, timer)
        pat_ops = op_profile(timer, our_cache)
        remove()

    if report.fallbacks != fallbacks_before:
        print(f"note: calls that took torch's path: {report.fallbacks}")
    # --- compare
    check = len(ref_logits) if args.check_steps is None else min(len(ref_logits), args.check_steps + 1)
    worst, worst_element, first_bad = 0.0, 0.0, None
    for step in range(check):
        r = _rel(ref_logits[step], pat_logits[step])
        worst = max(worst, r)
        worst_element = max(worst_element, _rel_max(ref_logits[step], pat_logits[step]))
        if r > args.rtol and first_bad is None:
            first_bad = step
    agree = 0
    for a, b in zip(ref_tokens, pat_tokens):
        if not torch.equal(a, b):
            break
        agree += 1
    ok = first_bad is None
    print(f"logits: {check} steps checked (prefill + {check - 1} decode), worst step's ||patched - eager|| / "
          f"||eager|| {worst:.2e} (target <= {args.rtol:g}): {'PASS' if ok else f'FAIL from step {first_bad}'}; "
          f"worst element |patched - eager| / max |eager| {worst_element:.2e}")
    print(f"greedy tokens: patched agrees with eager for the first {agree} of {len(ref_tokens)} steps "
          f"(each step fed eager's token)")
    if fp32_logits is not None:
        e32 = max(_rel(fp32_logits[i], ref_logits[i]) for i in range(check))
        p32 = max(_rel(fp32_logits[i], pat_logits[i]) for i in range(check))
        same = [sum(torch.equal(a, b) for a, b in zip(fp32_tokens, other)) for other in (ref_tokens, pat_tokens)]
        print(f"float32 reference (the same weights, eager, fed the same tokens): worst step's distance "
              f"eager {e32:.2e}, patched {p32:.2e}; greedy choices equal to float32's: eager {same[0]}, "
              f"patched {same[1]} of {len(fp32_tokens)}")

    if comp_logits is not None:
        c_worst = max(_rel(ref_logits[i], comp_logits[i]) for i in range(check))
        print(f"compiled baseline (StaticCache, torch.compile reduce-overhead): worst step's distance to eager "
              f"{c_worst:.2e}")
    if graphed_logits is not None:
        gb_worst = max(_rel(ref_logits[i], graphed_logits[i]) for i in range(check))
        print(f"graphed baseline (StaticCache, eager model, CUDA graph per decode step): worst step's distance to "
              f"eager {gb_worst:.2e}")
    # --- speed
    tok = batch * prompt_len

    def rate(ms):
        return None if ms is None else tok / ms * 1e3

    # (what, eager, compiled, patched); a rate is better higher, a time lower
    rows = [("prefill ms", eager_pre, comp_pre, pat_pre), ("prefill tokens/s", rate(eager_pre), rate(comp_pre),
                                                           rate(pat_pre)),
            ("decode ms/token", eager_dec, comp_dec, pat_dec)]
    if graph_dec is not None:
        rows.append(("decode, CUDA graph", eager_dec, comp_dec, graph_dec))
        g_worst = max(_rel(ref_logits[i], graph_logits[i]) for i in range(check))
        g_same = max(_rel_max(pat_logits[i], graph_logits[i]) for i in range(len(pat_logits)))
        print(f"CUDA-graph decode: worst step's distance to eager {g_worst:.2e}; to the patched steps without "
              f"the graph (the same kernels), worst element {g_same:.2e}")
        ok = ok and g_worst <= args.rtol

    def cell(v, spec):
        return "-" if v is None else format(v, spec)

    print(f"\n{'':<20}{'eager':>11}{'compiled':>11}{'patched':>11}{'vs eager':>10}{'vs compiled':>13}")
    for name, e, c, p in rows:
        up = "tokens/s" in name

        def speed(base):
            return None if base is None else (p / base if up else base / p)

        print(f"{name:<20}{cell(e, '.2f'):>11}{cell(c, '.2f'):>11}{cell(p, '.2f'):>11}"
              f"{cell(speed(e), '.2f') + 'x':>10}{cell(speed(c), '.2f') + ('x' if c is not None else ''):>13}")
    if graphed_dec is not None:
        line = f"eager model + StaticCache + CUDA graph: decode {graphed_dec:.2f} ms/token"
        if graph_dec is not None:
            line += f"; GraphDecoder is {graphed_dec / graph_dec:.2f}x it"
        print(line)
    if graph_dec is not None and comp_dec is not None:
        print(f"decode through GraphDecoder: {comp_dec / graph_dec:.2f}x transformers' StaticCache under "
              f"torch.compile (target >= 1.3x)")
    print(f"\ntime per op class, ms ({dev_name}; decode: per token):")
    print(f"{'op class':<16}{'prefill eager':>15}{'patched':>10}{'decode eager':>15}{'patched':>10}")
    for cls in tt.OP_CLASSES:
        vals = (eager_ops[0].get(cls, 0.0), pat_ops[0].get(cls, 0.0), eager_ops[1].get(cls, 0.0),
                pat_ops[1].get(cls, 0.0))
        print(f"{cls:<16}{vals[0]:>15.3f}{vals[1]:>10.3f}{vals[2]:>15.3f}{vals[3]:>10.3f}")
    if args.plot:
        plot_ops(args.plot, eager_ops, pat_ops, title=f"{args.size} model, {dev_name}")
        print(f"plot: {args.plot}")
    return 0 if ok else 1


def plot_ops(path, eager_ops, patched_ops, title=""):
    """Bars of the time per op class, eager beside patched, for prefill and for one decode
    step; returns the plotted values {(phase, run, class): ms}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tegula.integrations.transformers import OP_CLASSES

    values = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, phase, e, p in ((axes[0], "prefill", eager_ops[0], patched_ops[0]),
                            (axes[1], "decode (per token)", eager_ops[1], patched_ops[1])):
        ys = range(len(OP_CLASSES))
        ev = [e.get(c, 0.0) for c in OP_CLASSES]
        pv = [p.get(c, 0.0) for c in OP_CLASSES]
        ax.barh([y + 0.2 for y in ys], ev, height=0.4, label="eager", color="#8c8c8c")
        ax.barh([y - 0.2 for y in ys], pv, height=0.4, label="Tegula", color="#2a7ab9")
        ax.set_yticks(list(ys))
        ax.set_yticklabels(OP_CLASSES)
        ax.invert_yaxis()
        ax.set_xlabel("ms")
        ax.set_title(f"{phase}: {sum(ev):.2f} -> {sum(pv):.2f} ms")
        ax.legend(loc="lower right")
        for c, a, b in zip(OP_CLASSES, ev, pv):
            values[(phase, "eager", c)] = a
            values[(phase, "patched", c)] = b
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return values
