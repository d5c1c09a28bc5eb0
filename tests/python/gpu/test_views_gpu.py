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
    g = torch.Generator().manual_seed(sum(args))
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
