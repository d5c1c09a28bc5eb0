"""More doors, without a GPU: a kernel whose tensors are all outputs, NaN and inf in the
norms, argument checks on traced calls, and checked indices.

- A kernel with no input tensor (out_idx names every tensor) allocates its outputs on
  torch's current CUDA device and launches there, instead of refusing the call.
- rms_norm, rms_norm_silu, layer_norm and add_rms_norm give torch's NaN / inf pattern
  (torch in float32 on the upcast inputs) on rows holding ±inf, NaN, values at the
  dtype's maximum and values whose squares overflow float32: the programs as written
  (tegula.testing.reference) and as lowered (simulate), one-pass and chunked.
- Every operator's fake runs its entry point's checks, so a traced call (torch.compile,
  FakeTensorMode, meta tensors) names a bad argument as an eager call does; `out=` too.
- The index checks (kernels/_index_checks.py) find the first bad entry of a block table,
  lengths, offsets, positions and ids, name it, and pass good tables; they never read
  fake or meta tensors.
tests/python/gpu/test_doors_2_gpu.py launches the same doors.
"""
import importlib
import os
import zlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

tegula = pytest.importorskip("tegula")
import tegula.kernels as K  # noqa: E402
import tegula.language as T  # noqa: E402
import tegula.testing as tt  # noqa: E402
from tegula import env  # noqa: E402
from tegula.kernels._common import RowPlan, dtype_name, plan_rows  # noqa: E402

jit = importlib.import_module("tegula.jit")
ops = importlib.import_module("tegula.kernels._ops")
index_checks = importlib.import_module("tegula.kernels._index_checks")
rmsnorm = importlib.import_module("tegula.kernels.rmsnorm")
layernorm = importlib.import_module("tegula.kernels.layernorm")
fused_norm = importlib.import_module("tegula.kernels.fused_norm")
mla = importlib.import_module("tegula.kernels.mla_decode")

H = torch.float16
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def argument_error():
    return env.native().ArgumentError


# ---------------------------------------------------------------- a kernel of outputs only


def iota_program(n):
    """Out[i] = i + start and Halves[r, i] = (i + r) / 2: two outputs and a scalar input."""

    @T.prim_func
    def iota(Out: T.Tensor((n,), "int32"), Halves: T.Tensor((2, n), "float32"), start: T.int32):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    Out[bx * 128 + i] = bx * 128 + i + start
                    Halves[0, bx * 128 + i] = T.cast(bx * 128 + i, "float32") * 0.5
                    Halves[1, bx * 128 + i] = T.cast(bx * 128 + i + 1, "float32") * 0.5

    return iota


@pytest.fixture(scope="module")
def iota_kernel():
    return tegula.compile(iota_program(1000), out_idx=[0, 1], target="sm_90a")


def test_the_program_of_outputs_only_computes_an_iota(iota_kernel):
    out, halves = tt.reference(iota_kernel, 7)
    i = torch.arange(1000)
    assert torch.equal(out, (i + 7).int())
    assert torch.equal(halves, torch.stack((i * 0.5, (i + 1) * 0.5)).float())


def test_outputs_are_allocated_with_their_shapes_and_dtypes(iota_kernel):
    made = jit.allocate_outputs(iota_kernel.params, torch.device("meta"))
    assert [(tuple(t.shape), t.dtype, t.device.type) for t in made] == [
        ((1000,), torch.int32, "meta"), ((2, 1000), torch.float32, "meta")]


def test_the_launch_device_is_torchs_current_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert jit.launch_device() == torch.device("cuda", 3)


def test_a_kernel_of_outputs_only_reaches_the_launch_on_the_chosen_device(iota_kernel, monkeypatch):
    """No GPU here: the outputs go to the CPU, so the launch itself refuses them, naming
    the first output; what matters is that the call got that far (no 'input tensor is
    needed to choose the device')."""
    monkeypatch.setattr(jit, "launch_device", lambda: torch.device("cpu"))
    with pytest.raises(argument_error()) as info:
        iota_kernel(7)
    text = str(info.value)
    assert "argument 'Out' must be on a CUDA device, got a tensor on cpu" in text, text
    assert "input tensor" not in text


