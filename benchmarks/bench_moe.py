"""Mixture of experts: the grouped GEMM (tegula.kernels.expert_gemm) and the routing kernels
(tegula.kernels.moe) against what a torch user runs instead, side by side in one process,
medians of CUDA-event timings with L2 flushed before each run (common.bench).

Grouped GEMM, Mixtral-like: 8 experts, top 2, hidden 4096, intermediate 14336, 4096 tokens
-> 8192 routed rows, balanced (1024 an expert) and unbalanced (a skewed fixed split), the up
projection (K 4096 -> N 14336) and the down projection (K 14336 -> N 4096), weights in
nn.Linear layout (E, N, K), read in place (trans_w=True). Columns:
  ours         grouped_gemm(a, w, offsets, trans_w=True): one call (the tile map's kernel
               included);
  cuBLAS sum   the same GEMMs as torch.matmul(a[lo:hi], w[e].t()), each timed by CUDA
               events around it in a loop over the experts, the per-expert medians summed
               (no Python overhead, no gap between experts);
  loop         what a user writes: offsets.tolist(), then out[lo:hi] = a[lo:hi] @ w[e].t()
               expert by expert (the host synchronisation and the copies included).
Targets: >= 0.8x cuBLAS sum, >= 2x loop. --sweep times every tile of
grouped_gemm.SWEEP_TILES on each case (and the default, marked *).

Routing kernels: moe_align_block_size against an argsort-based torch function (stable
argsort, scatter_add counts, cumsum offsets, searchsorted expert ids: no host sync);
moe_permute against index_select + masked_fill; moe_combine against index_select, a weighted
multiply and index_add_ in float32. Each also against torch.compile of the same torch code.
Targets: >= 1.0x torch eager and >= 1.0x torch.compile.

    python benchmarks/bench_moe.py                   # both parts (OUT=dir writes dir/bench_moe.json)
    python benchmarks/bench_moe.py --part gemm --sweep
    python benchmarks/bench_moe.py --part routing --dtype bf16
"""
import argparse
import importlib
import statistics
import sys

import torch
import torch.nn.functional as F

import common

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}

E, TOP_K, HIDDEN, INTER, TOKENS = 8, 2, 4096, 14336, 4096
ROWS = TOKENS * TOP_K
ROUTINGS = {
    "balanced": [ROWS // E] * E,
    "unbalanced": [2900, 1800, 1200, 800, 600, 400, 300, 192],
}
PROJECTIONS = {"up": (HIDDEN, INTER), "down": (INTER, HIDDEN)}   # name -> (K, N)
MIN_VS_CUBLAS, MIN_VS_LOOP = 0.8, 2.0


def offsets_of(counts):
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c)
    return bounds


def cublas_sum_ms(a, w, bounds, reps=20):
    """The per-expert torch.matmul calls of one pass, each between two CUDA events, repeated;
    the sum over experts of each one's median time."""
    experts = [(e, lo, hi) for e, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])) if hi > lo]
    for e, lo, hi in experts:    # warm-up (cuBLAS heuristics, workspaces)
        torch.matmul(a[lo:hi], w[e].t())
    times = {e: [] for e, _, _ in experts}
    for _ in range(reps):
        common._flush_l2()
        events = []
        for e, lo, hi in experts:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.matmul(a[lo:hi], w[e].t())
            end.record()
            events.append((e, start, end))
        torch.cuda.synchronize()
        for e, start, end in events:
            times[e].append(start.elapsed_time(end))
    return sum(statistics.median(t) for t in times.values())


