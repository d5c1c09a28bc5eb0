"""Copies a program groups and waits for itself (T.ptx_commit_group, T.ptx_wait_group) on
the GPU against torch: the prefetching ring of async_group_programs.py on sm_80-class code
and on sm_90a, ragged and aligned rows, and per-thread T.ptx_cp_async groups read by other
threads; fresh random inputs, outputs poisoned (cpu/test_async_groups.py checks the same
programs on the interpreters)."""
import os
import sys

import pytest
import torch

import tegula

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import async_group_programs as ap  # noqa: E402

pytestmark = pytest.mark.gpu
POISON = float("nan")


@pytest.mark.parametrize("M,steps,stages,dtype,annotated", [
    (64, 5, 2, "float16", False), (45, 4, 3, "bfloat16", True), (16, 1, 2, "float32", False), (200, 7, 2, "float16", True)])
def test_prefetch_ring(M, steps, stages, dtype, annotated):
    k = tegula.compile(ap.prefetch_program(M, steps, stages=stages, dtype=dtype, annotated=annotated))
    x = torch.randn(M, steps * 32, device="cuda").to(getattr(torch, dtype))
    o = torch.full((M, 32), POISON, device="cuda")
    k(x, o)
    torch.testing.assert_close(o, ap.prefetch_ref(x, steps, 32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [64, 128, 256])
def test_thread_groups(threads):
    k = tegula.compile(ap.thread_groups_program(threads))
    a = torch.randn(threads * 8, device="cuda")
    b = torch.full_like(a, POISON)
    for _ in range(3):  # fresh inputs each time: a late landing would show stale values
        a.normal_()
        k(a, b)
        torch.testing.assert_close(b, ap.thread_groups_ref(a), rtol=0, atol=0)
