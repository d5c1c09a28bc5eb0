"""Rotary position embedding (tegula.kernels.rotary_embedding) against torch in float64, on the GPU:
every form (half-split / interleaved, bshd / bhsd, tables of either width and dtype or
angles computed in the kernel, positions absent / shared / per sequence), in place and
not, GQA, q or k alone, Hugging Face's transposed views and per-token tables, ragged
shapes, NaN, positions outside the table, empty extents."""
import importlib
import itertools

import pytest
import torch

try:  # a package when tests/python/gpu has an __init__.py, a plain directory otherwise
    from ._util import DTYPES, TOLERANCE, dtype_id, assert_argument_error, randn, rel_err, seed_of
except ImportError:
    from _util import DTYPES, TOLERANCE, dtype_id, assert_argument_error, randn, rel_err, seed_of

rope_mod = importlib.import_module("tegula.kernels.rotary_embedding")
rope, rope_cache, rope_inv_freq = rope_mod.rope, rope_mod.rope_cache, rope_mod.rope_inv_freq

pytestmark = pytest.mark.gpu


def rotate_reference(x, cos, sin, interleaved):
    """x (..., D) float64 turned by cos, sin (..., D/2) (broadcast)."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def hf_reference(x, cos, sin, unsqueeze_dim):
    """Hugging Face's apply_rotary_pos_emb for one tensor, in float64: x·cos + rotate_half(x)·sin
    with cos, sin (B, S, D)."""
    cos, sin = cos.double().unsqueeze(unsqueeze_dim), sin.double().unsqueeze(unsqueeze_dim)
    half = x.shape[-1] // 2
    x = x.double()
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def angles(positions, d, base=10000.0):
    """(B, S, D/2) float64 cos and sin of the float32 angles positions·inv_freq."""
    theta = (positions.float()[..., None] * rope_inv_freq(d, base, positions.device)).double()
    return theta.cos(), theta.sin()


def heads_axis(t, layout):
    return t[:, :, None] if layout == "bshd" else t[:, None]


def make_qk(B, S, hq, hk, d, dtype, layout, *tag):
    shape = (lambda h: (B, S, h, d)) if layout == "bshd" else (lambda h: (B, h, S, d))
    return (randn(shape(hq), dtype, seed_of("q", B, S, hq, d, dtype, layout, *tag)),
            randn(shape(hk), dtype, seed_of("k", B, S, hk, d, dtype, layout, *tag)))


def make_positions(kind, B, S, rows, *tag):
    gen = torch.Generator(device="cuda").manual_seed(seed_of("pos", kind, B, S, rows, *tag))
    if kind == "none":
        return None, torch.arange(S, device="cuda").expand(B, S)
    if kind == "shared":
        pos = torch.randint(0, rows, (S,), generator=gen, device="cuda")
        return pos, pos.expand(B, S)
    pos = torch.randint(0, rows, (B, S), generator=gen, device="cuda")
    return pos, pos


def tables(kind, rows, d, interleaved, dtype):
    """(cos, sin) for `rope`: None, rope_cache's (P, D/2) float32, or Hugging Face's (P, D)
    in the activation dtype; and the cos/sin the kernel then sees, (P, D/2) float64."""
    if kind == "computed":
        theta = (torch.arange(rows, device="cuda", dtype=torch.float32)[:, None]
                 * rope_inv_freq(d, device="cuda")).double()
        return None, None, theta.cos(), theta.sin()
    cos, sin = rope_cache(rows, d)
    if kind == "table":
        return cos, sin, cos.double(), sin.double()
    full = [(t.repeat_interleave(2, -1) if interleaved else torch.cat([t, t], -1)).to(dtype) for t in (cos, sin)]
    seen = [(t[:, 0::2] if interleaved else t[:, :d // 2]).double() for t in full]
    return full[0], full[1], seen[0], seen[1]


def assert_rotated(out, x, cos_seen, sin_seen, positions, layout, interleaved, what):
    """out == x turned by the rows `positions` (B, S) of cos_seen/sin_seen, within x's dtype."""
    c = heads_axis(cos_seen[positions], layout)
    s = heads_axis(sin_seen[positions], layout)
    ref = rotate_reference(x.double(), c, s, interleaved)
    nan = torch.isnan(out).sum().item()
    assert nan == 0, f"{what}: {nan} NaN outputs"
    err = rel_err(out, ref)
    assert err <= TOLERANCE[x.dtype], f"{what}: relative error {err:.3e} > {TOLERANCE[x.dtype]:.1e}"


