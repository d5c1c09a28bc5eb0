"""FlashAttention and flash decoding compile without a GPU: the generated source uses the
tensor-core path (gemm_ss for Q Kᵀ from shared memory, gemm_rs for P V with P in
registers), loads K and V with cp.async into multi-buffered shared memory inside a software
pipeline, and NVRTC turns it into machine code for sm_80 and sm_90a. The entry points'
argument checks that need no GPU run here too."""
import ast
import functools
import importlib
import re

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

fa = importlib.import_module("tegula.kernels.flash_attention")
fd = importlib.import_module("tegula.kernels.flash_decoding")

TARGETS = ["sm_80", "sm_90a"]
ELEM_BYTES = {"float16": 2, "bfloat16": 2}

# name -> arguments of flash_attention_program (tiles from the entry point's default_config).
ATTENTION_VARIANTS = {
    "d64-full-aligned": dict(batch=1, heads=4, kv_heads=4, seq_q=256, seq_kv=256, dim=64),
    "d128-causal-gqa-bhsd-bf16": dict(batch=2, heads=8, kv_heads=2, seq_q=300, seq_kv=1000, dim=128,
                                      is_causal=True, layout="bhsd", dtype="bfloat16"),
    "d256-causal-ragged": dict(batch=1, heads=4, kv_heads=4, seq_q=77, seq_kv=77, dim=256, is_causal=True),
    "d64-window-full-bhsd": dict(batch=1, heads=8, kv_heads=2, seq_q=1000, seq_kv=1000, dim=64, window=64,
                                 layout="bhsd"),
    "d128-causal-window-sq>skv-bf16": dict(batch=1, heads=4, kv_heads=4, seq_q=300, seq_kv=100, dim=128,
                                           is_causal=True, window=200, dtype="bfloat16"),
}


def _attention_args(name, **override):
    args = dict(ATTENTION_VARIANTS[name])
    cfg = fa.default_config(args["seq_q"], args["dim"], args.get("is_causal", False))
    cfg.update(override)
    return args, cfg


def _pass_configs(jit_function):
    """The pass configs the entry point compiles with (fast math, ...), so that what is
    checked here is what runs."""
    return dict(getattr(jit_function, "settings", {}).get("pass_configs") or {}) or None


@functools.lru_cache(maxsize=None)
def _compile_attention(name, target, stages=None):
    args, cfg = _attention_args(name, **({} if stages is None else {"num_stages": stages}))
    kernel = tegula.compile(fa.flash_attention_program(**args, **cfg), out_idx=[3, 4], target=target,
                            pass_configs=_pass_configs(fa.flash_attention_kernel))
    return kernel.get_kernel_source(), kernel.cubin()


DECODE_VARIANTS = {
    "gqa4-d128-split3": dict(batch=5, heads=32, kv_heads=8, max_seqlen=1000, dim=128, num_split=3),
    "mqa16-d64-split7-bf16": dict(batch=1, heads=16, kv_heads=1, max_seqlen=4096, dim=64, num_split=7,
                                  dtype="bfloat16"),
}


@functools.lru_cache(maxsize=None)
def _compile_decode(name, target):
    args = DECODE_VARIANTS[name]
    split = tegula.compile(fd.decode_split_program(**args), out_idx=[4, 5], target=target,
                           pass_configs=_pass_configs(fd.decode_split_kernel))
    combine = tegula.compile(fd.decode_combine_program(args["batch"], args["heads"], args["dim"], args["num_split"],
                                                       dtype=args.get("dtype", "float16")),
                             out_idx=[2], target=target, pass_configs=_pass_configs(fd.decode_combine_kernel))
    return split.get_kernel_source(), split.cubin(), combine.get_kernel_source(), combine.cubin()


def _loop_body(src, var="kb"):
    """Text of the one `for (int <var> ...)` loop: from its header to its matching brace."""
    headers = [m.start() for m in re.finditer(rf"for \(int {var}\b", src)]
    assert len(headers) == 1, f"expected one loop over {var}, found {len(headers)}"
    start = src.index("{", headers[0])
    depth = 0
    for pos in range(start, len(src)):
        depth += {"{": 1, "}": -1}.get(src[pos], 0)
        if depth == 0:
            return src[headers[0]:pos + 1]
    raise AssertionError("unbalanced braces in the generated source")


