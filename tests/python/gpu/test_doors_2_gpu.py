"""The doors of tests/python/cpu/test_doors_2.py, launched.

- A kernel whose tensors are all outputs runs on torch's current device: by default, after
  torch.cuda.set_device, inside `with torch.cuda.device(i)` (two GPUs or more), and on the
  current stream.
- rms_norm, rms_norm_silu, layer_norm and add_rms_norm against torch in float32 on the
  upcast inputs (on the CPU, the reference; and torch's CUDA kernels where they compute
  the same statistics): NaN, +inf and -inf at the same places, the finite values close.
- Checked indices: each entry point that takes index tensors raises, with check_indices=True
  or TEGULA_CHECK_INDICES=1, on a bad block table, length, offset, position or id, naming
  the entry; on good ones it gives the unchecked result bit for bit; a CUDA graph capture
  skips the checks.
"""
import importlib
import zlib

import pytest
import torch
import torch.nn.functional as F

import tegula
import tegula.kernels as K
import tegula.language as T

pytestmark = pytest.mark.gpu

mla = importlib.import_module("tegula.kernels.mla_decode")
H16, B16 = torch.float16, torch.bfloat16
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _gen(tag, device="cuda"):
    return torch.Generator(device=device).manual_seed(zlib.crc32(repr(tag).encode()))


def randn(shape, dtype, tag, scale=1.0):
    return (torch.randn(shape, generator=_gen(tag), device="cuda") * scale).to(dtype)


# ---------------------------------------------------------------- a kernel of outputs only


@tegula.jit(out_idx=[0, 1])
def iota(n):
    """Out[i] = i + start and Halves[r, i] = (i + r) / 2: two outputs and a scalar input."""

    @T.prim_func
    def iota_kernel(Out: T.Tensor((n,), "int32"), Halves: T.Tensor((2, n), "float32"), start: T.int32):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    Out[bx * 128 + i] = bx * 128 + i + start
                    Halves[0, bx * 128 + i] = T.cast(bx * 128 + i, "float32") * 0.5
                    Halves[1, bx * 128 + i] = T.cast(bx * 128 + i + 1, "float32") * 0.5

    return iota_kernel


def _check_iota(out, halves, start, device):
    assert out.device == device and halves.device == device
    i = torch.arange(1000, device=device)
    assert torch.equal(out, (i + start).int())
    assert torch.equal(halves, torch.stack((i * 0.5, (i + 1) * 0.5)).float())


def test_a_kernel_of_outputs_only_runs_on_the_current_device():
    out, halves = iota(1000)(7)
    _check_iota(out, halves, 7, torch.device("cuda", torch.cuda.current_device()))


def test_a_kernel_of_outputs_only_runs_on_the_current_stream():
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out, halves = iota(1000)(-3)
    stream.synchronize()
    _check_iota(out, halves, -3, torch.device("cuda", torch.cuda.current_device()))


def test_a_kernel_of_outputs_only_names_a_bad_scalar():
    from tegula import env

    with pytest.raises(env.native().ArgumentError, match=r"argument 'start'"):
        iota(1000)("seven")
    with pytest.raises(env.native().ArgumentError, match=r"expected 1 argument\(s\) \(start\), got 0"):
        iota(1000)()


def test_a_kernel_of_outputs_only_follows_set_device_and_the_device_context():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    kernel = iota(1000)
    with torch.cuda.device(1):
        out, halves = kernel(5)
    _check_iota(out, halves, 5, torch.device("cuda", 1))
    before = torch.cuda.current_device()
    torch.cuda.set_device(1)
    try:
        out, halves = kernel(9)
    finally:
        torch.cuda.set_device(before)
    _check_iota(out, halves, 9, torch.device("cuda", 1))
    out, halves = kernel(2)
    _check_iota(out, halves, 2, torch.device("cuda", before))


# ---------------------------------------------------------------- NaN and inf in the norms