FORMS = list(itertools.product([False, True], ["bshd", "bhsd"], ["table", "table_hf", "computed"],
                               ["none", "shared", "batched"]))
# (B, S, Hq, Hk, D, dtype): Llama-like (GQA 4:1), and ragged: S not a multiple of a block's
# tokens, odd head counts, D/2 not a multiple of the 16-byte vector.
SHAPES = [(2, 64, 32, 8, 128, torch.bfloat16), (3, 7, 5, 3, 40, torch.float16), (2, 33, 4, 1, 64, torch.bfloat16),
          (1, 5, 2, 2, 12, torch.float16)]


@pytest.mark.parametrize("interleaved,layout,angles_from,positions", FORMS,
                         ids=["-".join(map(str, f)) for f in FORMS])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_form(shape, interleaved, layout, angles_from, positions):
    B, S, hq, hk, d, dtype = shape
    q, k = make_qk(B, S, hq, hk, d, dtype, layout, interleaved, angles_from, positions)
    rows = S + 17
    cos, sin, cos_seen, sin_seen = tables(angles_from, rows, d, interleaved, dtype)
    pos_arg, pos = make_positions(positions, B, S, rows)
    q_out, k_out = rope(q, k, cos, sin, pos_arg, interleaved=interleaved, layout=layout)
    assert q_out.shape == q.shape and k_out.shape == k.shape and q_out.dtype == dtype
    assert q_out.data_ptr() != q.data_ptr() and k_out.data_ptr() != k.data_ptr()
    assert_rotated(q_out, q, cos_seen, sin_seen, pos, layout, interleaved, "q")
    assert_rotated(k_out, k, cos_seen, sin_seen, pos, layout, interleaved, "k")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("angles_from", ["table", "computed"])
def test_in_place(dtype, interleaved, angles_from):
    B, S, hq, hk, d = 3, 21, 6, 2, 64
    q, k = make_qk(B, S, hq, hk, d, dtype, "bshd", "inplace", interleaved)
    q0, k0 = q.clone(), k.clone()
    cos, sin, cos_seen, sin_seen = tables(angles_from, 64, d, interleaved, dtype)
    pos_arg, pos = make_positions("batched", B, S, 64, dtype)
    q_out, k_out = rope(q, k, cos, sin, pos_arg, interleaved=interleaved, inplace=True)
    assert q_out is q and k_out is k
    assert_rotated(q, q0, cos_seen, sin_seen, pos, "bshd", interleaved, "q in place")
    assert_rotated(k, k0, cos_seen, sin_seen, pos, "bshd", interleaved, "k in place")
    # Not in place: the same numbers, and the inputs left as they were.
    q1, k1 = rope(q0, k0, cos, sin, pos_arg, interleaved=interleaved)
    assert torch.equal(q1, q) and torch.equal(k1, k)
    assert not torch.equal(q0, q1), "the out-of-place call wrote into q"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("inplace", [False, True])
def test_hugging_face_views_and_per_token_tables(dtype, inplace):
    """What a Hugging Face Llama attention passes: q, k = proj(x).view(B, S, H, D).transpose(1, 2)
    (bhsd views of bshd memory) and the rotary embedding's cos, sin (B, S, D) in the
    activation dtype. Read in place (no copy), written back in place when asked."""
    B, S, hq, hk, d = 2, 37, 8, 2, 128
    q_mem, k_mem = make_qk(B, S, hq, hk, d, dtype, "bshd", "hf")
    q, k = q_mem.transpose(1, 2), k_mem.transpose(1, 2)
    position_ids = torch.arange(5, 5 + S, device="cuda").expand(B, S)
    theta = position_ids.float()[..., None] * rope_inv_freq(d, device="cuda")
    emb = torch.cat([theta, theta], -1)
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    ref_q, ref_k = hf_reference(q, cos, sin, 1), hf_reference(k, cos, sin, 1)
    keep_q, keep_k = q.clone(), k.clone()
    q_out, k_out = rope(q, k, cos, sin, layout="bhsd", inplace=inplace)
    assert q_out.shape == q.shape and q_out.stride() == q.stride() and k_out.stride() == k.stride()
    assert rel_err(q_out, ref_q) <= TOLERANCE[dtype] and rel_err(k_out, ref_k) <= TOLERANCE[dtype]
    if inplace:
        assert q_out is q and k_out is k
    else:
        assert torch.equal(q, keep_q) and torch.equal(k, keep_k)


