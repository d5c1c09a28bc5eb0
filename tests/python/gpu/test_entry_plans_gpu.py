"""The shipped entry points through their entry plans on the GPU (kernels/_calls.py
`planned`, src/bindings/entry_plans.cc): each is called with fresh random inputs of one
signature until its plan replays, every result checked against torch in float32, ragged
and aligned sizes, outputs given with out= poisoned; replays on another stream, inside a
CUDA graph and with inputs that alias; and the calls a plan must not serve (a misaligned
view the entry point copies, inputs that require grad) still right. The CPU side is
cpu/test_entry_plans.py."""
import pytest
import torch
import torch.nn.functional as F

import tegula.kernels as K
from tegula.kernels import _ops

pytestmark = pytest.mark.gpu

DT = torch.bfloat16


def randn(*shape, dtype=DT, scale=1.0):
    return (torch.randn(shape, device="cuda") * scale).to(dtype)


def close(got, want, tol=2e-2):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g.float(), w.float(), rtol=tol, atol=tol)


def replays(fn, make, reference, calls=4, tol=2e-2):
    """Calls fn(*args) with fresh inputs from make() `calls` times, each result against
    reference(*args); returns how many calls replayed a plan."""
    before = fn.plans.stats()["hits"]
    for _ in range(calls):
        args = make()
        close(fn(*args), reference(*args), tol)
    return fn.plans.stats()["hits"] - before