def rows(dtype, n, tag):
    """(rows, overflows): rows holding ±inf, NaN, the dtype's maximum and values whose
    squares overflow float32 (as tests/python/cpu/test_doors_2.py's), made on the CPU;
    overflows marks the rows whose float32 statistics overflow, where torch's CUDA kernels
    (Welford's method for layer_norm, and for rows not a multiple of 4) and its
    definition part ways."""
    gen = _gen(tag, "cpu")
    big = torch.finfo(dtype).max
    huge = 5e18 if dtype != torch.float16 else 100.0
    base = lambda: torch.randn(n, generator=gen)  # noqa: E731
    out, overflow = [], []

    def add(r, overflows=False):
        out.append(r)
        overflow.append(overflows and dtype != torch.float16)

    r = base(); r[3] = float("inf"); add(r)                             # noqa: E702
    r = base(); r[3] = float("-inf"); add(r)                            # noqa: E702
    r = base(); r[3], r[5] = float("inf"), float("-inf"); add(r)        # noqa: E702
    r = base(); r[2] = float("nan"); add(r)                             # noqa: E702
    add(torch.full((n,), float("inf")))
    add(torch.full((n,), big), True)
    add(torch.full((n,), -big), True)
    r = base(); r[1] = big; add(r, True)                                # noqa: E702
    r = base(); r[: n // 2] = big; add(r, True)                         # noqa: E702
    add(base() * 100 + 60000)
    add(base() * huge, True)
    add(torch.zeros(n))
    add(base() * 1e-6)
    return torch.stack(out).to(dtype), torch.tensor(overflow)


def check_same_pattern(out, ref, dtype, what):
    out, ref = out.cpu(), ref.cpu().to(dtype)
    for name, test in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        bad = (test(out) != test(ref)).nonzero()
        assert bad.numel() == 0, f"{what}: {name} differs at {bad[:5].tolist()} (of {bad.shape[0]})"
    finite = torch.isfinite(ref)
    tol = {torch.float16: 4e-3, torch.bfloat16: 2e-2, torch.float32: 2e-4}[dtype]
    torch.testing.assert_close(out[finite].float(), ref[finite].float(), rtol=tol, atol=tol, msg=what)


def _norm_call(kind, x, tag):
    """(Tegula's result, torch's function of float32 tensors, the inputs it takes)."""
    n, dtype = x.shape[-1], x.dtype
    w = (1 + 0.1 * randn((n,), torch.float32, (tag, "w"))).to(dtype)
    b = (0.1 * randn((n,), torch.float32, (tag, "b"))).to(dtype)
    if kind == "rms_norm":
        return K.rms_norm(x, w, 1e-6), lambda x, w: F.rms_norm(x, (n,), w, 1e-6), (x, w)
    if kind == "rms_norm_silu":
        return K.rms_norm_silu(x, w, 1e-6), lambda x, w: F.silu(F.rms_norm(x, (n,), w, 1e-6)), (x, w)
    if kind == "layer_norm":
        return K.layer_norm(x, w, b, 1e-5), lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5), (x, w, b)
    r = randn(x.shape, dtype, (tag, "r"))
    if dtype == torch.float16:
        r[9] = 10000.0      # 60000 + 10000 overflows float16: h = inf, as torch's x + r gives
    y, h = K.add_rms_norm(x, r, w, 1e-6)
    assert torch.allclose(h, x + r, rtol=0, atol=0, equal_nan=True)     # NaN and inf where torch's sum has them
    return y, lambda h, w: F.rms_norm(h, (n,), w, 1e-6), (x + r, w)