@pytest.mark.parametrize("inplace", [False, True])
def test_strided_views_are_copied_and_written_back(inplace):
    B, S, hq, hk, d = 2, 9, 4, 2, 32
    wide_q, wide_k = make_qk(B, S, hq, hk, 2 * d, torch.float16, "bshd", "strided")
    q, k = wide_q[..., :d], wide_k[..., d:]  # strided, and k not on a 16-byte boundary
    q0, k0, other_half = q.clone(), k.clone(), wide_q[..., d:].clone()
    cos, sin, cos_seen, sin_seen = tables("table", 16, d, False, torch.float16)
    pos_arg, pos = make_positions("shared", B, S, 16)
    q_out, k_out = rope(q, k, cos, sin, pos_arg, inplace=inplace)
    assert_rotated(q_out, q0, cos_seen, sin_seen, pos, "bshd", False, "q")
    assert_rotated(k_out, k0, cos_seen, sin_seen, pos, "bshd", False, "k")
    assert torch.equal(wide_q[..., d:], other_half), "wrote outside the view"
    if inplace:
        assert q_out is q and k_out is k
    else:
        assert torch.equal(q, q0) and torch.equal(k, k0)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_q_or_k_alone(layout):
    B, S, hq, hk, d = 2, 11, 3, 2, 64
    q, k = make_qk(B, S, hq, hk, d, torch.float16, layout, "alone")
    cos, sin, cos_seen, sin_seen = tables("table", 16, d, False, torch.float16)
    pos_arg, pos = make_positions("batched", B, S, 16)
    q_out, none = rope(q, None, cos, sin, pos_arg, layout=layout)
    assert none is None
    assert_rotated(q_out, q, cos_seen, sin_seen, pos, layout, False, "q alone")
    none, k_out = rope(None, k, cos, sin, pos_arg, layout=layout)
    assert none is None
    assert_rotated(k_out, k, cos_seen, sin_seen, pos, layout, False, "k alone")


def test_decode_each_sequence_at_its_own_length():
    """B=8 sequences of one new token each, at positions of the lengths of their caches."""
    B, hq, hk, d = 8, 32, 8, 128
    q, k = make_qk(B, 1, hq, hk, d, torch.bfloat16, "bshd", "decode")
    lengths = torch.tensor([[0], [1], [17], [511], [512], [1000], [4095], [2048]], device="cuda", dtype=torch.int32)
    cos, sin = rope_cache(4096, d)
    q_out, k_out = rope(q, k, cos, sin, lengths)
    seen = cos.double(), sin.double()
    assert_rotated(q_out, q, *seen, lengths.long(), "bshd", False, "q decode")
    assert_rotated(k_out, k, *seen, lengths.long(), "bshd", False, "k decode")
    q_cmp, k_cmp = rope(q, k, positions=lengths)  # the same angles, computed
    assert rel_err(q_cmp, q_out) <= TOLERANCE[torch.bfloat16] and rel_err(k_cmp, k_out) <= TOLERANCE[torch.bfloat16]


def test_nan_and_inf_propagate_like_torch():
    B, S, hq, hk, d = 1, 4, 2, 1, 16
    q, k = make_qk(B, S, hq, hk, d, torch.float32, "bshd", "nan")
    q[0, 1, 0, 3] = float("nan")
    k[0, 0, 0, 9] = float("inf")  # position 0: sin = 0, so inf·sin is NaN in the partner
    cos, sin = rope_cache(8, d)
    q_out, k_out = rope(q, k, cos, sin)
    c, s = heads_axis(cos[:S][None].double(), "bshd"), heads_axis(sin[:S][None].double(), "bshd")
    for out, x in ((q_out, q), (k_out, k)):
        ref = rotate_reference(x.double(), c, s, False)
        assert torch.equal(torch.isnan(out), torch.isnan(ref)), "NaN pattern differs from torch"
        assert torch.equal(torch.isinf(out), torch.isinf(ref)), "inf pattern differs from torch"
        finite = torch.isfinite(ref)
        assert torch.allclose(out.double()[finite], ref[finite], rtol=1e-5, atol=1e-5)
    assert torch.isnan(q_out[0, 1, 0, 3]) and torch.isnan(q_out[0, 1, 0, 11]), "a NaN reaches both of its pair"
    assert torch.isnan(k_out[0, 0, 0, 1]) and torch.isinf(k_out[0, 0, 0, 9])


