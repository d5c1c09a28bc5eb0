"""Writes to replicated fragments inside later loops, on the GPU: every program of
replicated_programs.py against torch in float64, outputs poisoned before the run."""
import zlib

import pytest
import torch

import replicated_programs as rp
from helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", sorted(rp.CASES))
def test_matches_torch(name):
    make, inputs, ref = rp.CASES[name]
    kernel = make("auto")
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    args = [a.cuda() for a in inputs(gen)]
    outs = []
    full = []
    it = iter(args)
    for p in kernel.params:
        if p.is_output:
            shape = [d if d is not None else args[0].shape[i] for i, d in enumerate(p.shape)]
            out = torch.full(shape, float("nan"), dtype=p.dtype, device="cuda")
            outs.append(out)
            full.append(out)
        else:
            full.append(next(it))
    kernel.launch(*full)
    torch.cuda.synchronize()
    want = ref(*[a.cpu() for a in args])
    want = want if isinstance(want, list) else [want]
    for got, w in zip(outs, want):
        assert not torch.isnan(got).any(), f"{name}: {int(torch.isnan(got).sum())} elements never written"
        err = rel_err(got.cpu(), w)
        assert err < 1e-5, f"{name}: relative error {err:.2e}"


@pytest.mark.parametrize("name", sorted(rp.CASES))
def test_call_with_allocated_outputs(name):
    make, inputs, ref = rp.CASES[name]
    kernel = make("auto")
    gen = torch.Generator().manual_seed(1 + (zlib.crc32(name.encode())))
    args = [a.cuda() for a in inputs(gen)]
    got = kernel(*args)
    got = got if isinstance(got, list) else [got]
    want = ref(*[a.cpu() for a in args])
    want = want if isinstance(want, list) else [want]
    for g, w in zip(got, want):
        assert rel_err(g.cpu(), w) < 1e-5
