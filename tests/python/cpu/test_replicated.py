"""Writes to replicated fragments (reduction outputs) inside later loops, on the CPU: the
reference interpreter gives the program's meaning, and the simulator of the lowered code
must agree with it and with torch. The same programs run on the GPU in
gpu/test_replicated_gpu.py."""
import zlib

import pytest
import torch

import replicated_programs as rp
import tegula.testing as tt
from helpers import rel_err


def _outputs(result):
    return result if isinstance(result, list) else [result]


@pytest.mark.parametrize("name", sorted(rp.CASES))
@pytest.mark.parametrize("run", ["reference", "simulate"])
def test_matches_torch(name, run):
    make, inputs, ref = rp.CASES[name]
    kernel = make("sm_90a")
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    args = inputs(gen)
    got = _outputs(getattr(tt, run)(kernel, *args))
    want = _outputs(ref(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert not torch.isnan(g).any(), f"{name}: unwritten or NaN elements"
        assert rel_err(g, w) < 1e-5, f"{name} ({run}): relative error {rel_err(g, w):.2e}"


def test_every_copy_of_a_replicated_fragment_is_updated():
    # The lowered code keeps the division unguarded (every copy runs it) and guards the
    # global store alone.
    ir = rp.center(256, 1024, target="sm_90a").get_ir("final")
    division = next(line for line in ir.splitlines() if "/1024.0" in line)
    store = ir.splitlines().index(next(line for line in ir.splitlines() if line.strip().startswith("S[bx]")))
    assert not division.startswith("        "), "the write to the replicated fragment is guarded:\n" + ir
    assert ir.splitlines()[store - 1].strip().startswith("if tx"), "the global store is not made once:\n" + ir


def test_copies_in_a_serial_loop_are_complete_before_they_are_read():
    # A global->shared copy inside a plain loop is not a pipelined copy: it must have
    # landed before the loop body reads it, so no cp.async is left waiting after the loop.
    kernel = rp.running_mean(12, 300, target="sm_90a")
    ir = kernel.get_ir("final")
    assert "cp_async" not in ir, ir
