"""Fragments read at a scalar index outside every T.Parallel loop, on the GPU: every
program of fragment_access_programs.py against torch in float64, the output poisoned
(NaN) before the run."""
import zlib

import pytest
import torch

import fragment_access_programs as fp
from helpers import rel_err

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", sorted(fp.CASES))
def test_matches_torch(name):
    make, inputs, ref = fp.CASES[name]
    kernel = make("auto")
    args = inputs(torch.Generator().manual_seed(zlib.crc32(name.encode())))
    it = iter([a.cuda() for a in args])
    full, outs = [], []
    for p in kernel.params:
        if p.is_output:
            out = torch.full(list(p.shape), float("nan"), dtype=p.dtype, device="cuda")
            outs.append(out)
            full.append(out)
        else:
            full.append(next(it))
    kernel.launch(*full)
    torch.cuda.synchronize()
    want = ref(*args)
    got = outs[0].double().cpu()
    assert not torch.isnan(got).any(), f"{name}: {int(torch.isnan(got).sum())} elements never written"
    assert rel_err(got, want) < 1e-5, f"{name}: relative error {rel_err(got, want):.2e}"