def _stage(ahead, stages, var="kb"):
    """Regex for the ring-buffer slot `(kb + ahead) mod stages`, as `%` or as floormod."""
    term = var if ahead == 0 else rf"\({var} \+ {ahead}\)"
    return rf"(?:{term} % {stages}|floormod\({term}, {stages}\))"


def _smem_offsets(src):
    return {name: int(off) for name, off in
            re.findall(r"\w+\* (\w+) = reinterpret_cast<\w+\*>\(tegula_smem \+ (\d+)\)", src)}


def _assert_pipelined(src, stages, block_n, dim, elem_bytes):
    """K and V tiles go through `stages` shared buffers, scheduled by consumer: the
    prologue loads `stages` tiles of each; in the loop each is waited for where it is first
    read (the V tile after Q Kᵀ, so it loads on through Q Kᵀ and the softmax) and its slot
    reloaded with the tile `stages` ahead as soon as its gemm has read it."""
    body = _loop_body(src)
    prologue = src[:src.index(body)]
    gemm_ss = re.search(r"gemm_ss<[^;]*K_shared\[[^;]*;", body)
    gemm_rs = re.search(r"gemm_rs<[^;]*V_shared\[[^;]*;", body)
    assert gemm_ss and re.search(_stage(0, stages), gemm_ss.group()), "Q Kᵀ does not read slot kb % stages"
    assert gemm_rs and re.search(_stage(0, stages), gemm_rs.group()), "P V does not read slot kb % stages"
    for buf, gemm in (("K_shared", gemm_ss), ("V_shared", gemm_rs)):
        assert len(re.findall(rf"cp_async_16_pred\(&{buf}\[", prologue)) >= stages, f"the prologue loads no {stages} tiles of {buf}"
        refill = re.search(rf"cp_async_16_pred\(&{buf}\[[^\]]*{_stage(0, stages)}", body)
        assert refill, f"{buf}: the loop does not reload slot kb % {stages}"
        assert refill.start() > gemm.end(), f"{buf} is reloaded before its gemm has read it"
    assert "cp_async_commit();" in prologue and body.count("cp_async_commit();") == 2
    waits = [(m.start(), int(m.group(1))) for m in re.finditer(r"cp_async_wait<(\d+)>\(\);", body)]
    assert [w for _, w in waits] == [2 * stages - 1] * 2, f"expected two waits leaving 2 * stages - 1 groups, found {waits}"
    assert waits[0][0] < gemm_ss.start() and gemm_ss.end() < waits[1][0] < gemm_rs.start(), \
        "the V tile is not waited for between the two gemms"
    # Every stage has its own K tile: the K buffer spans `stages` tiles before V begins.
    smem = _smem_offsets(src)
    tile = block_n * dim * elem_bytes
    if smem["V_shared"] > smem["K_shared"]:
        assert smem["V_shared"] - smem["K_shared"] >= stages * tile, smem
    else:
        assert smem["K_shared"] - smem["V_shared"] >= stages * tile, smem


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(ATTENTION_VARIANTS))
def test_flash_attention_compiles_to_tensor_core_code(name, target):
    src, cubin = _compile_attention(name, target)
    assert f"for {target}" in src.splitlines()[0]
    # sm_90a runs both gemms on wgmma, sm_80 on mma.sync.
    gemm = "tegula::wgmma_" if target == "sm_90a" else "tegula::gemm_"
    assert gemm + "ss<" in src, "Q Kᵀ is not a shared x shared tensor-core gemm"
    assert gemm + "rs<" in src, "P V is not a register x shared tensor-core gemm"
    # sm_90a: bulk tensor copies feeding a warp-specialised loop; elsewhere cp.async.
    if target == "sm_90a":
        assert "tma_load_" in src and "mbar_wait" in src, "K/V tiles are not loaded by the copy engine"
    else:
        assert "cp_async_16_pred" in src, "K/V tiles are not loaded with cp.async"
    assert isinstance(cubin, (bytes, bytearray)) and len(cubin) > 1000
    args = ATTENTION_VARIANTS[name]
    ctype = "bfloat16_t" if args.get("dtype") == "bfloat16" else "half_t"
    assert f"{ctype}* __restrict__ Q" in src and "float* __restrict__ Lse" in src