def measure_gemm(gg, projection, routing, dtype, sweep):
    K, N = PROJECTIONS[projection]
    counts = ROUTINGS[routing]
    bounds = offsets_of(counts)
    M = bounds[-1]
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(M, K, generator=g, device="cuda").to(dtype)
    w = (torch.randn(E, N, K, generator=g, device="cuda") * K ** -0.5).to(dtype)
    offsets = torch.tensor(bounds, dtype=torch.int32, device="cuda")
    flops = 2.0 * M * N * K
    cfg = gg.grouped_config(M, N, K, E)
    row = {"case": f"{projection} {routing} {M}x{N}x{K} {str(dtype)[6:]}",
           "tile": "{block_M}x{block_N}x{block_K} s{num_stages}".format(**cfg),
           "target": f">={MIN_VS_CUBLAS}x cuBLAS sum, >={MIN_VS_LOOP}x loop"}

    def ours():
        return gg.grouped_gemm(a, w, offsets, trans_w=True)

    def loop():
        host = offsets.tolist()
        out = torch.empty(M, N, dtype=dtype, device="cuda")
        for e in range(E):
            lo, hi = host[e], host[e + 1]
            out[lo:hi] = a[lo:hi] @ w[e].t()
        return out

    def ref():
        return torch.cat([a[lo:hi].float() @ w[e].float().t() for e, (lo, hi) in enumerate(zip(bounds, bounds[1:]))])

    row["rel_err"], row["error"] = common.run_ours(ours, ref)
    row["ours_ms"] = None if row["error"] else common.bench(ours)
    row["cublas_ms"] = cublas_sum_ms(a, w, bounds)
    row["loop_ms"] = common.bench(loop)
    for name in ("ours", "cublas", "loop"):
        ms = row[f"{name}_ms"]
        row[f"{name}_tflops"] = None if ms is None else flops / ms / 1e9
    ok = row["ours_ms"] is not None
    row["vs_cublas"] = row["cublas_ms"] / row["ours_ms"] if ok else None
    row["vs_loop"] = row["loop_ms"] / row["ours_ms"] if ok else None
    if row["error"]:
        row["status"] = "ERROR"
    elif not row["rel_err"] <= TOL[dtype]:
        row["status"] = "WRONG"
    else:
        row["status"] = common.status(row["vs_cublas"] >= MIN_VS_CUBLAS and row["vs_loop"] >= MIN_VS_LOOP)
    sweep_rows = []
    if sweep:
        default = tuple(cfg[k] for k in ("block_M", "block_N", "block_K", "num_stages", "threads"))
        for tile in dict.fromkeys([default] + gg.SWEEP_TILES):
            bm, bn, bk, stages, threads = tile
            kernel = gg.kernel_for(E, N, K, dtype, True, block_M=bm, block_N=bn, block_K=bk, num_stages=stages,
                                   threads=threads, panel_size=cfg.get("panel_size", 8))
            name = f"{bm}x{bn}x{bk} s{stages} t{threads}{' *' if tile == default else ''}"
            err, error = common.run_ours(lambda: kernel(a, w, offsets), ref)
            ms = None if error else common.bench(lambda: kernel(a, w, offsets))
            sweep_rows.append({"case": row["case"], "tile": name, "ours_ms": ms, "rel_err": err, "error": error,
                               "ours_tflops": None if ms is None else flops / ms / 1e9,
                               "vs_cublas": None if ms is None else row["cublas_ms"] / ms})
    del a, w
    torch.cuda.empty_cache()
    return row, sweep_rows


GEMM_COLUMNS = [("case", "case", "s"), ("tile", "tile", "s"), ("err", "rel_err", ".1e"),
                ("ours ms", "ours_ms", ".3f"), ("cuBLAS sum ms", "cublas_ms", ".3f"), ("loop ms", "loop_ms", ".3f"),
                ("ours TF/s", "ours_tflops", ".0f"), ("cuBLAS TF/s", "cublas_tflops", ".0f"),
                ("loop TF/s", "loop_tflops", ".0f"), ("vs cuBLAS", "vs_cublas", ".2f"), ("vs loop", "vs_loop", ".2f"),
                ("target", "target", "s"), ("status", "status", "s")]
SWEEP_COLUMNS = [("case", "case", "s"), ("tile", "tile", "s"), ("err", "rel_err", ".1e"), ("ms", "ours_ms", ".3f"),
                 ("TF/s", "ours_tflops", ".0f"), ("vs cuBLAS sum", "vs_cublas", ".2f")]


# ---- routing kernels: the torch code a user writes instead ----

