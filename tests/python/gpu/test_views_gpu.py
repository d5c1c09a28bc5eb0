"""Views (T.reshape, T.view, T.Tensor(shape, dtype, buf.data)) and T.im2col on the GPU:
the programs of tests/python/view_programs.py against torch, ragged and aligned, outputs
poisoned (the CPU side, reference and simulator, in cpu/test_views.py)."""
import pytest
import torch

import tegula
import view_programs as vp

pytestmark = pytest.mark.gpu

CASES = [
    ("global_reshape", (1024, 32)),
    ("swizzled_shared_reshape", (1024, 32, "float32")),
    ("swizzled_shared_reshape", (2048, 64, "float16")),
    ("swizzled_shared_reshape", (4096, 128, "float16")),
    ("shared_1d_to_2d", (2048, 64)),
    ("fragment_2d_to_1d", (256, 16)),
    ("view_writes_through", (100, 8)),
    ("view_writes_through", (1000, 8)),
    ("flattened_parameter", (9, 24)),
    ("flattened_parameter", (40, 64)),
    ("reduce_over_view", (2, 3, 128)),
    ("reduce_over_view", (8, 4, 32)),
    ("gemm_result_through_view", (64, 16, 32, 4)),
    ("indexer_logits", (64, 4, 16, 32)),
    ("indexer_logits", (128, 2, 32, 64)),
]


@pytest.mark.parametrize("name,args", CASES, ids=[f"{n}{a}" for n, a in CASES])
def test_views_against_torch(name, args):
    prog, ref = getattr(vp, name)(*args)
    k = tegula.compile(prog)
    g = torch.Generator().manual_seed(sum(a for a in args if isinstance(a, int)))
    xs = [torch.randn([int(d) for d in p.shape], generator=g).to(getattr(torch, p.dtype_name)).cuda()
          for p in k.params[:-1]]
    out_p = k.params[-1]
    out = torch.full([int(d) for d in out_p.shape], float("nan"), dtype=getattr(torch, out_p.dtype_name), device="cuda")
    k(*xs, out)
    torch.testing.assert_close(out.double(), ref(*xs).double(), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("shape", [(2, 16, 9, 7, 24, 3, 1, 1, 1), (4, 64, 32, 32, 128, 3, 1, 1, 1),
                                   (2, 32, 17, 13, 64, 3, 2, 2, 0), (1, 32, 6, 6, 64, 1, 1, 1, 0)])
def test_im2col_convolution_against_torch(shape):
    prog, ref = vp.convolution(*shape)
    k = tegula.compile(prog)
    N, C, H, W, F, K = shape[:6]
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(N, H, W, C, generator=g).half().cuda()
    w = torch.randn(K, K, C, F, generator=g).half().cuda()
    expected = ref(x, w)
    out = torch.full(expected.shape, float("nan"), dtype=torch.float16, device="cuda")
    k(x, w, out)
    torch.testing.assert_close(out.double(), expected, rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("args", [(16, 64), (64, 512), (32, 40), (8, 32, "float16", "float64"),
                                  (16, 64, "int8", "int32")], ids=str)
def test_a_view_of_another_dtype_against_torch(args):
    # The bytes of a shared tile seen as a wider type, bit for bit, and values written
    # through the view read back through it (TileLang's sparse MLA backward reuses a
    # bfloat16 tile as float32 scratch this way).
    prog, ref = vp.shared_view_as_wider(*args)
    k = tegula.compile(prog)
    dt, wide = (getattr(torch, p.dtype_name) for p in k.params[:2])

    def filled(p, t):
        shape = [int(d) for d in p.shape]
        return torch.randn(shape).to(t) if t.is_floating_point else torch.randint(-100, 100, shape, dtype=t)

    A, B = filled(k.params[0], dt), filled(k.params[1], wide)
    bits, out = (torch.zeros([int(d) for d in p.shape], dtype=wide, device="cuda") for p in k.params[2:])
    k(A.cuda(), B.cuda(), bits, out)
    want_bits, want_out = ref(A, B)
    assert torch.equal(bits.cpu().view(torch.uint8), want_bits.view(torch.uint8))
    assert torch.equal(out.cpu(), want_out)


@pytest.mark.parametrize("n", [100, 4096, 100001])
def test_a_global_view_of_another_dtype_against_torch(n):
    prog, ref = vp.global_view_as_wider(n)
    k = tegula.compile(prog)
    A = torch.randn(2 * n).bfloat16()
    out = torch.full((n,), float("nan"), device="cuda")
    k(A.cuda(), out)
    assert torch.equal(out.cpu().view(torch.int32), ref(A).view(torch.int32))
