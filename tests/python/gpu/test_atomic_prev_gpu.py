"""T.atomic_add(..., return_prev=True) on the GPU: the programs of
tests/python/atomic_prev_programs.py, whose checks hold in any order the threads run in
(each slot handed out once, counts exact), ragged and aligned sizes, fresh inputs; the
CPU side is cpu/test_atomic_prev.py."""
import pytest
import torch

import tegula
import atomic_prev_programs as ap

pytestmark = pytest.mark.gpu

CASES = [("compact_shared", 300), ("compact_shared", 4096), ("compact_global", 200), ("compact_global", 100000),
         ("histogram_slots", 300), ("histogram_slots", 5000)]


@pytest.mark.parametrize("name,n", CASES, ids=[f"{n}{a}" for n, a in CASES])
def test_return_prev_hands_out_each_slot_once(name, n):
    prog, check = getattr(ap, name)(n)
    k = tegula.compile(prog)
    xs = ap.inputs(name, n, seed=torch.seed() & 0xFFFF)
    outs = [torch.zeros([int(d) for d in p.shape], dtype=getattr(torch, p.dtype_name), device="cuda")
            for p in k.params[1:]]
    k(*[x.cuda() for x in xs], *outs)
    assert check(*xs, *[o.cpu() for o in outs])
