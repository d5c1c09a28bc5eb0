"""The analyses' numbers, frozen: for every shipped kernel (at representative shapes, on the
wgmma and the mma.sync paths) and every kernel the documentation's examples build, what
`tegula.tools.Analyzer` counts (grid, tensor-core and CUDA-core FLOPs, bytes loaded and
stored per global tensor, tensor sizes, notes) and what `JITKernel.register_usage` estimates
(registers per thread of each fragment, the peak live, the limit) must equal the values in
golden/analysis_frozen.json.

The file was written by the analyses as they were before they moved into the compiler, so
a change to how the IR is printed, walked or counted cannot shift a number unnoticed. A
deliberate change to a rule regenerates it: `TEGULA_UPDATE_FROZEN=1 pytest <this file>`,
and the diff of the JSON is the change's evidence.
"""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")
from tegula.tools import Analyzer  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "golden" / "analysis_frozen.json"
DOCS = Path(__file__).resolve().parents[3] / "docs"
UPDATE = os.environ.get("TEGULA_UPDATE_FROZEN") == "1"
H, BF = torch.float16, torch.bfloat16


def _mod(name):
    return importlib.import_module("tegula.kernels." + name)


def _shipped():
    """(label, build) of the shipped kernels: build() gives a JITKernel or a tuple of them."""
    fa, bw, fd, mla = _mod("flash_attention"), _mod("flash_attention_bwd"), _mod("flash_decoding"), _mod("mla_decode")
    gemm, gg, sw, moe = _mod("gemm"), _mod("expert_gemm"), _mod("gated_mlp"), _mod("moe")
    rms, ln, sm, red = _mod("rmsnorm"), _mod("layernorm"), _mod("row_softmax"), _mod("reduce")
    cases = []
    for dtype, n in ((H, 4096), (BF, 1000), (torch.float32, 12288)):
        d = str(dtype).replace("torch.", "")
        cases += [
            (f"rmsnorm {n} {d}", lambda n=n, t=dtype: rms.kernel_for(n, t, 1e-6)),
            (f"rmsnorm silu out {n} {d}", lambda n=n, t=dtype: rms.kernel_for(n, t, 1e-6, silu=True, allocates_output=True)),
            (f"rmsnorm backward {n} {d}", lambda n=n, t=dtype: rms.backward_kernel_for(n, t, 1e-6, True, 132)),
            (f"layernorm {n} {d}", lambda n=n, t=dtype: ln.kernel_for(n, t, 1e-5)),
            (f"layernorm backward {n} {d}", lambda n=n, t=dtype: ln.backward_kernel_for(n, t, 1e-5, 132)),
            (f"softmax {n} {d}", lambda n=n, t=dtype: sm.kernel_for(n, t)),
            (f"softmax backward {n} {d}", lambda n=n, t=dtype: sm.backward_kernel_for(n, t)),
            (f"row sum {n} {d}", lambda n=n, t=dtype: red.kernel_for(n, t, "sum")),
            (f"row max {n} {d}", lambda n=n, t=dtype: red.kernel_for(n, t, "max", allocates_output=True)),
            (f"add {n} {d}", lambda n=n, t=dtype: _mod("elementwise").kernel_for(n, t, False)),
            (f"add broadcast {n} {d}", lambda n=n, t=dtype: _mod("elementwise").kernel_for(n, t, True)),
            (f"add_rms_norm {n} {d}", lambda n=n, t=dtype: _mod("fused_norm").kernel_for(n, t, 1e-6)),
            (f"swiglu {n} {d}", lambda n=n, t=dtype: sw.kernel_for(n, t, False)),
            (f"swiglu joined {n} {d}", lambda n=n, t=dtype: sw.kernel_for(n, t, True)),
            (f"transpose {n} {d}", lambda n=n, t=dtype: _mod("matrix_transpose").kernel_for(n, 96, t)),
            (f"moe permute {n} {d}", lambda n=n, t=dtype: moe.permute_kernel_for(n, 2, t)),
        ]
    cases += [
        ("column sum", lambda: red.column_sum_kernel_for(4096, H, red.plan_column_sum(4096, 2, 32768, 132))),
        ("moe align", lambda: moe.align_kernel_for(64, 64, torch.int32)),
        ("moe combine", lambda: moe.combine_kernel_for(4096, 2, BF, torch.float32)),
        ("rope", lambda: _mod("rotary_embedding").kernel_for(32, 8, 128, BF, 1024)),
        ("rope interleaved bhsd", lambda: _mod("rotary_embedding").kernel_for(32, 8, 64, H, 333, interleaved=True,
                                                                     q_layout="bhsd", k_layout="bhsd")),
    ]
    for mma_sync in (False, True):
        tag = "mma.sync" if mma_sync else "auto"
        cases += [
            (f"gemm 4096 {tag}", lambda s=mma_sync: gemm.kernel_for(4096, 4096, 4096, H, mma_sync=s, sms=132)),
            (f"gemm ragged {tag}", lambda s=mma_sync: gemm.kernel_for(1000, 3000, 777, BF, mma_sync=s, sms=132)),
            (f"gemm relu bias {tag}", lambda s=mma_sync: gemm.kernel_for(512, 1024, 2048, H, epilogue="bias_relu",
                                                                         mma_sync=s, sms=132)),
            (f"grouped gemm {tag}", lambda s=mma_sync: gg.kernel_for(8, 1024, 512, BF, mma_sync=s)),
            (f"swiglu linear {tag}", lambda s=mma_sync: sw.linear_kernel_for(4096, 4096, BF, mma_sync=s,
                                                                              **sw.TILED_CONFIG)),
        ]
    cases += [
        ("gemm split-k", lambda: gemm.kernel_for(64, 4096, 8192, H, sms=132, splits=4)),
        ("gemm decode", lambda: gemm.kernel_for(16, 4096, 4096, H, sms=132)),
        ("gemm decode one slice", lambda: gemm.kernel_for(8, 14336, 4096, BF, sms=132, trans_b=True)),
        ("gemm activation grad", lambda: _mod("gemm_backward").activation_grad_kernel_for(1024, 4096, H, "relu", True, sms=132)),
        ("swiglu linear thin", lambda: sw.linear_kernel_for(4096, 4096, BF, splits=4, **sw.THIN_CONFIG)),
    ]
    for causal in (False, True):
        for path in ("auto", "legacy"):
            cases += [
                (f"attention bhsd causal={causal} {path}",
                 lambda c=causal, p=path: fa.kernel_for(2, 16, 16, 1024, 1024, 128, c, 0, "bhsd", "float16", None, path=p)),
                (f"attention gqa bshd ragged causal={causal} {path}",
                 lambda c=causal, p=path: fa.kernel_for(1, 8, 2, 333, 517, 64, c, 0, "bshd", "bfloat16", None, path=p)),
                (f"attention backward causal={causal} {path}",
                 lambda c=causal, p=path: bw.kernel_for(1, 8, 8, 512, 512, 64, c, 0, "bhsd", "float16", None, path=p)),
            ]
    cases += [
        ("attention window", lambda: fa.kernel_for(1, 4, 4, 1024, 1024, 64, True, 128, "bhsd", "float16", None)),
        ("flash decode", lambda: fd.kernels_for(8, 32, 8, 2048, 128, 8, "float16", None)),
        ("mla decode", lambda: mla.kernel_for(8, 128, 4096, 4, False, 0, "bfloat16", None)),
    ]
    return cases