def test_positions_outside_the_table_give_zeros():
    B, S, hq, hk, d = 2, 4, 4, 2, 64
    q, k = make_qk(B, S, hq, hk, d, torch.float16, "bshd", "outside")
    cos, sin = rope_cache(10, d)
    pos = torch.tensor([[0, 10, -1, 3], [9, 1000, 2, -7]], device="cuda")
    q_out, k_out = rope(q, k, cos, sin, pos)
    outside = (pos < 0) | (pos >= 10)
    assert (q_out[outside] == 0).all() and (k_out[outside] == 0).all()
    inside = pos.clamp(0, 9)
    c, s = heads_axis(cos.double()[inside], "bshd"), heads_axis(sin.double()[inside], "bshd")
    ref = rotate_reference(q.double(), c, s, False)
    assert rel_err(q_out[~outside], ref[~outside]) <= TOLERANCE[torch.float16]


def test_position_dtypes_and_shapes():
    B, S, hq, hk, d = 3, 5, 2, 2, 32
    q, k = make_qk(B, S, hq, hk, d, torch.float16, "bshd", "posdtype")
    cos, sin = rope_cache(16, d)
    pos = torch.tensor([4, 0, 9, 2, 15], device="cuda")
    expected = rope(q, k, cos, sin, pos.expand(B, S).contiguous())
    for p in (pos, pos.int(), pos[None], pos[None].int(), pos.expand(B, S).int()):
        got = rope(q, k, cos, sin, p)
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1]), f"positions {p.shape} {p.dtype}"


def test_empty_extents_do_not_launch():
    cos, sin = rope_cache(4, 16)
    for shape in ((0, 3, 2, 16), (2, 0, 2, 16), (2, 3, 0, 16)):
        q = torch.empty(shape, device="cuda", dtype=torch.float16)
        k = torch.empty(shape, device="cuda", dtype=torch.float16)
        q_out, k_out = rope(q, k, cos, sin)
        assert q_out.shape == shape and k_out.shape == shape
    q = randn((2, 3, 4, 16), torch.float16, 1)
    k = torch.empty((2, 3, 0, 16), device="cuda", dtype=torch.float16)
    q_out, k_out = rope(q, k, cos, sin)  # no key heads: q alone is rotated
    assert k_out.shape == k.shape
    assert_rotated(q_out, q, cos.double(), sin.double(), torch.arange(3, device="cuda").expand(2, 3), "bshd",
                   False, "q beside an empty k")


def test_one_kernel_serves_every_sequence_length():
    """S is dynamic: past a block's tokens, a new length compiles nothing."""
    misses = None
    for S in (40, 64, 300):
        q, k = make_qk(2, S, 4, 2, 64, torch.float16, "bshd", "lengths")
        cos, sin, cos_seen, sin_seen = tables("table", S, 64, False, torch.float16)
        q_out, k_out = rope(q, k, cos, sin)
        assert_rotated(q_out, q, cos_seen, sin_seen, torch.arange(S, device="cuda").expand(2, S), "bshd", False,
                       f"S={S}")
        if misses is None:
            misses = rope_mod.kernel_for.cache_info().misses
    assert rope_mod.kernel_for.cache_info().misses == misses


def test_argument_errors_on_the_device():
    q, k = make_qk(2, 5, 4, 2, 16, torch.float16, "bshd", "errors")
    cos, sin = rope_cache(8, 16)
    assert_argument_error(lambda: rope(q, k, cos.cpu(), sin.cpu()), r"rope: cos must be a CUDA tensor")
    assert_argument_error(lambda: rope(q, k.cpu()), r"rope: k must be a CUDA tensor")
    assert_argument_error(lambda: rope(q, k, positions=torch.zeros(5, dtype=torch.int32)),
                          r"rope: positions must be a CUDA tensor")
    assert_argument_error(lambda: rope(q[..., :15], None), r"rope: the head dimension")