def torch_align(topk_ids, num_experts, block_size):
    """vLLM's layout from a stable argsort, without host synchronisation."""
    flat = topk_ids.flatten().long()
    n = flat.numel()
    slots = n + num_experts * (block_size - 1)
    key = torch.where((flat >= 0) & (flat < num_experts), flat, num_experts)
    order = torch.argsort(key, stable=True)
    counts = torch.zeros(num_experts + 1, dtype=torch.long, device=flat.device)
    counts = counts.scatter_add_(0, key, torch.ones_like(key))[:num_experts]
    offsets = F.pad(((counts + block_size - 1) // block_size * block_size).cumsum(0), (1, 0))
    starts = F.pad(counts.cumsum(0), (1, 0))
    sorted_key = key[order]
    expert = sorted_key.clamp(max=num_experts - 1)
    slot = torch.where(sorted_key < num_experts,
                       offsets[expert] + torch.arange(n, device=flat.device) - starts[expert], slots)
    sorted_ids = torch.full((slots + 1,), n, dtype=torch.int32, device=flat.device)
    sorted_ids[slot] = order.int()
    positions = torch.full((n,), -1, dtype=torch.int32, device=flat.device)
    positions[order] = torch.where(slot < slots, slot, -1).int()
    block_starts = torch.arange(-(-slots // block_size), device=flat.device) * block_size
    expert_ids = torch.searchsorted(offsets[1:], block_starts, right=True)
    expert_ids = torch.where(block_starts < offsets[num_experts], expert_ids, -1).int()
    return sorted_ids[:slots], expert_ids, offsets[num_experts:].int(), offsets.int(), positions.view(topk_ids.shape)


def torch_permute(x, sorted_ids, top_k):
    n = x.shape[0] * top_k
    rows = torch.index_select(x, 0, (sorted_ids // top_k).clamp(max=x.shape[0] - 1))
    return rows.masked_fill_((sorted_ids >= n).unsqueeze(1), 0)


def torch_combine(y, weights, positions):
    T_, k = weights.shape
    flat = positions.reshape(-1)
    valid = flat >= 0
    rows = y.index_select(0, flat.clamp(min=0)).float() * torch.where(valid, weights.reshape(-1).float(), 0.0)[:, None]
    token = torch.arange(T_ * k, device=y.device) // k
    return torch.zeros(T_, y.shape[1], dtype=torch.float32, device=y.device).index_add_(0, token, rows).to(y.dtype)


ALIGN_CASES = [(64, 2, 8, 16), (4096, 2, 8, 64), (16384, 2, 8, 64), (4096, 8, 64, 64), (16384, 8, 256, 64),
               (65536, 8, 256, 64)]       # (tokens, top k, experts, block size)
ROW_CASES = [(4096, 2, 4096), (16384, 2, 4096), (4096, 8, 7168), (64, 2, 4096)]   # (tokens, top k, hidden)


def routed_ids(T_, k, n_experts, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    logits = torch.randn(T_, n_experts, generator=g, device="cuda")
    return torch.topk(logits, k, dim=-1).indices.int()


def timed_row(case, ours, eager, compiled, check, nbytes=None):
    """Times ours, torch eager and torch.compile of the eager function; check() -> whether
    ours equals (or is close to) torch."""
    row = {"case": case, "target": ">=1.0x eager, >=1.0x compile", "error": None}
    try:
        ok = check()
    except Exception as exc:  # reported in the table and the JSON
        ok, row["error"] = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    row["ours_ms"] = None if row["error"] else common.bench(ours)
    row["eager_ms"] = common.bench(eager)
    try:
        compiled()
        row["compile_ms"] = common.bench(compiled)
    except Exception as exc:  # torch.compile may not handle the code: the row says so
        row["compile_ms"] = None
        row["compile_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    if row["ours_ms"] is not None:
        row["vs_eager"] = row["eager_ms"] / row["ours_ms"]
        row["vs_compile"] = None if row["compile_ms"] is None else row["compile_ms"] / row["ours_ms"]
        if nbytes is not None:
            row["ours_gbs"] = common.gbs(nbytes, row["ours_ms"])
    if row["error"]:
        row["status"] = "ERROR"
    elif not ok:
        row["status"] = "WRONG"
    else:
        # Where torch.compile cannot compile the torch code (align's data-dependent
        # shapes), the compile half of the target does not apply; the note says why.
        compiled_ok = row["compile_ms"] is None or row["vs_compile"] >= 1.0
        row["status"] = common.status(row["vs_eager"] >= 1.0 and compiled_ok)
        if row["compile_ms"] is None:
            row["target"] = ">=1.0x eager (compile n/a)"
    return row


def measure_align(moe, T_, k, n_experts, block_size):
    ids = routed_ids(T_, k, n_experts)
    eager = lambda: torch_align(ids, n_experts, block_size)  # noqa: E731
    compiled_fn = torch.compile(torch_align)
    return timed_row(
        f"align T={T_} k={k} E={n_experts} B={block_size}",
        lambda: moe.moe_align_block_size(ids, n_experts, block_size), eager,
        lambda: compiled_fn(ids, n_experts, block_size),
        lambda: all(torch.equal(o, r) for o, r in zip(moe.moe_align_block_size(ids, n_experts, block_size), eager())))


def measure_permute(moe, T_, k, H, dtype):
    x = torch.randn(T_, H, device="cuda").to(dtype)
    sorted_ids = moe.moe_align_block_size(routed_ids(T_, k, 8), 8, 64).sorted_token_ids
    compiled_fn = torch.compile(torch_permute)
    nbytes = 2 * sorted_ids.numel() * H * x.element_size()
    return timed_row(
        f"permute T={T_} k={k} H={H} {str(dtype)[6:]}",
        lambda: moe.moe_permute(x, sorted_ids, k), lambda: torch_permute(x, sorted_ids, k),
        lambda: compiled_fn(x, sorted_ids, k),
        lambda: torch.equal(moe.moe_permute(x, sorted_ids, k), torch_permute(x, sorted_ids, k)), nbytes)


def measure_combine(moe, T_, k, H, dtype):
    align = moe.moe_align_block_size(routed_ids(T_, k, 8), 8, 64)
    y = torch.randn(align.sorted_token_ids.numel(), H, device="cuda").to(dtype)
    w = torch.softmax(torch.randn(T_, k, device="cuda"), -1)
    pos = align.token_positions
    compiled_fn = torch.compile(torch_combine)
    nbytes = (k + 1) * T_ * H * y.element_size()

    def check():
        return common.rel_err(moe.moe_combine(y, w, pos), torch_combine(y, w, pos)) <= TOL[dtype]

    return timed_row(f"combine T={T_} k={k} H={H} {str(dtype)[6:]}",
                     lambda: moe.moe_combine(y, w, pos), lambda: torch_combine(y, w, pos),
                     lambda: compiled_fn(y, w, pos), check, nbytes)


ROUTING_COLUMNS = [("case", "case", "s"), ("ours ms", "ours_ms", ".4f"), ("eager ms", "eager_ms", ".4f"),
                   ("compile ms", "compile_ms", ".4f"), ("ours GB/s", "ours_gbs", ".0f"),
                   ("vs eager", "vs_eager", ".2f"), ("vs compile", "vs_compile", ".2f"), ("target", "target", "s"),
                   ("status", "status", "s")]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("all", "gemm", "routing"), default="all",
                        help="which table(s) to measure (default: all)")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="fp16", help="activation and weight dtype")
    parser.add_argument("--sweep", action="store_true",
                        help="also time every tile of grouped_gemm.SWEEP_TILES on each GEMM case")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    common.require_gpu("bench_moe")
    dtype = DTYPES[args.dtype]
    gg = importlib.import_module("tegula.kernels.expert_gemm")
    moe = importlib.import_module("tegula.kernels.moe")
    rows, sweep_rows, routing_rows = [], [], []
    if args.part in ("all", "gemm"):
        for projection in PROJECTIONS:
            for routing in ROUTINGS:
                row, swept = measure_gemm(gg, projection, routing, dtype, args.sweep)
                rows.append(row)
                sweep_rows += swept
        common.print_table(f"Grouped GEMM, Mixtral {E} experts top {TOP_K}, {TOKENS} tokens", rows, GEMM_COLUMNS,
                           notes=["vs cuBLAS = cuBLAS sum / ours; vs loop = loop / ours (the loop includes "
                                  "offsets.tolist() and the copies into the output)"])
        if sweep_rows:
            common.print_table("Grouped GEMM tile sweep (* = grouped_config's choice)", sweep_rows, SWEEP_COLUMNS)
    if args.part in ("all", "routing"):
        for case in ALIGN_CASES:
            routing_rows.append(measure_align(moe, *case))
        for T_, k, H in ROW_CASES:
            routing_rows.append(measure_permute(moe, T_, k, H, dtype))
        for T_, k, H in ROW_CASES:
            routing_rows.append(measure_combine(moe, T_, k, H, dtype))
        errors = sorted({r["compile_error"] for r in routing_rows if r.get("compile_error")})
        common.print_table("MoE routing kernels", routing_rows, ROUTING_COLUMNS,
                           notes=["vs eager / vs compile = torch time / ours; GB/s: permute reads and writes each "
                                  "slot's row, combine reads k rows and writes one per token"]
                           + [f"torch.compile failed: {e}" for e in errors])
    common.write_json("moe", rows + routing_rows, sweep=sweep_rows)
    return common.exit_status(rows + routing_rows)


if __name__ == "__main__":
    sys.exit(main())