@pytest.mark.parametrize("n", [72, 999, 4096, 20000])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["rms_norm", "rms_norm_silu", "layer_norm", "add_rms_norm"])
def test_norms_give_torchs_nan_and_inf_pattern(kind, dtype, n):
    tag = (kind, dtype, n)
    x, overflows = rows(dtype, n, tag)
    out, torch_fn, inputs = _norm_call(kind, x.cuda(), tag)
    # The reference: torch's definition in float32 on the upcast inputs.
    ref = torch_fn(*(t.cpu().float() for t in inputs))
    # A layer norm's rows whose float32 statistics overflow: torch's CPU and CUDA kernels
    # disagree with each other there (the order of the sums decides), so neither is the bar.
    rows_cpu = ~overflows if kind == "layer_norm" else torch.ones_like(overflows)
    check_same_pattern(out.cpu()[rows_cpu], ref[rows_cpu], dtype, f"{kind} {dtype} n={n} against torch on the CPU")
    # torch's CUDA kernels, on the rows where they compute the definition's statistics: an
    # rms norm of rows a multiple of 4 sums squares (every row); otherwise they take
    # Welford's running mean, which agrees but where float32 overflows, and for an rms
    # norm where the row holds an inf (its mean inf, its variance NaN: the whole row NaN).
    ref_cuda = torch_fn(*(t.float() for t in inputs)).cpu()
    if kind == "layer_norm":
        keep = ~overflows
    elif n % 4 == 0:
        keep = torch.ones_like(overflows)
    else:
        keep = ~overflows & torch.isfinite(inputs[0].cpu().float()).all(-1)
    # Rows where torch's CUDA kernel disagrees with its own float32 definition (a float16 row
    # of one value near the maximum, whose mean Welford's running update leaves inexact, so
    # x - mean is not 0) set no bar: the definition, checked above, does.
    tol = {torch.float16: 4e-3, torch.bfloat16: 2e-2, torch.float32: 2e-4}[dtype]
    agree = torch.tensor([torch.allclose(a.float(), b.to(dtype).float(), rtol=tol, atol=tol, equal_nan=True)
                          for a, b in zip(ref_cuda.to(dtype), ref)])
    keep = keep & agree
    check_same_pattern(out.cpu()[keep], ref_cuda[keep], dtype, f"{kind} {dtype} n={n} against torch on the GPU")


def test_a_residual_of_another_shape_is_named_before_any_launch():
    x, r, w = randn((37, 999), H16, "x"), randn((37, 1000), H16, "r"), randn((999,), H16, "w")
    with pytest.raises(ValueError, match=r"^add_rms_norm: residual must have the shape \(37, 999\) of x"):
        K.add_rms_norm(x, r, w)
    with pytest.raises(ValueError, match=r"^add_rms_norm: residual must have the shape \(37, 999\) of x"):
        K.add_rms_norm(x, r, w, inplace=True)
    assert r.shape == (37, 1000)


# ---------------------------------------------------------------- checked indices


def _paged(dtype=H16):
    """Two sequences of 150 and 200 tokens over 8 pages of 64; their tables in order."""
    q = randn((2, 16, 576), dtype, "mla-q")
    pages = randn((8, 64, 576), dtype, "mla-kv")
    table = torch.tensor([[0, 1, 2, -1], [3, 4, 5, 6]], dtype=torch.int32, device="cuda")
    lens = torch.tensor([150, 200], dtype=torch.int32, device="cuda")
    return q, pages, lens, table