def _ints(low, high, shape, seed):
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed), dtype=torch.int32)


def _with_contents():
    """(label, kernel, arguments) of shipped kernels whose loop bounds, branches or indices
    read a tensor: counted from that tensor's seeded contents (the others by shape)."""
    fd, mla, moe = _mod("flash_decoding"), _mod("mla_decode"), _mod("moe")
    split, _ = fd.kernels_for(8, 32, 8, 2048, 128, 8, "float16", None)
    n, experts, block = 1000, 64, 64
    slots = n + experts * (block - 1)
    topk = _ints(-1, experts, (n,), 3)
    return [
        ("flash decode split", split,
         ((8, 32, 128), (8, 2048, 8, 128), (8, 2048, 8, 128), _ints(1, 2049, (8,), 1), (8, 32, 8, 128), (8, 32, 8))),
        ("mla decode", mla.kernel_for(8, 128, 4096, 4, False, 0, "bfloat16", None),
         ((8, 128, 576), (8, 4096, 576), (8, 1), _ints(1, 4097, (8,), 2), (8, 128, 512), (8, 128))),
        ("moe align", moe.align_kernel_for(experts, block, torch.int32),
         (topk, (experts, moe.align_chunks(n, experts)), (slots,), (-(-slots // block),), (1,), (experts + 1,), (n,))),
        ("moe permute", moe.permute_kernel_for(4096, 2, H), ((500, 4096), _ints(-1, 500, (900,), 4), (900, 4096))),
        ("moe combine", moe.combine_kernel_for(4096, 2, BF, torch.float32),
         ((1200, 4096), (500, 2), _ints(0, 1200, (500, 2), 5), (500, 4096))),
    ]


def _analyze(kernels) -> dict:
    if not isinstance(kernels, (tuple, list)):
        kernels = [kernels]
    return {f"{i}": _describe(k) for i, k in enumerate(kernels)}


def _describe(kernel, args=None) -> dict:
    out = {"target": kernel.target}
    sizes = {str(v.name): 1000 + 37 * i for i, v in enumerate(kernel.prim_func.dynamic_vars)}
    try:
        if args is None:
            result = Analyzer(kernel, compile=False, **sizes).calculate()
        else:
            result = Analyzer(kernel, *args, compile=False).calculate()
    except ValueError as err:  # a count needing tensor contents, or a kernel of CUDA source
        out["counts"] = {"error": type(err).__name__}
    else:
        out["counts"] = [{"grid": list(k.grid), "tensor_flops": k.tensor_flops, "cuda_flops": k.cuda_flops,
                          "loads": k.loads, "stores": k.stores, "tensor_bytes": k.tensor_bytes,
                          "fragment_registers": k.fragment_registers, "notes": sorted(k.notes)}
                         for k in result.kernels]
    usages = []
    for index in range(kernel.num_kernels):
        try:
            usage = kernel.register_usage(index)
        except ValueError as err:
            usages.append({"error": type(err).__name__})
            continue
        usages.append(None if usage is None else {"fragments": dict(usage.fragments), "peak": usage.peak,
                                                  "limit": usage.limit, "threads": usage.threads})
    out["registers"] = usages
    return out


def _docs_kernels(tmp_path) -> dict:
    """Every JITKernel the documentation's CPU examples build, by page and order."""
    examples = importlib.import_module("test_docs").examples
    made = []
    cls = importlib.import_module("tegula.jit").JITKernel
    real_init = cls.__init__

    def recording_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(self)

    out = {}
    cls.__init__ = recording_init
    try:
        for page in sorted(DOCS.glob("*.md")):
            made.clear()
            examples.run_page(page, "cpu", str(tmp_path / page.stem))
            seen = set()
            for i, kernel in enumerate(made):
                if id(kernel) in seen:
                    continue
                seen.add(id(kernel))
                out[f"{page.name} #{i} {kernel.prim_func.name}"] = kernel
    finally:
        cls.__init__ = real_init
    return out


def _forget_built_kernels():
    """Empties the shipped kernels' caches (each module's lru_caches and @jit memos), so the
    kernels are built here in the order of a fresh process whatever ran earlier in this one
    (the docs' pages build some of them; a cached one is not built again, and
    `_docs_kernels` would not see it)."""
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("tegula.kernels") and module is not None:
            for value in vars(module).values():
                if callable(getattr(value, "cache_clear", None)) and not isinstance(value, type):
                    value.cache_clear()


def _current(tmp_path, monkeypatch) -> dict:
    monkeypatch.setenv("TEGULA_TARGET", "sm_90a")
    _forget_built_kernels()
    values = {}
    for label, build in _shipped():
        values["shipped: " + label] = _analyze(build())
    for label, kernel, args in _with_contents():
        values["shipped, with contents: " + label] = {"0": _describe(kernel, args)}
    for label, kernel in _docs_kernels(tmp_path).items():
        values["docs: " + label] = _analyze(kernel)
    return values


def test_counts_and_register_estimates_of_shipped_and_docs_kernels_are_frozen(tmp_path, monkeypatch):
    current = json.loads(json.dumps(_current(tmp_path, monkeypatch)))
    if UPDATE or not GOLDEN.exists():
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
        if not UPDATE:
            pytest.fail(f"{GOLDEN.name} did not exist: written now, from these analyses")
    frozen = json.loads(GOLDEN.read_text())
    assert len(frozen) > 100 and any(v["0"]["counts"] != {"error": "ValueError"} for v in frozen.values())
    assert sorted(current) == sorted(frozen), "the set of kernels changed"
    changed = [label for label in frozen if current[label] != frozen[label]]
    detail = "\n".join(f"{label}:\n  frozen  {frozen[label]}\n  now     {current[label]}" for label in changed[:5])
    assert not changed, f"{len(changed)} of {len(frozen)} kernels' numbers changed:\n{detail}"