def test_a_kernel_of_outputs_only_checks_its_arguments(iota_kernel, monkeypatch):
    monkeypatch.setattr(jit, "launch_device", lambda: torch.device("cpu"))
    with pytest.raises(argument_error(), match=r"iota: expected 1 argument\(s\) \(start\), got 0"):
        iota_kernel()
    with pytest.raises(argument_error(), match=r"iota: expected 1 argument\(s\) \(start\), got 2"):
        iota_kernel(1, 2)


# ---------------------------------------------------------------- NaN and inf in the norms


def rows(dtype, n, gen):
    """Rows whose NaN / inf pattern does not depend on the order of a float32 sum: an
    overflow, where there is one, happens in every order (same-sign terms, or squares)."""
    big = torch.finfo(dtype).max
    huge = 5e18 if dtype != torch.float16 else 100.0   # squares 2.5e37: their sum overflows float32
    base = lambda: torch.randn(n, generator=gen)  # noqa: E731
    out = []

    def add(r):
        out.append(r)

    r = base(); r[3] = float("inf"); add(r)                             # noqa: E702
    r = base(); r[3] = float("-inf"); add(r)                            # noqa: E702
    r = base(); r[3], r[5] = float("inf"), float("-inf"); add(r)        # noqa: E702
    r = base(); r[2] = float("nan"); add(r)                             # noqa: E702
    add(torch.full((n,), float("inf")))
    add(torch.full((n,), big))
    add(torch.full((n,), -big))
    r = base(); r[1] = big; add(r)                                      # noqa: E702
    r = base(); r[: n // 2] = big; add(r)                               # noqa: E702
    add(base() * 100 + 60000)                                           # float16's top, no overflow in float32
    add(base() * huge)
    add(torch.zeros(n))
    add(base() * 1e-6)
    return torch.stack(out).to(dtype)


def same_pattern(out, ref, dtype, what):
    """NaN, +inf and -inf at the same places; the finite values within a few of dtype's
    rounding steps of torch's."""
    ref = ref.to(dtype)
    for name, test in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        bad = (test(out) != test(ref)).nonzero()
        assert bad.numel() == 0, f"{what}: {name} differs at {bad[:5].tolist()} (of {bad.shape[0]})"
    finite = torch.isfinite(ref)
    # float32: a row of 60000 ± 100 leaves ~4e-5 of its centred values to the rounding
    # of the mean, in torch's float32 as in ours.
    tol = {torch.float16: 4e-3, torch.bfloat16: 2e-2, torch.float32: 2e-4}[dtype]
    torch.testing.assert_close(out[finite].float(), ref[finite].float(), rtol=tol, atol=tol, msg=what)


SMALL_CHUNKS = RowPlan(blk_m=1, threads=32, n_pad=256, threads_per_row=32, per_thread=8, chunks=3)
SHAPES = {"72-one-pass": (72, None), "600-chunked": (600, SMALL_CHUNKS)}


def _plan(n, plan, dtype, registers=None):
    if plan is not None:
        return plan
    if registers is not None:
        return plan_rows(n, dtype.itemsize, registers_per_element=registers)
    return plan_rows(n, dtype.itemsize)


def _norm_case(kind, n, plan, dtype, gen):
    """(kernel, inputs, outputs to pass, torch's result in float32) for one norm."""
    x = rows(dtype, n, gen)
    w = (1 + 0.1 * torch.randn(n, generator=gen)).to(dtype)
    b = (0.1 * torch.randn(n, generator=gen)).to(dtype)
    name = dtype_name(dtype)
    if kind in ("rms_norm", "rms_norm_silu"):
        p = _plan(n, plan, dtype)
        silu = kind == "rms_norm_silu"
        program = rmsnorm.rms_norm_program(n, name, 1e-6, silu, p.blk_m, p.threads, p.n_pad, p.chunks)
        ref = F.rms_norm(x.float(), (n,), w.float(), 1e-6)
        return program, (x, w), [torch.empty_like(x)], F.silu(ref) if silu else ref
    if kind == "layer_norm":
        p = _plan(n, plan, dtype)
        program = layernorm.layer_norm_program(n, name, 1e-5, p.blk_m, p.threads, p.n_pad, p.chunks)
        return program, (x, w, b), [torch.empty_like(x)], F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    p = plan or fused_norm.plan(n, dtype)
    program = fused_norm.add_rms_norm_program(n, name, 1e-6, False, p.blk_m, p.threads, p.n_pad, p.chunks)
    r = torch.randn(x.shape, generator=gen).to(dtype)
    if dtype == torch.float16:
        r[9] = 10000.0      # 60000 + 10000 overflows float16: h = inf, as torch's x + r gives
    h = x + r
    return program, (x, r, w), [torch.empty_like(x), torch.empty_like(x)], F.rms_norm(h.float(), (n,), w.float(), 1e-6)


@pytest.mark.parametrize("run", ["reference", "simulate"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("kind", ["rms_norm", "rms_norm_silu", "layer_norm", "add_rms_norm"])
def test_norms_give_torchs_nan_and_inf_pattern(kind, dtype, shape, run):
    n, plan = SHAPES[shape]
    gen = torch.Generator().manual_seed(zlib.crc32(f"{kind} {shape}".encode()))
    program, inputs, outputs, ref = _norm_case(kind, n, plan, dtype, gen)
    kernel = tegula.compile(program, target="sm_90a")
    getattr(tt, run)(kernel, *inputs, *outputs)
    same_pattern(outputs[0], ref, dtype, f"{kind} {dtype_name(dtype)} {shape} ({run})")
    if kind == "add_rms_norm":
        h = inputs[0] + inputs[1]
        assert torch.equal(outputs[1].isnan(), h.isnan()) and torch.equal(outputs[1].isinf(), h.isinf())


def test_a_chunked_layer_norm_row_past_sqrt_of_float32_max_is_not_nan():
    """The merge of the first chunk's statistics has weight 0: delta² · 0 was NaN when the
    first chunk's mean squared overflowed (a bfloat16 maximum in it); torch gives the bias."""
    n, dtype = 600, torch.bfloat16
    p = SMALL_CHUNKS
    kernel = tegula.compile(layernorm.layer_norm_program(n, "bfloat16", 1e-5, p.blk_m, p.threads, p.n_pad, p.chunks),
                            target="sm_90a")
    x = torch.randn(2, n).to(dtype)
    x[:, 1] = torch.finfo(dtype).max
    w, b = torch.ones(n, dtype=dtype), (0.1 * torch.randn(n)).to(dtype)
    y = torch.empty_like(x)
    tt.reference(kernel, x, w, b, y)
    ref = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
    assert not y.isnan().any()
    same_pattern(y, ref, dtype, "chunked layer_norm with a bfloat16 maximum")


# ---------------------------------------------------------------- argument checks of traced calls


def m(*shape, dtype=H):
    return torch.empty(shape, dtype=dtype, device="meta")


def ids(*shape):
    return m(*shape, dtype=torch.int32)


OP = torch.ops.tegula
F8 = torch.float8_e4m3fn
# (call on meta tensors, pattern): every operator, called as torch.compile calls it, names
# the argument at fault. One case or more per operator.
TRACED = {
    "rms_norm-weight-shape": (lambda: OP.rms_norm(m(4, 64), m(63), 1e-6),
                              r"^rms_norm: weight must have shape \(64,\) \(the last dimension of x\)"),
    "rms_norm-weight-dtype": (lambda: OP.rms_norm(m(4, 64), m(64, dtype=torch.float32), 1e-6),
                              r"^rms_norm: weight must be a float16 tensor \(the dtype of x\)"),
    "rms_norm-weight-device": (lambda: OP.rms_norm(m(4, 64), torch.empty(64, dtype=H), 1e-6),
                               r"^rms_norm: weight must be a CUDA tensor"),
    "rms_norm_silu-x-rank": (lambda: OP.rms_norm_silu(m(), m(64), 1e-6),
                             r"^rms_norm_silu: x must have at least one dimension"),
    "rms_norm_backward-dy": (lambda: OP.rms_norm_backward(m(4, 63), m(4, 64), m(64), 1e-6, False),
                             r"^rms_norm_backward: dy must have the dtype and shape \(4, 64\) of x"),
    "layer_norm-bias": (lambda: OP.layer_norm(m(4, 64), m(64), m(63), 1e-5),
                        r"^layer_norm: bias must have shape \(64,\)"),
    "layer_norm_backward-weight": (lambda: OP.layer_norm_backward(m(4, 64), m(4, 64), m(63), m(64), 1e-5),
                                   r"^layer_norm_backward: weight must have the dtype of x and shape \(64,\)"),
    "softmax-x": (lambda: OP.softmax(m(4, 64, dtype=torch.int32)), r"^softmax: x must be a tensor of float16"),
    "softmax_backward-dy": (lambda: OP.softmax_backward(m(4, 64, dtype=torch.float32), m(4, 64)),
                            r"^softmax_backward: dy must have the dtype and shape \(4, 64\) of y"),
    "add-y": (lambda: OP.add(m(4, 64), m(3, 64)), r"^add: y must have x's shape \(4, 64\) or be one row"),
    "column_sum-x": (lambda: OP.column_sum(m()), r"^column_sum: x must have at least one dimension"),
    "row_sum-x": (lambda: OP.row_sum(m(4, 64, dtype=torch.float64)), r"^row_sum: x must be a tensor of float16"),
    "row_max-x": (lambda: OP.row_max(m(4, 0)), r"^row_max: the last dimension of x is empty"),
    "row_min-x": (lambda: OP.row_min(m()), r"^row_min: x must have at least one dimension"),
    "transpose-x": (lambda: OP.transpose(m(2, 3, 4)), r"^transpose: x must be a 2-D tensor"),
    "matmul-b": (lambda: OP.matmul(m(4, 64), m(63, 32), None, "none"),
                 r"^matmul: b must have shape \(64, N\) \(its rows matching the columns of a\)"),
    "matmul-bias": (lambda: OP.matmul(m(4, 64), m(64, 32), m(31), "none"), r"^matmul: bias must have shape \(32,\)"),
    "matmul_backward-dc": (lambda: OP.matmul_backward(m(4, 31), m(4, 64), m(64, 32), None, "none", m(4, 32),
                                                      [True, True, False]),
                           r"^matmul_backward: dc must have shape \(4, 32\)"),
    "matmul_tuned-b": (lambda: OP.matmul_tuned(m(4, 64), m(64)), r"^matmul_tuned: b must be 2-D"),
    "flash_attention-v": (lambda: OP.flash_attention(m(1, 16, 4, 64), m(1, 16, 2, 64), m(1, 8, 2, 64), False, None,
                                                     "bshd", None),
                          r"^flash_attention: v must have k's shape \(1, 16, 2, 64\)"),
    "flash_attention_backward-lse": (lambda: OP.flash_attention_backward(
        m(1, 16, 4, 64), m(1, 16, 4, 64), m(1, 16, 2, 64), m(1, 16, 2, 64), m(1, 16, 4, 64),
        m(1, 4, 15, dtype=torch.float32), None, False, None, "bshd", None),
        r"^flash_attention_backward: lse must be a float32 tensor of shape \(1, 4, 16\)"),
    "flash_decode-lens": (lambda: OP.flash_decode(m(2, 8, 64), m(2, 40, 2, 64), m(2, 40, 2, 64), ids(3), None, None),
                          r"^flash_decode: cache_seqlens must be an int32 tensor of shape \(2,\)"),
    "flash_decode-v": (lambda: OP.flash_decode(m(2, 8, 64), m(2, 40, 2, 64), m(2, 41, 2, 64), ids(2), None, None),
                       r"^flash_decode: v_cache must have k_cache's shape \(2, 40, 2, 64\)"),
    "mla_decode-table": (lambda: OP.mla_decode(m(2, 16, 576), m(9, 64, 576), ids(2), ids(3, 4), None, None),
                         r"^mla_decode: block_table must be an int32 tensor of shape \(2, max_pages\)"),
    "mla_decode-pages": (lambda: OP.mla_decode(m(2, 16, 576), m(9, 32, 576), ids(2), ids(2, 4), None, None),
                         r"^mla_decode: a paged kv_cache must be \(num_pages, 64, 576\)"),
    "rope-k": (lambda: OP.rope(m(1, 5, 4, 32), m(1, 5, 2, 16), None, None, None, False, "bshd", 10000.0),
               r"^rope: k must match q in batch, sequence and head dimension \(1, 5, 32\)"),
    "rope-positions": (lambda: OP.rope(m(1, 5, 4, 32), None, None, None, ids(4), False, "bshd", 10000.0),
                       r"^rope: positions must be an int32 or int64 tensor of shape \(5,\)"),
    "rope_-sin": (lambda: OP.rope_(m(1, 5, 4, 32), None, m(8, 16, dtype=torch.float32),
                                   m(8, 15, dtype=torch.float32), None, False, "bshd", 10000.0),
                  r"^rope: sin must have cos's shape \(8, 16\)"),
    "swiglu-up": (lambda: OP.swiglu(m(3, 64), m(3, 63)), r"^swiglu: up must have the shape \(3, 64\) of x"),
    "swiglu_linear-w_up": (lambda: OP.swiglu_linear(m(3, 40), m(56, 40), m(56, 39)),
                           r"^swiglu_linear: w_up must have the shape \(56, 40\) of w_gate"),
    "add_rms_norm-residual": (lambda: OP.add_rms_norm(m(37, 999), m(37, 1000), m(999), 1e-6),
                              r"^add_rms_norm: residual must have the shape \(37, 999\) of x"),
    "add_rms_norm_-weight": (lambda: OP.add_rms_norm_(m(37, 999), m(37, 999), m(1000), 1e-6),
                             r"^add_rms_norm: weight must have shape \(999,\)"),
    "grouped_gemm-offsets": (lambda: OP.grouped_gemm(m(37, 40), m(2, 40, 56), ids(4), False),
                             r"^grouped_gemm: offsets must have shape \(3,\)"),
    "grouped_gemm-w": (lambda: OP.grouped_gemm(m(37, 40), m(2, 41, 56), ids(3), False),
                       r"^grouped_gemm: w must have shape \(2, 40, N\)"),
    "moe_align_block_size-ids": (lambda: OP.moe_align_block_size(ids(10), 8, 16),
                                 r"^moe_align_block_size: topk_ids must be 2-D"),
    "moe_permute-ids": (lambda: OP.moe_permute(m(5, 72), ids(13, 10), 2),
                        r"^moe_permute: sorted_token_ids must be 1-D"),
    "moe_combine-positions": (lambda: OP.moe_combine(m(130, 72), m(5, 2, dtype=torch.float32), ids(5, 3)),
                              r"^moe_combine: token_positions must have the shape \(5, 2\) of topk_weights"),
    "fp8_gemm-b": (lambda: OP.fp8_gemm(m(40, 64, dtype=F8), m(56, 48, dtype=F8), m(1, dtype=torch.float32),
                                       m(1, dtype=torch.float32), None, "bfloat16"),
                   r"^fp8_gemm: b must have shape \(N, 64\)"),
    "fp8_gemm-scale_b": (lambda: OP.fp8_gemm(m(40, 64, dtype=F8), m(56, 64, dtype=F8), m(40, 1, dtype=torch.float32),
                                             m(1, dtype=torch.float32), None, "bfloat16"),
                         r"^fp8_gemm: scale_b must have shape \(56,\) or \(1, 56\)"),
    "quantize_fp8-dtype": (lambda: OP.quantize_fp8(m(4, 64), None, "float8_e3m4", False),
                           r"^quantize_fp8: dtype must be one of"),
    "rms_norm_quantize_fp8-weight": (lambda: OP.rms_norm_quantize_fp8(m(4, 64), m(63), 1e-6, None, "float8_e4m3fn",
                                                                      False),
                                     r"^rms_norm_quantize_fp8: weight must have shape \(64,\)"),
    "w4a16_gemm-qweight": (lambda: OP.w4a16_gemm(m(2, 64), m(8, 30, dtype=torch.uint8), m(8, 1), None, 64, "int4"),
                           r"^w4a16_gemm: qweight must have shape \(N, 32\)"),
}


def test_every_operator_has_a_traced_argument_case():
    registered = {name for name in dir(OP) if isinstance(getattr(OP, name), torch._ops.OpOverloadPacket)}
    assert {case.split("-")[0] for case in TRACED} == registered


@pytest.mark.parametrize("case", list(TRACED))
def test_traced_calls_name_the_argument(case):
    call, pattern = TRACED[case]
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_add_rms_norm_names_a_residual_of_another_shape_eager_and_traced(device):
    """The issue's example: eager (CPU tensors: the check runs before the device's) and
    traced (meta tensors: the op's fake) alike."""
    x, r, w = (torch.zeros(shape, dtype=H, device=device) for shape in ((37, 999), (37, 1000), (999,)))
    with pytest.raises(ValueError, match=r"^add_rms_norm: residual must have the shape \(37, 999\) of x, got a "
                                         r"float16 tensor of shape \(37, 1000\)"):
        K.add_rms_norm(x, r, w)


def test_fake_tensor_calls_name_the_argument():
    with FakeTensorMode():
        x, w = torch.empty(4, 64, dtype=H, device="cuda"), torch.empty(65, dtype=H, device="cuda")
        with pytest.raises(ValueError, match=r"^rms_norm: weight must have shape \(64,\)"):
            K.rms_norm(x, w)
        a, wg, offs = (torch.empty(9, 16, dtype=H, device="cuda"), torch.empty(2, 17, 8, dtype=H, device="cuda"),
                       torch.empty(3, dtype=torch.int32, device="cuda"))
        with pytest.raises(ValueError, match=r"^grouped_gemm: w must have shape \(2, 16, N\)"):
            K.grouped_gemm(a, wg, offs)


def test_torch_compile_of_a_bad_shape_reports_the_argument():
    fn = torch.compile(lambda x, r, w: K.add_rms_norm(x, r, w)[0], backend="eager", fullgraph=True)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"add_rms_norm: residual must have the shape \(37, 999\) of x"):
        fn(m(37, 999), m(37, 1000), m(999))


@pytest.mark.parametrize("name", ["rms_norm", "softmax", "row_sum", "swiglu", "add_rms_norm"])
def test_traced_out_of_another_shape_is_named(name):
    x, w = m(4, 64), m(64)
    out = m(4, 63)
    calls = {"rms_norm": lambda: K.rms_norm(x, w, out=out), "softmax": lambda: K.softmax(x, out=out),
             "row_sum": lambda: K.row_sum(x, out=out), "swiglu": lambda: K.swiglu(m(4, 128), out=out),
             "add_rms_norm": lambda: K.add_rms_norm(x, x, w, out=out)}
    shape = r"\(4,\)" if name == "row_sum" else r"\(4, 64\)"
    with pytest.raises(ValueError, match=rf"^{name}: out must have shape {shape}, got a float16 tensor of shape"):
        calls[name]()


# ---------------------------------------------------------------- checked indices


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def test_a_good_block_table_passes_and_unread_entries_may_be_anything():
    table = t32([[0, 1, 2, -1], [3, 7, 5, 6]])     # sequence 0 reads 3 pages: its -1 is padding
    index_checks.check_block_table("mla_decode", table, t32([150, 256]), 64, 8)
    index_checks.check_block_table("mla_decode", table, t32([0, 1]), 64, 8)


@pytest.mark.parametrize("table,lens,where,value", [
    ([[0, 1, 2, -1], [3, 8, 5, 6]], [150, 200], "[1, 1]", 8),     # past the pool
    ([[0, -1, 2, 0], [3, 4, 5, 6]], [150, 200], "[0, 1]", -1),    # negative, read
    ([[0, 1, 2, 9], [3, 4, 5, 6]], [193, 1], "[0, 3]", 9),        # the last page a sequence reads
], ids=["past-pool", "negative", "last-read"])
def test_a_bad_block_table_entry_is_named(table, lens, where, value):
    with pytest.raises(ValueError) as info:
        index_checks.check_block_table("mla_decode", t32(table), t32(lens), 64, 8)
    text = str(info.value)
    assert text.startswith(f"mla_decode: block_table{where} = {value} is not a page of kv_cache"), text
    assert "must be in [0, 7] (kv_cache holds 8 pages)" in text


@pytest.mark.parametrize("lens,where,value", [([5, -2, 3], 1, -2), ([5, 257, 3], 1, 257), ([300, 0, 0], 0, 300)])
def test_a_bad_length_is_named(lens, where, value):
    with pytest.raises(ValueError, match=rf"^flash_decode: cache_seqlens\[{where}\] = {value} is out of range: its "
                                         r"entries must be in \[0, 256\] \(S_max\)"):
        index_checks.check_lengths("flash_decode", "cache_seqlens", t32(lens), 256, "S_max")
    index_checks.check_lengths("flash_decode", "cache_seqlens", t32([0, 256, 17]), 256, "S_max")


def test_offsets_must_be_non_decreasing_and_within_the_rows():
    check = lambda values: index_checks.check_offsets("grouped_gemm", t32(values), 12)  # noqa: E731
    check([0, 4, 4, 9, 12])
    check([2, 2, 5])             # rows outside [offsets[0], offsets[E]) belong to no expert
    with pytest.raises(ValueError, match=r"^grouped_gemm: offsets\[3\] = 5 is less than offsets\[2\] = 9: offsets "
                                         r"must be non-decreasing, from offsets\[0\] >= 0 to offsets\[-1\] <= 12"):
        check([0, 4, 9, 5, 12])
    with pytest.raises(ValueError, match=r"^grouped_gemm: offsets\[0\] = -1 is negative"):
        check([-1, 4, 12])
    with pytest.raises(ValueError, match=r"^grouped_gemm: offsets\[2\] = 13 is past the end"):
        check([0, 4, 13])


def test_ranges_with_an_allowed_value():
    positions = t32([[0, -1], [9, 3]])
    index_checks.check_range("moe_combine", "token_positions", positions, 0, 10, "the 10 rows of y", allowed=(-1,))
    with pytest.raises(ValueError, match=r"^moe_combine: token_positions\[1, 0\] = 10 is out of range: its entries "
                                         r"must be in \[0, 9\] or -1 \(the 10 rows of y\)"):
        index_checks.check_range("moe_combine", "token_positions", t32([[0, -1], [10, 3]]), 0, 10,
                                 "the 10 rows of y", allowed=(-1,))
    with pytest.raises(ValueError, match=r"token_positions\[0, 1\] = -2"):
        index_checks.check_range("moe_combine", "token_positions", t32([[0, -2], [10, 3]]), 0, 10,
                                 "the 10 rows of y", allowed=(-1,))


def test_the_switch_comes_from_the_call_or_the_environment(monkeypatch):
    lens = t32([1, 2])
    monkeypatch.delenv("TEGULA_CHECK_INDICES", raising=False)
    assert not index_checks.wanted("op", None, lens)
    assert index_checks.wanted("op", True, lens)
    monkeypatch.setenv("TEGULA_CHECK_INDICES", "1")
    assert index_checks.wanted("op", None, lens)
    assert not index_checks.wanted("op", False, lens)
    monkeypatch.setenv("TEGULA_CHECK_INDICES", "maybe")
    with pytest.raises(ValueError, match=r"TEGULA_CHECK_INDICES='maybe': expected 1"):
        index_checks.wanted("op", None, lens)
    with pytest.raises(TypeError, match=r"^op: check_indices must be None \(TEGULA_CHECK_INDICES decides\) or a "
                                        r"bool, got 1"):
        index_checks.wanted("op", 1, lens)


def test_tensors_without_data_are_never_read():
    assert index_checks.readable(t32([1]), None)
    assert not index_checks.readable(torch.empty(2, dtype=torch.int32, device="meta"))
    with FakeTensorMode():
        fake = torch.empty(2, dtype=torch.int32, device="cuda")
    assert not index_checks.wanted("op", True, fake)


@pytest.mark.parametrize("call", [
    lambda: K.grouped_gemm(m(9, 16), m(2, 16, 8), ids(3), check_indices=1),
    lambda: K.rope(m(1, 5, 4, 32), None, check_indices="yes"),
    lambda: mla.mla_decode(m(2, 16, 576), m(2, 64, 576), ids(2), check_indices=1),
    lambda: K.flash_decode(m(2, 8, 64), m(2, 40, 2, 64), m(2, 40, 2, 64), ids(2), check_indices=0),
    lambda: K.moe_align_block_size(ids(5, 2), 8, 16, check_indices=1),
    lambda: K.moe_permute(m(5, 72), ids(130), 2, check_indices=1),
    lambda: K.moe_combine(m(130, 72), m(5, 2, dtype=torch.float32), ids(5, 2), check_indices=1),
], ids=["grouped_gemm", "rope", "mla_decode", "flash_decode", "moe_align_block_size", "moe_permute", "moe_combine"])
def test_check_indices_must_be_a_bool(call):
    with pytest.raises(TypeError, match=r"check_indices must be None \(TEGULA_CHECK_INDICES decides\) or a bool"):
        call()


def test_traced_calls_with_checks_on_keep_their_behaviour(monkeypatch):
    """Meta tensors hold no data: the op's fake runs, no index is read, even with the
    environment asking for checks."""
    monkeypatch.setenv("TEGULA_CHECK_INDICES", "1")
    assert K.grouped_gemm(m(9, 16), m(2, 16, 8), ids(3), check_indices=True).shape == (9, 8)
    out = mla.mla_decode(m(2, 16, 576), m(9, 64, 576), ids(2), block_table=ids(2, 4), check_indices=True)
    assert out.shape == (2, 16, 512)
    fn = torch.compile(lambda a, w, o: K.grouped_gemm(a, w, o, check_indices=True), backend="eager", fullgraph=True)
    torch._dynamo.reset()
    assert fn(m(9, 16), m(2, 16, 8), ids(3)).shape == (9, 8)


def test_the_environment_switch_is_documented():
    assert "TEGULA_CHECK_INDICES" in env.__doc__
    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "troubleshooting.md")).read()
    section = page.split("## Checked indices", 1)[1].split("\n## ", 1)[0]
    for name in ("TEGULA_CHECK_INDICES", "check_indices=True", "block_table", "offsets", "positions"):
        assert name in section, name
