"""T.atomic_add(..., return_prev=True) as an expression on the CPU: the programs of
atomic_prev_programs.py (slots handed out through a shared counter, a global counter
used directly as an index, per-bin ranks from a thread-level loop), ragged and aligned,
in the reference (tile programs) and the simulator; each add happens once however the
result is used; and what the form cannot take is an error naming the argument (the
GPU side: gpu/test_atomic_prev_gpu.py)."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import atomic_prev_programs as ap  # noqa: E402

CASES = [("compact_shared", 300), ("compact_shared", 256), ("compact_global", 200), ("compact_global", 64),
         ("histogram_slots", 300), ("histogram_slots", 128)]


def _outputs(k):
    return [torch.zeros([int(d) for d in p.shape], dtype=getattr(torch, p.dtype_name)) for p in k.params[1:]]


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("name,n", CASES, ids=[f"{n}{a}" for n, a in CASES])
def test_return_prev_hands_out_each_slot_once(run, name, n):
    if run is tt.reference and name == "histogram_slots":
        pytest.skip("a thread-level program (T.get_thread_binding): the reference runs tile programs")
    prog, check = getattr(ap, name)(n)
    k = tegula.compile(prog, target="sm_90a")
    xs = ap.inputs(name, n, seed=n)
    outs = _outputs(k)
    run(k, *xs, *outs)
    assert check(*xs, *outs)


def test_the_add_is_one_statement_in_the_generated_code():
    k = tegula.compile(ap.compact_global(200)[0], target="sm_80")
    src = k.get_kernel_source()
    assert src.count("atomic_add(&Counter[0], 1)") >= 1
    assert all("= atomic_add(" in line for line in src.splitlines() if "atomic_add(&Counter" in line)
    assert len(k.cubin()) > 0


def test_an_unused_result_still_adds():
    @T.prim_func
    def main(C: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                T.atomic_add(C[i % 4], 1, return_prev=True)

    k = tegula.compile(main, target="sm_90a")
    for run in (tt.reference, tt.simulate):
        c = torch.zeros(4, dtype=torch.int32)
        run(k, c)
        assert c.tolist() == [8, 8, 8, 8]


def test_return_prev_on_a_region_is_refused_naming_dst():
    def make():
        @T.prim_func
        def main(C: T.Tensor((4,), "int32"), D: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=32):
                x = T.atomic_add(C[0:4], D[0:4], return_prev=True)
                D[0] = x
        return main

    with pytest.raises(Exception) as info:
        tegula.compile(make(), target="sm_80")
    assert "return_prev=True, dst must be one element" in str(info.value)