def test_mla_decode_checks_its_block_table(monkeypatch):
    monkeypatch.delenv("TEGULA_CHECK_INDICES", raising=False)
    q, pages, lens, table = _paged()
    plain = mla.mla_decode(q, pages, lens, block_table=table)
    assert torch.equal(mla.mla_decode(q, pages, lens, block_table=table, check_indices=True), plain)
    past = table.clone()
    past[1, 1] = 8
    with pytest.raises(ValueError, match=r"^mla_decode: block_table\[1, 1\] = 8 is not a page of kv_cache: the "
                                         r"entries a sequence reads must be in \[0, 7\]"):
        mla.mla_decode(q, pages, lens, block_table=past, check_indices=True)
    negative = table.clone()
    negative[0, 2] = -5
    with pytest.raises(ValueError, match=r"block_table\[0, 2\] = -5"):
        mla.mla_decode(q, pages, lens, block_table=negative, check_indices=True)
    mla.mla_decode(q, pages, lens, block_table=past)          # unchecked: a quiet answer, as before
    monkeypatch.setenv("TEGULA_CHECK_INDICES", "1")
    with pytest.raises(ValueError, match=r"block_table\[1, 1\] = 8"):
        mla.mla_decode(q, pages, lens, block_table=past)
    mla.mla_decode(q, pages, lens, block_table=past, check_indices=False)
    with pytest.raises(ValueError, match=r"^mla_decode: cache_seqlens\[0\] = 300 is out of range: its entries must "
                                         r"be in \[0, 256\]"):
        mla.mla_decode(q, pages, torch.tensor([300, 200], dtype=torch.int32, device="cuda"), block_table=table)
    with pytest.raises(ValueError, match=r"^mla_decode: block_table\[1, 1\] = 8"):
        torch.ops.tegula.mla_decode(q, pages, lens, past, None, None)


def test_mla_decode_checks_the_lengths_of_a_contiguous_cache():
    q = randn((2, 16, 576), H16, "mla-q")
    kv = randn((2, 128, 576), H16, "mla-kv-c")
    lens = torch.tensor([128, 7], dtype=torch.int32, device="cuda")
    assert torch.equal(mla.mla_decode(q, kv, lens, check_indices=True), mla.mla_decode(q, kv, lens))
    with pytest.raises(ValueError, match=r"^mla_decode: cache_seqlens\[1\] = -1 is out of range"):
        mla.mla_decode(q, kv, torch.tensor([128, -1], dtype=torch.int32, device="cuda"), check_indices=True)


def test_flash_decode_checks_its_lengths():
    q = randn((2, 8, 64), H16, "fd-q")
    k, v = randn((2, 100, 2, 64), H16, "fd-k"), randn((2, 100, 2, 64), H16, "fd-v")
    lens = torch.tensor([100, 33], dtype=torch.int32, device="cuda")
    assert torch.equal(K.flash_decode(q, k, v, lens, check_indices=True), K.flash_decode(q, k, v, lens))
    with pytest.raises(ValueError, match=r"^flash_decode: cache_seqlens\[0\] = 101 is out of range: its entries "
                                         r"must be in \[0, 100\]"):
        K.flash_decode(q, k, v, torch.tensor([101, 33], dtype=torch.int32, device="cuda"), check_indices=True)


def test_grouped_gemm_checks_its_offsets():
    a, w = randn((64, 32), H16, "gg-a"), randn((3, 32, 48), H16, "gg-w")
    good = torch.tensor([0, 10, 10, 64], dtype=torch.int32, device="cuda")
    out = K.grouped_gemm(a, w, good)
    assert torch.equal(K.grouped_gemm(a, w, good, check_indices=True), out)
    with pytest.raises(ValueError, match=r"^grouped_gemm: offsets\[2\] = 5 is less than offsets\[1\] = 10: offsets "
                                         r"must be non-decreasing, from offsets\[0\] >= 0 to offsets\[-1\] <= 64"):
        K.grouped_gemm(a, w, torch.tensor([0, 10, 5, 64], dtype=torch.int32, device="cuda"), check_indices=True)
    with pytest.raises(ValueError, match=r"^grouped_gemm: offsets\[3\] = 65 is past the end"):
        K.grouped_gemm(a, w, torch.tensor([0, 10, 20, 65], dtype=torch.int32, device="cuda"), check_indices=True)