def rms_ref(x, w, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


ROWS = [(8, 4096), (5, 1000), (3, 33)]


@pytest.mark.parametrize("M,N", ROWS)
def test_row_entry_points_replay_their_plans(M, N):
    cases = [
        (K.rms_norm, lambda: (randn(M, N), randn(N)), rms_ref),
        (K.rms_norm_silu, lambda: (randn(M, N), randn(N)), lambda x, w: F.silu(rms_ref(x, w).float()).to(DT)),
        (K.layer_norm, lambda: (randn(M, N), randn(N), randn(N)),
         lambda x, w, b: F.layer_norm(x.float(), (N,), w.float(), b.float(), 1e-5).to(DT)),
        (K.softmax, lambda: (randn(M, N),), lambda x: torch.softmax(x.float(), -1).to(DT)),
        (K.add, lambda: (randn(M, N), randn(M, N)), lambda x, y: (x.float() + y.float()).to(DT)),
        (K.add, lambda: (randn(M, N), randn(N)), lambda x, y: (x.float() + y.float()).to(DT)),
        (K.row_max, lambda: (randn(M, N),), lambda x: x.amax(-1)),
        (K.row_min, lambda: (randn(M, N),), lambda x: x.amin(-1)),
        (K.transpose, lambda: (randn(M, N),), lambda x: x.t().contiguous()),
        (K.swiglu, lambda: (randn(M, 2 * N),),
         lambda x: (F.silu(x[:, :N].float()) * x[:, N:].float()).to(DT)),
    ]
    for fn, make, ref in cases:
        assert replays(fn, make, ref) >= 2, fn.__name__
    assert replays(K.row_sum, lambda: (randn(M, N),), lambda x: x.float().sum(-1).to(DT), tol=5e-2) >= 2


@pytest.mark.parametrize("M,N", ROWS)
def test_add_rms_norm_replays_out_of_place_and_in_place(M, N):
    def ref(x, r, w):
        h = (x.float() + r.float()).to(DT)
        return rms_ref(h, w), h

    assert replays(K.add_rms_norm, lambda: (randn(M, N), randn(M, N), randn(N)), ref) >= 2
    for _ in range(4):
        x, r, w = randn(M, N), randn(M, N), randn(N)
        want = ref(x, r, w)
        y, h = K.add_rms_norm(x, r, w, inplace=True)
        assert h is r  # the argument itself, from the plan too
        close((y, r), want)


def test_out_arguments_are_written_through_the_plan():
    before = K.rms_norm.plans.stats()["hits"]
    for _ in range(4):
        x, w = randn(8, 4096), randn(4096)
        out = torch.full_like(x, float("nan"))
        assert K.rms_norm(x, w, out=out) is out
        close(out, rms_ref(x, w))
    assert K.rms_norm.plans.stats()["hits"] - before >= 2


def test_gemms_replay():
    def mm(a, b):
        return (a.float() @ b.float()).to(DT)

    assert replays(K.matmul, lambda: (randn(8, 4096), randn(4096, 1024, scale=0.02)), mm) >= 2
    assert replays(K.matmul, lambda: (randn(77, 200), randn(200, 136, scale=0.1)), mm) >= 2
    bias = randn(1024)
    assert replays(K.matmul, lambda: (randn(8, 512), randn(512, 1024, scale=0.05), bias, "relu"),
                   lambda a, b, c, act: torch.relu(a.float() @ b.float() + c.float()).to(DT)) >= 2

    def swiglu_linear_ref(x, w):
        y = x.float() @ w.float().t()
        n = w.shape[0] // 2
        return (F.silu(y[:, :n]) * y[:, n:]).to(DT)

    assert replays(K.swiglu_linear, lambda: (randn(8, 512), randn(2048, 512, scale=0.05)), swiglu_linear_ref,
                   tol=3e-2) >= 2


def test_attention_replays():
    B, H, HKV, D, S = 4, 8, 2, 128, 300

    def decode_inputs():
        return randn(B, H, D), randn(B, S, HKV, D), randn(B, S, HKV, D), \
            torch.tensor([300, 1, 77, 256], dtype=torch.int32, device="cuda")

    def decode_ref(q, k, v, lens):
        out = []
        for b in range(B):
            n = int(lens[b])
            kk = k[b, :n].float().repeat_interleave(H // HKV, 1).transpose(0, 1)
            vv = v[b, :n].float().repeat_interleave(H // HKV, 1).transpose(0, 1)
            s = (q[b].float().unsqueeze(1) @ kk.transpose(1, 2)) * D ** -0.5
            out.append((torch.softmax(s, -1) @ vv).squeeze(1))
        return torch.stack(out).to(DT)

    assert replays(_ops.flash_decode, decode_inputs, decode_ref) >= 2

    def attn_ref(q, k, v):
        o = F.scaled_dot_product_attention(q.float().transpose(1, 2), k.float().transpose(1, 2),
                                           v.float().transpose(1, 2), is_causal=True, enable_gqa=True)
        return o.transpose(1, 2).to(DT)

    def attn(q, k, v):
        return _ops.flash_attention(q, k, v, causal=True)

    attn.plans = _ops.flash_attention.plans
    assert replays(attn, lambda: (randn(2, 200, H, 64), randn(2, 200, HKV, 64), randn(2, 200, HKV, 64)),
                   attn_ref) >= 2


def test_entry_points_with_plan_constants_replay():
    # w4a16_gemm passes a placeholder for absent zero points; mla_decode a block table
    # its contiguous program never reads: both kept between calls as plan constants. The
    # first call makes the constant (a torch operator, so that recording is refused).
    from tegula.kernels import weight_packing as wp

    def w4_inputs():
        w = randn(512, 1024, scale=0.03)
        q4, s4, _ = wp.quantize_int4(w, 128, symmetric=True)
        return randn(8, 1024), q4, s4

    def w4_ref(x, q4, s4):
        return (x.float() @ wp.dequantize(q4, s4, None, 128, "int4").float().t()).to(DT)

    assert replays(K.w4a16_gemm, w4_inputs, w4_ref, calls=6, tol=3e-2) >= 2

    B, Hq, S = 4, 16, 256
    lens = torch.tensor([256, 1, 64, 150], dtype=torch.int32, device="cuda")

    def mla_ref(q, kv, lens):
        out = []
        for b in range(B):
            n = int(lens[b])
            s = (q[b].float() @ kv[b, :n].float().t()) * 576 ** -0.5
            out.append(torch.softmax(s, -1) @ kv[b, :n, :512].float())
        return torch.stack(out).to(DT)

    from tegula.kernels import _ops

    def mla(q, kv, lens):
        return _ops.mla_decode(q, kv, lens, sm_scale=576 ** -0.5)

    mla.plans = _ops.mla_decode.plans
    assert replays(mla, lambda: (randn(B, Hq, 576), randn(B, S, 576, scale=0.5), lens), mla_ref, calls=6) >= 2


def test_rope_replays_with_positions_and_in_place():
    P, D = 64, 128
    cos, sin = K.rope_cache(P, D, device="cuda")

    def ref(q, k, cos, sin, pos):
        def rot(x):
            c = torch.cat((cos[pos], cos[pos]), -1).unsqueeze(2)
            s = torch.cat((sin[pos], sin[pos]), -1).unsqueeze(2)
            x1, x2 = x.float().chunk(2, -1)
            return (x.float() * c + torch.cat((-x2, x1), -1) * s).to(DT)
        return rot(q), rot(k)

    def make():
        return randn(3, 5, 8, D), randn(3, 5, 2, D), cos, sin, torch.randint(0, P, (3, 5), device="cuda")

    assert replays(K.rope, make, ref, tol=3e-2) >= 2
    for _ in range(4):
        q, k, _, _, pos = make()
        want = ref(q, k, cos, sin, pos)
        got = K.rope(q, k, cos, sin, pos, inplace=True)
        assert got[0] is q and got[1] is k
        close((q, k), want, 3e-2)


def test_replay_on_another_stream_and_in_a_cuda_graph():
    x, w = randn(8, 4096), randn(4096)
    for _ in range(3):
        K.rms_norm(x, w)
    hits = K.rms_norm.plans.stats()["hits"]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = K.rms_norm(x, w)
    side.synchronize()
    close(y, rms_ref(x, w))
    graph = torch.cuda.CUDAGraph()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        K.rms_norm(x, w)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        y = K.rms_norm(x, w)
    for _ in range(3):
        x.copy_(randn(8, 4096))
        graph.replay()
        torch.cuda.synchronize()
        close(y, rms_ref(x, w))
    assert K.rms_norm.plans.stats()["hits"] - hits >= 3


def test_aliased_inputs_are_their_own_signature():
    def same_tensor_twice():
        x = randn(8, 512)
        return x, x

    def added(x, y):
        return (x.float() + y.float()).to(DT)

    # add(x, x) and add(x, y) have the same shapes but separate plans; each replays right.
    assert replays(K.add, same_tensor_twice, added) >= 2
    assert replays(K.add, lambda: (randn(8, 512), randn(8, 512)), added) >= 2


def test_calls_the_plan_must_not_serve_are_still_right():
    # A misaligned view: the entry point copies it (a torch operator), so it is never planned.
    stats = K.rms_norm.plans.stats()
    for _ in range(5):
        base, w = randn(8, 4097), randn(4096)
        x = base[:, 1:]
        close(K.rms_norm(x, w), rms_ref(x, w))
    after = K.rms_norm.plans.stats()
    assert after["hits"] == stats["hits"] and after["refusals"] > stats["refusals"]
    assert "aten::" in after["last_refusal"]
    # Inputs that require grad: autograd records the call, never a plan.
    for _ in range(4):
        x, w = randn(4, 256, dtype=torch.float32).requires_grad_(), randn(256, dtype=torch.float32).requires_grad_()
        y = K.rms_norm(x, w)
        assert y.requires_grad
        y.sum().backward()
        xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        F.rms_norm(xr, (256,), wr, 1e-6).sum().backward()
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
    assert K.rms_norm.plans.stats()["hits"] == after["hits"]


def test_a_replay_with_a_bad_size_still_raises_what_the_entry_point_raises():
    x, w = randn(8, 256), randn(256)
    for _ in range(3):
        K.rms_norm(x, w)
    with pytest.raises(ValueError, match="weight must have shape"):
        K.rms_norm(x, randn(255))
