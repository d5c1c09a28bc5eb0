"""Stores into a wgmma operand through a view of another dtype become explicit-width
shared stores (store_shared_32); like element stores they are generic-proxy writes the
wgmma (async proxy) must be fenced from. Without the fence the tensor cores could read
the tile before the writes (no error, a wrong product on the GPU); the simulator does not
model proxies, so the generated source is checked. GPU side: gpu/test_view_store_fence_gpu.py."""
import os
import sys

import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import view_fence_programs as vp  # noqa: E402


def test_view_stores_into_an_operand_are_fenced_before_the_wgmma():
    k = tegula.compile(vp.view_store_gemm(), out_idx=[2], target="sm_90a")
    src = k.get_kernel_source()
    first_wgmma = src.index("tegula::wgmma_ss<")
    fence = max(src.rfind("sync_async_proxy", 0, first_wgmma), src.rfind("fence_proxy_async", 0, first_wgmma))
    last_store = src.rfind("store_shared_32", 0, first_wgmma)
    assert last_store >= 0 and fence > last_store, "no proxy fence between the view stores and the wgmma"


def test_view_store_gemm_computes_the_product():
    k = tegula.compile(vp.view_store_gemm(), out_idx=[2], target="sm_90a")
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(64, 64, generator=gen).half(), torch.randn(64, 64, generator=gen).half()
    args = (a.view(torch.int32).view(torch.uint32), b.view(torch.int32).view(torch.uint32))
    for run in (tt.reference, tt.simulate):
        torch.testing.assert_close(run(k, *args), a.float() @ b.float(), rtol=1e-3, atol=1e-2)