@pytest.mark.parametrize("name", list(ATTENTION_VARIANTS))
def test_masked_blocks_are_skipped_by_the_loop_bounds(name):
    """Causal and windowed attention bound the key loop per query block (it depends on bx);
    full attention runs every block the same trip count."""
    src, _ = _compile_attention(name, "sm_80")
    header = _loop_body(src).split("{", 1)[0]
    args = ATTENTION_VARIANTS[name]
    per_block = args.get("is_causal", False) or args.get("window", 0) > 0
    assert ("bx" in header) == per_block, header


@pytest.mark.parametrize("name,stages", [("d64-full-aligned", 2), ("d64-full-aligned", 3),
                                         ("d128-causal-gqa-bhsd-bf16", 2), ("d256-causal-ragged", 2)])
def test_flash_attention_key_value_loop_is_pipelined(name, stages):
    args, cfg = _attention_args(name, num_stages=stages)
    default = _attention_args(name)[1]["num_stages"]
    src, _ = _compile_attention(name, "sm_80", None if stages == default else stages)
    _assert_pipelined(src, stages, cfg["block_N"], args["dim"], ELEM_BYTES[args.get("dtype", "float16")])


def test_attention_kernel_body_stays_short():
    """The TileLang-style kernel is meant to read like the paper's pseudo-code."""
    with open(fa.__file__) as f:
        tree = ast.parse(f.read())
    bodies = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "attention"]
    assert len(bodies) == 1
    node = bodies[0]
    lines = node.end_lineno - node.body[0].lineno + 1
    assert lines <= 90, f"the attention prim_func body has {lines} lines"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(DECODE_VARIANTS))
def test_flash_decoding_compiles(name, target):
    split_src, split_cubin, combine_src, combine_cubin = _compile_decode(name, target)
    for src, cubin in ((split_src, split_cubin), (combine_src, combine_cubin)):
        assert f"for {target}" in src.splitlines()[0]
        assert isinstance(cubin, (bytes, bytearray)) and len(cubin) > 1000
    assert "tegula::gemm_ss<" in split_src and "tegula::gemm_rs<" in split_src
    assert "cp_async_16_pred" in split_src
    assert "seqlens[bz]" in split_src, "the split kernel does not read the sequence's length"
    body = _loop_body(split_src)
    for buf in ("K_shared", "V_shared"):
        assert re.search(rf"cp_async_16_pred\(&{buf}\[[^\]]*{_stage(1, 2)}", body), f"{buf} is not double-buffered"
    assert len(re.findall(r"cp_async_wait<\d+>\(\);", body)) == 1
    assert "exp2" in combine_src and "Lse_part" in combine_src


# --- argument checks that need no GPU -----------------------------------------------------------

def _cpu_qkv():
    q = torch.randn(1, 16, 4, 64).half()
    k = torch.randn(1, 16, 4, 64).half()
    return q, k, k.clone()


def test_flash_attention_rejects_cpu_tensors_naming_q():
    q, k, v = _cpu_qkv()
    with pytest.raises(ValueError, match=r"flash_attention: q must be a CUDA tensor"):
        fa.flash_attention(q, k, v)


def test_flash_attention_rejects_a_non_tensor_and_a_bad_layout():
    q, k, v = _cpu_qkv()
    with pytest.raises(TypeError, match=r"\bq\b must be a torch\.Tensor"):
        fa.flash_attention(q.tolist(), k, v)
    with pytest.raises(ValueError, match=r"layout"):
        fa.flash_attention(q, k, v, layout="sbhd")


def test_flash_decode_rejects_cpu_tensors_naming_q():
    q = torch.randn(2, 8, 64).half()
    cache = torch.randn(2, 128, 8, 64).half()
    lens = torch.full((2,), 128, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"flash_decode: q must be a CUDA tensor"):
        fd.flash_decode(q, cache, cache.clone(), lens)