def test_rope_checks_positions_against_its_tables():
    cos, sin = (t.cuda() for t in K.rope_cache(32, 64, device="cpu"))
    q, k = randn((2, 5, 4, 64), B16, "rope-q"), randn((2, 5, 2, 64), B16, "rope-k")
    good = torch.tensor([[0, 1, 2, 3, 31], [7, 8, 9, 10, 11]], dtype=torch.int32, device="cuda")
    want = K.rope(q, k, cos, sin, good)
    got = K.rope(q, k, cos, sin, good, check_indices=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    bad = good.clone()
    bad[1, 3] = 32
    with pytest.raises(ValueError, match=r"^rope: positions\[1, 3\] = 32 is out of range: its entries must be in "
                                         r"\[0, 31\] \(the 32 rows of the cos and sin tables\)"):
        K.rope(q, k, cos, sin, bad, check_indices=True)
    with pytest.raises(ValueError, match=r"positions\[1, 3\] = 32"):
        K.rope(q.clone(), k.clone(), cos, sin, bad, inplace=True, check_indices=True)
    K.rope(q, k, positions=bad, check_indices=True)     # computed angles: every position has one


def test_moe_routing_checks_its_ids_and_positions():
    topk = torch.tensor([[0, 3], [7, -1], [2, 3]], dtype=torch.int32, device="cuda")
    align = K.moe_align_block_size(topk, 8, 4)
    checked = K.moe_align_block_size(topk, 8, 4, check_indices=True)
    assert all(torch.equal(a, b) for a, b in zip(align, checked))
    with pytest.raises(ValueError, match=r"^moe_align_block_size: topk_ids\[1, 0\] = 8 is out of range: its entries "
                                         r"must be in \[0, 7\] or -1"):
        K.moe_align_block_size(torch.tensor([[0, 3], [8, -1], [2, 3]], dtype=torch.int32, device="cuda"), 8, 4,
                               check_indices=True)
    x = randn((3, 64), H16, "moe-x")
    xs = K.moe_permute(x, align.sorted_token_ids, 2)
    assert torch.equal(K.moe_permute(x, align.sorted_token_ids, 2, check_indices=True), xs)
    bad_ids = align.sorted_token_ids.clone()
    bad_ids[0] = 7
    with pytest.raises(ValueError, match=r"^moe_permute: sorted_token_ids\[0\] = 7 is out of range: its entries must "
                                         r"be in \[0, 6\]"):
        K.moe_permute(x, bad_ids, 2, check_indices=True)
    weights = torch.rand((3, 2), generator=_gen("moe-w"), device="cuda")
    out = K.moe_combine(xs, weights, align.token_positions)
    assert torch.equal(K.moe_combine(xs, weights, align.token_positions, check_indices=True), out)
    bad_pos = align.token_positions.clone()
    bad_pos[2, 1] = xs.shape[0]
    with pytest.raises(ValueError, match=rf"^moe_combine: token_positions\[2, 1\] = {xs.shape[0]} is out of range"):
        K.moe_combine(xs, weights, bad_pos, check_indices=True)


def test_a_cuda_graph_capture_skips_the_checks():
    """A captured call reads no index on the host (capture forbids the read); the replay
    gives what the eager call gives."""
    a, w = randn((64, 32), H16, "cg-a"), randn((3, 32, 48), H16, "cg-w")
    offsets = torch.tensor([0, 10, 30, 64], dtype=torch.int32, device="cuda")
    want = K.grouped_gemm(a, w, offsets, check_indices=True)   # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = K.grouped_gemm(a, w, offsets, check_indices=True)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want)


def test_compiled_calls_check_their_data_when_they_run():
    """torch.compile traces without reading any index (fake tensors); the compiled code
    runs the op on real tensors, which checks them when asked."""
    a, w = randn((64, 32), H16, "tc-a"), randn((3, 32, 48), H16, "tc-w")
    fn = torch.compile(lambda a, w, o: K.grouped_gemm(a, w, o, check_indices=True), fullgraph=True, backend="eager")
    good = torch.tensor([0, 10, 30, 64], dtype=torch.int32, device="cuda")
    assert torch.equal(fn(a, w, good), K.grouped_gemm(a, w, good))
    with pytest.raises(ValueError, match=r"offsets\[2\] = 5 is less than offsets\[1\] = 10"):
        fn(a, w, torch.tensor([0, 10, 5, 64], dtype=torch.int32, device="cuda"))
