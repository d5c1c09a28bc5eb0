"""Rotary position embedding (tegula.kernels.rotary_embedding) without a GPU: every form of the kernel
(half-split and interleaved pairs, bshd and bhsd, a cos/sin table in either width or
angles computed in the kernel, positions absent, shared or per sequence) simulated thread
by thread against torch in float64; ragged head dimensions, head steps, q alone, tables
per sequence, positions outside the table; the computed angles' accuracy at large
positions; compiles for sm_80 and sm_90a with 16-byte accesses; the plan, the helpers
(rope_inv_freq, rope_cache) and the argument errors."""
import importlib
import itertools
import math
import zlib

import pytest
import torch

import tegula
import tegula.testing as tt
from tegula.kernels._common import dtype_name

rope_mod = importlib.import_module("tegula.kernels.rotary_embedding")
rope, rope_cache, rope_inv_freq, plan_rope = (rope_mod.rope, rope_mod.rope_cache, rope_mod.rope_inv_freq,
                                              rope_mod.plan_rope)

TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-6}


def rotate_reference(x, cos, sin, interleaved):
    """x (..., D) float64 turned by cos, sin (..., D/2), broadcast over x's leading dims."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def angles(positions, d, base=10000.0):
    """(B, S, D/2) float64 cos and sin of the float32 angles positions·inv_freq."""
    theta = (positions.float()[..., None] * rope_inv_freq(d, base)).double()
    return theta.cos(), theta.sin()


def heads_axis(t, layout):
    """(B, S, D/2) angles broadcast over the heads of `layout`."""
    return t[:, :, None] if layout == "bshd" else t[:, None]


class Case:
    """One small instance: inputs, the kernel's arguments, and torch's result."""

    def __init__(self, B=2, S=5, hq=4, hk=2, d=16, dtype=torch.float16, interleaved=False, layout="bshd",
                 angles_from="table", positions="none", seed=0, table_rows=None, table_dtype=torch.float32,
                 per_sequence_table=False, table_2d=False, **plan):
        gen = torch.Generator().manual_seed(seed)
        shape = (lambda h: (B, S, h, d)) if layout == "bshd" else (lambda h: (B, h, S, d))
        self.q = torch.randn(shape(hq), generator=gen).to(dtype)
        self.k = torch.randn(shape(max(hk, 1)), generator=gen).to(dtype) if hk else self.q
        rows = table_rows or S + 3
        if positions == "none":
            pos = torch.arange(S).expand(B, S)
        elif positions in ("shared", "shared_2d"):
            pos = torch.randint(0, rows, (S,), generator=gen).expand(B, S)
        else:
            pos = torch.randint(0, rows, (B, S), generator=gen)
        self.positions = pos
        cos, sin = angles(pos, d)
        default = plan_rope(hq, hk, d, torch.finfo(dtype).bits // 8, S)
        self.kw = dict(interleaved=interleaved, q_layout=layout, k_layout=layout, tokens=default.tokens,
                       q_heads=default.q_heads, k_heads=default.k_heads, threads=default.threads)
        self.kw.update(plan)
        self.args = []
        if angles_from == "computed":
            self.kw["cache_dtype"] = None
        else:
            hf = angles_from == "table_hf"  # Hugging Face's (P, D) form
            batches = B if per_sequence_table else 1
            table_pos = torch.arange(rows).expand(batches, rows)
            tc, ts = angles(table_pos, d)
            if per_sequence_table:  # a different table per sequence: sequence b is shifted by b
                tc, ts = angles(table_pos + torch.arange(batches)[:, None], d)
                cos, sin = angles(pos + torch.arange(B)[:, None], d)
            if hf:
                tc, ts = ((t.repeat_interleave(2, -1) if interleaved else torch.cat([t, t], -1)) for t in (tc, ts))
            self.args += [t[0] if table_2d else t for t in (tc.to(table_dtype), ts.to(table_dtype))]
            self.kw.update(cache_dtype=dtype_name(table_dtype), cache_width=d if hf else d // 2,
                           cache_layout="pw" if table_2d else "bpw" if per_sequence_table else "1pw")
            if table_dtype != torch.float32:  # the kernel reads the rounded table
                cos, sin = angles_rounded(tc, ts, pos, table_dtype, hf, interleaved, per_sequence_table)
        if positions != "none":
            layouts = {"shared": ("s", pos[0]), "shared_2d": ("1s", pos[:1]), "batched": ("bs", pos)}
            pos_layout, pos_arg = layouts[positions]
            self.kw.update(pos_dtype="int64", pos_layout=pos_layout)
            self.args.append(pos_arg.contiguous())
        self.dtype, self.hq, self.hk, self.d = dtype, hq, hk, d
        c, s = heads_axis(cos, layout), heads_axis(sin, layout)
        self.expected = [rotate_reference(x.double(), c, s, interleaved) for x in (self.q, self.k)]

    def kernel(self, target="sm_90a"):
        program = rope_mod.rope_program(self.hq, self.hk, self.d, dtype_name(self.dtype), **self.kw)
        return tegula.compile(program, out_idx=[-2, -1], target=target)

    def run(self, target="sm_90a", method="simulate"):
        return getattr(tt, method)(self.kernel(target), self.q, self.k, *self.args)


def angles_rounded(tc, ts, pos, dtype, hf, interleaved, per_sequence):
    """The cos, sin the kernel reads from a table rounded to `dtype`, gathered by pos."""
    cols = slice(0, None, 2) if (hf and interleaved) else slice(0, tc.shape[-1] // (2 if hf else 1))
    tc, ts = tc.to(dtype).double()[..., cols], ts.to(dtype).double()[..., cols]
    batch = torch.arange(pos.shape[0])[:, None] if per_sequence else torch.zeros(pos.shape[0], 1, dtype=torch.long)
    return tc[batch, pos], ts[batch, pos]


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


FORMS = list(itertools.product([False, True], ["bshd", "bhsd"], ["table", "table_hf", "computed"],
                               ["none", "shared", "batched"]))


@pytest.mark.parametrize("interleaved,layout,angles_from,positions", FORMS,
                         ids=["-".join(map(str, f)) for f in FORMS])
def test_every_form_matches_torch(interleaved, layout, angles_from, positions):
    case = Case(interleaved=interleaved, layout=layout, angles_from=angles_from, positions=positions,
                seed=zlib.crc32(repr((interleaved, layout, angles_from, positions)).encode()))
    q_out, k_out = case.run()
    assert not torch.isnan(q_out).any() and not torch.isnan(k_out).any(), "an output element was never written"
    assert rel_err(q_out, case.expected[0]) < TOL[torch.float16]
    assert rel_err(k_out, case.expected[1]) < TOL[torch.float16]


@pytest.mark.parametrize("table_2d", [False, True])
@pytest.mark.parametrize("positions", ["none", "shared", "shared_2d", "batched"])
def test_table_and_position_ranks(table_2d, positions):
    """Tables (P, W) or (1, P, W); positions (S,), (1, S) or (B, S): each as given."""
    case = Case(B=3, S=6, table_2d=table_2d, positions=positions)
    q_out, k_out = case.run()
    assert rel_err(q_out, case.expected[0]) < TOL[torch.float16]
    assert rel_err(k_out, case.expected[1]) < TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_name)
@pytest.mark.parametrize("interleaved", [False, True])
def test_sm80_and_the_reference_agree_with_torch(dtype, interleaved):
    case = Case(B=3, S=7, hq=3, hk=1, d=24, dtype=dtype, interleaved=interleaved, positions="batched")
    for method in ("simulate", "reference"):
        q_out, k_out = case.run("sm_80", method)
        assert rel_err(q_out, case.expected[0]) < TOL[dtype], method
        assert rel_err(k_out, case.expected[1]) < TOL[dtype], method


@pytest.mark.parametrize("d", [2, 6, 18, 40, 136])
@pytest.mark.parametrize("interleaved", [False, True])
def test_any_even_head_dim(d, interleaved):
    case = Case(B=2, S=3, hq=3, hk=2, d=d, dtype=torch.bfloat16, interleaved=interleaved, positions="shared",
                angles_from="computed" if interleaved else "table")
    q_out, k_out = case.run()
    assert rel_err(q_out, case.expected[0]) < TOL[torch.bfloat16]
    assert rel_err(k_out, case.expected[1]) < TOL[torch.bfloat16]


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_heads_walked_in_steps_and_tokens_past_the_end(layout, interleaved):
    # 5 query heads in steps of 2 and 3 key heads in steps of 2 (both last steps ragged);
    # 7 tokens in blocks of 4 (the last block half past the end of the sequence).
    case = Case(B=2, S=7, hq=5, hk=3, d=16, layout=layout, interleaved=interleaved, positions="batched",
                q_heads=2, k_heads=2, tokens=4, threads=64)
    q_out, k_out = case.run()
    assert rel_err(q_out, case.expected[0]) < TOL[torch.float16]
    assert rel_err(k_out, case.expected[1]) < TOL[torch.float16]


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_q_alone(layout):
    case = Case(hq=5, hk=0, layout=layout, positions="shared")
    q_out, k_out = case.run()
    assert rel_err(q_out, case.expected[0]) < TOL[torch.float16]
    assert torch.isnan(k_out).all(), "without k heads the kernel must not write the k slots"


@pytest.mark.parametrize("interleaved", [False, True])
def test_per_sequence_tables_in_the_activation_dtype(interleaved):
    # Hugging Face's per-token cos/sin: (B, S, D) in bfloat16, no positions.
    case = Case(B=3, S=6, hq=2, hk=1, d=32, dtype=torch.bfloat16, interleaved=interleaved, angles_from="table_hf",
                table_dtype=torch.bfloat16, per_sequence_table=True, table_rows=6)
    q_out, k_out = case.run()
    assert rel_err(q_out, case.expected[0]) < TOL[torch.bfloat16]
    assert rel_err(k_out, case.expected[1]) < TOL[torch.bfloat16]


def test_positions_outside_the_table_read_zeros():
    case = Case(B=2, S=4, positions="batched", table_rows=8)
    pos = torch.tensor([[0, 8, 3, -1], [100, 7, 2, 9]])
    case.args[-1] = pos
    q_out, k_out = case.run()
    outside = (pos < 0) | (pos >= 8)
    assert (q_out[outside] == 0).all() and (k_out[outside] == 0).all()
    cos, sin = angles(pos.clamp(0, 7), 16)
    expected = rotate_reference(case.q.double(), heads_axis(cos, "bshd"), heads_axis(sin, "bshd"), False)
    assert rel_err(q_out[~outside], expected[~outside]) < TOL[torch.float16]


@pytest.mark.parametrize("interleaved", [False, True])
def test_computed_angles_are_exact_at_large_positions(interleaved):
    # float32 outputs: the computed cos/sin of the float32 angle must be within ~1e-7.
    case = Case(B=1, S=8, hq=2, hk=1, d=128, dtype=torch.float32, interleaved=interleaved,
                angles_from="computed", positions="batched")
    pos = torch.tensor([[0, 1, 4095, 65535, 100000, 131071, 999999, 2 ** 23 - 1]])
    case.args[-1] = pos
    cos, sin = angles(pos, 128)
    q_out, _ = case.run()
    expected = rotate_reference(case.q.double(), heads_axis(cos, "bshd"), heads_axis(sin, "bshd"), interleaved)
    assert (q_out.double() - expected).abs().max().item() < 2e-6


def test_base_reaches_the_computed_angles():
    case = Case(angles_from="computed", positions="batched", d=32)
    program = rope_mod.rope_program(case.hq, case.hk, case.d, "float16", **dict(case.kw, base=500000.0))
    q_out, _ = tt.simulate(tegula.compile(program, out_idx=[-2, -1], target="sm_90a"), case.q, case.k, *case.args)
    cos, sin = angles(case.positions, 32, base=500000.0)
    expected = rotate_reference(case.q.double(), heads_axis(cos, "bshd"), heads_axis(sin, "bshd"), False)
    assert rel_err(q_out, expected) < TOL[torch.float16]
    assert rel_err(q_out, case.expected[0]) > 1e-2  # not base 10000's result


# ---- compiles and accesses at a model's sizes ----

COMPILED = list(itertools.product([False, True], [None, "float32"], ["sm_80", "sm_90a"]))


@pytest.mark.parametrize("interleaved,cache_dtype,target", COMPILED, ids=["-".join(map(str, c)) for c in COMPILED])
def test_llama_shapes_compile_with_16_byte_accesses(interleaved, cache_dtype, target):
    plan = plan_rope(32, 8, 128, 2, 1024)
    program = rope_mod.rope_program(32, 8, 128, "bfloat16", interleaved=interleaved, cache_dtype=cache_dtype,
                                    pos_dtype="int64", pos_layout="bs", tokens=plan.tokens,
                                    q_heads=plan.q_heads, k_heads=plan.k_heads, threads=plan.threads)
    kernel = tegula.compile(program, target=target)
    source = kernel.get_kernel_source()
    assert len(kernel.cubin()) > 0
    for tensor in ("Q", "K"):
        assert f"Vec<bfloat16_t, 8>*>(&{tensor}[" in source, f"{tensor} is not read in 16-byte vectors"
        assert f"Vec<bfloat16_t, 8>*>(&{tensor}O[" in source, f"{tensor}O is not written in 16-byte vectors"
    if cache_dtype is None:
        assert "double" in source, "the computed angles' reduction is not in float64"
    else:
        assert "float4*>(&C[" in source, "the cos table is not read in 16-byte vectors"


def test_plan_examples():
    assert plan_rope(32, 8, 128, 2, 1024) == rope_mod.RopePlan(1, 32, 8, 256)
    assert plan_rope(4, 1, 64, 2, 1024) == rope_mod.RopePlan(16, 4, 1, 256)
    assert plan_rope(4, 1, 64, 2, 1) == rope_mod.RopePlan(1, 4, 1, 32)
    assert plan_rope(64, 8, 256, 2, 1) == rope_mod.RopePlan(1, 32, 8, 256)
    assert plan_rope(5, 0, 2, 4, 3) == rope_mod.RopePlan(4, 5, 0, 32)


# ---- helpers ----

@pytest.mark.parametrize("base", [10000.0, 500000.0])
@pytest.mark.parametrize("d", [64, 96, 128])
def test_inv_freq_follows_hugging_face(d, base):
    hf = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    ours = rope_inv_freq(d, base)
    assert ours.dtype == torch.float32 and ours.shape == (d // 2,)
    # The same float32 steps; torch's float32 pow is off by an ulp for a few exponents,
    # where ours is the correctly rounded power.
    assert ((ours - hf).abs() <= hf * 2 ** -23).all()
    exact = torch.tensor([1.0 / base ** (float(e)) for e in torch.arange(0, d, 2, dtype=torch.float32) / d],
                         dtype=torch.float64)
    assert ((ours.double() - exact).abs() <= (hf.double() - exact).abs() + exact * 2 ** -24).all()


def test_rope_cache_values():
    cos, sin = rope_cache(300, 64, device="cpu")
    assert cos.shape == sin.shape == (300, 32) and cos.dtype == torch.float32
    theta = (torch.arange(300, dtype=torch.float32)[:, None] * rope_inv_freq(64)).double()
    assert torch.equal(cos, theta.cos().float()) and torch.equal(sin, theta.sin().float())
    inv = torch.rand(32, dtype=torch.float64)
    c2, s2 = rope_cache(10, 64, inv_freq=inv, scaling=0.5, device="cpu", dtype=torch.bfloat16)
    theta = (torch.arange(10, dtype=torch.float32)[:, None] * inv.float()).double()
    assert c2.dtype == torch.bfloat16
    assert torch.equal(c2, (theta.cos() * 0.5).bfloat16()) and torch.equal(s2, (theta.sin() * 0.5).bfloat16())


# ---- argument errors (CPU tensors: every check but the device's runs first) ----

q = torch.randn(2, 5, 4, 16).half()
k = torch.randn(2, 5, 2, 16).half()
cos, sin = rope_cache(8, 16, device="cpu")
pos = torch.zeros(2, 5, dtype=torch.int64)

ERRORS = {
    "both-None": (lambda: rope(None, None), TypeError, r"rope: q and k are both None"),
    "q-list": (lambda: rope(q.tolist(), k), TypeError, r"rope: q must be a torch\.Tensor"),
    "q-int": (lambda: rope(q.int(), k), ValueError, r"rope: q must be a tensor of float16"),
    "k-dtype": (lambda: rope(q, k.bfloat16()), ValueError, r"rope: k must be a float16 tensor \(the dtype of q\)"),
    "q-rank": (lambda: rope(q[0], k), ValueError, r"rope: q must be 4-D \(B, S, H, D\)"),
    "k-rank-bhsd": (lambda: rope(q, k[0], layout="bhsd"), ValueError, r"rope: k must be 4-D \(B, H, S, D\)"),
    "k-seq": (lambda: rope(q, k[:, :3]), ValueError, r"rope: k must match q in batch, sequence and head dim"),
    "k-dim": (lambda: rope(q, k[..., :8]), ValueError, r"rope: k must match q"),
    "odd-dim": (lambda: rope(q[..., :15], None), ValueError, r"rope: the head dimension .* must be even"),
    "huge-dim": (lambda: rope(torch.zeros(1, 1, 1, 1026).half(), None), ValueError, r"at most 1024, got 1026"),
    "layout": (lambda: rope(q, k, layout="sbhd"), ValueError, r"rope: layout must be one of"),
    "interleaved": (lambda: rope(q, k, interleaved=1), TypeError, r"rope: interleaved must be a bool"),
    "inplace": (lambda: rope(q, k, inplace="yes"), TypeError, r"rope: inplace must be a bool"),
    "cos-alone": (lambda: rope(q, k, cos), ValueError, r"rope: pass both cos and sin"),
    "cos-dtype": (lambda: rope(q, k, cos.double(), sin.double()), ValueError, r"rope: cos must be a tensor of float32"),
    "sin-dtype": (lambda: rope(q, k, cos, sin.half()), ValueError, r"rope: sin must be a float32 tensor \(the dtype"),
    "cos-width": (lambda: rope(q, k, cos[:, :4], sin[:, :4]), ValueError, r"rope: cos must be \(P, 8 or 16\)"),
    "cos-rank": (lambda: rope(q, k, cos[0], sin[0]), ValueError, r"rope: cos must be 2-D"),
    "cos-batch": (lambda: rope(q, k, cos.expand(3, 8, 8), sin.expand(3, 8, 8)), ValueError, r"rope: cos must be"),
    "sin-shape": (lambda: rope(q, k, cos, sin[:6]), ValueError, r"rope: sin must have cos's shape"),
    "cos-rows": (lambda: rope(q, k, cos[:4], sin[:4]), ValueError, r"rope: without positions token s reads row s"),
    "positions-float": (lambda: rope(q, k, cos, sin, pos.float()), ValueError, r"rope: positions must be an int32"),
    "positions-shape": (lambda: rope(q, k, cos, sin, pos[:, :3]), ValueError, r"rope: positions must be an int32"),
    "positions-list": (lambda: rope(q, k, cos, sin, [0, 1]), TypeError, r"rope: positions must be None or a torch"),
    "base": (lambda: rope(q, k, base=1.0), ValueError, r"rope: base must be a finite number greater than 1"),
    "cpu": (lambda: rope(q, k, cos, sin, pos), ValueError, r"rope: q must be a CUDA tensor"),
    "cpu-k-alone": (lambda: rope(None, k), ValueError, r"rope: k must be a CUDA tensor"),
    "cache-dim": (lambda: rope_cache(8, 15), ValueError, r"rope_cache: dim must be an even int"),
    "cache-positions": (lambda: rope_cache(-1, 16), ValueError, r"rope_cache: max_positions"),
    "cache-inv-freq": (lambda: rope_cache(8, 16, inv_freq=torch.ones(4)), ValueError, r"rope_cache: inv_freq must"),
    "cache-scaling": (lambda: rope_cache(8, 16, scaling=math.nan), ValueError, r"rope_cache: scaling"),
    "inv-freq-base": (lambda: rope_inv_freq(16, base=0.5), ValueError, r"rope_inv_freq: base"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_argument_errors_name_the_argument(name):
    fn, exc, pattern = ERRORS[name]
    with pytest.raises(exc, match=pattern):
        fn()


def test_inputs_that_require_grad_are_refused():
    with pytest.raises(RuntimeError, match=r"^rope: k requires grad, but rope has no backward yet"):
        rope(q, k.clone().requires_grad_())
    with torch.no_grad():
        with pytest.raises(ValueError, match=r"must be a CUDA tensor"):
            rope(q, k.clone().requires_grad_())


def test_program_refuses_odd_head_dim():
    with pytest.raises(ValueError, match=r"rope_program: d must be even"):
        rope_mod.rope_program(4, 2, 15, "float16")
