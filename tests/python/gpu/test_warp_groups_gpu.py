"""Warp-group scopes (`with T.ws(g):`) and run-time clear_accum on the GPU against torch
in float32 (the programs of tests/python/ws_programs.py; the CPU side, reference and
simulator, in tests/python/cpu/test_warp_groups.py): fresh random inputs each run,
aligned and ragged shapes. The programs that meet at mbarriers need sm_90."""
import pytest
import torch

import ws_programs as wp

pytestmark = pytest.mark.gpu

SHAPES = pytest.mark.parametrize("shape", [(512, 384, 640), (500, 328, 600)], ids=["aligned", "ragged"])


def target():
    major, minor = torch.cuda.get_device_capability()
    return "sm_90a" if major == 9 else f"sm_{major}{minor}"


def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


needs_hopper = pytest.mark.skipif(not _hopper(), reason="mbarrier programs need sm_90")


def _as_float(got, want):
    """got (any float type) against want, in float32."""
    return got.float(), want


@needs_hopper
@SHAPES
@pytest.mark.parametrize("consumer_first", [False, True], ids=["producer_first", "consumer_first"])
def test_ring_gemm(shape, consumer_first):
    kernel = wp.ring_gemm("sm_90a", consumer_first)(*shape)
    a, b = wp.gemm_inputs(*shape, device="cuda")
    torch.testing.assert_close(*_as_float(kernel(a, b), a.float() @ b.float()), rtol=1e-3, atol=1e-3)


@needs_hopper
@SHAPES
def test_two_warp_groups_consume_together(shape):
    kernel = wp.two_consumer_groups("sm_90a")(*shape)
    a, b = wp.gemm_inputs(*shape, device="cuda")
    torch.testing.assert_close(*_as_float(kernel(a, b), a.float() @ b.float()), rtol=1e-3, atol=1e-3)


@SHAPES
def test_warp_groups_split_the_columns(shape):
    kernel = wp.split_columns(target())(*shape)
    a, b = wp.gemm_inputs(*shape, device="cuda")
    torch.testing.assert_close(*_as_float(kernel(a, b), a.float() @ b.float()), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n", [1 << 16, 70000], ids=["aligned", "ragged"])
def test_elementwise_work_per_warp_group(n):
    kernel = wp.elementwise_groups(target())(n)
    a = torch.randn(n, device="cuda")
    assert torch.equal(kernel(a).cpu(), wp.elementwise_expected(a.cpu()))


@pytest.mark.parametrize("loop", ["serial", "pipelined"])
@pytest.mark.parametrize("when", wp.CLEAR_WHEN)
@SHAPES
def test_clear_accum_at_run_time(loop, when, shape):
    kernel = wp.gemm_clear_when(target(), when, loop)(*shape)
    a, b = wp.gemm_inputs(*shape, device="cuda")
    torch.testing.assert_close(*_as_float(kernel(a, b), wp.clear_expected(a, b, when)), rtol=1e-3, atol=1e-3)


@needs_hopper
@pytest.mark.parametrize("D", [128, 192, 256])
def test_unrolled_slices_with_clear_accum_in_a_warp_group(D):
    kernel = wp.split_k_attention("sm_90a")(64, 64, D)
    q = torch.randn(64, D, device="cuda").half()
    k = torch.randn(64, D, device="cuda").half()
    v = torch.randn(64, 64, device="cuda").half()
    s, o = kernel(q, k, v)
    want_s, _ = wp.split_k_attention_expected(q, k, v)
    torch.testing.assert_close(s, want_s, rtol=1e-4, atol=1e-3)
    _, want_o = wp.split_k_attention_expected(q, k, v, s)
    torch.testing.assert_close(o, want_o, rtol=1e-4, atol=1e-3)
