"""roll_loops (src/transform/roll_loops.cc) without a GPU: a kernel whose fragment share
per thread is past the register file (a 32 x 1024 float32 tile over 128 threads: 256 words
a thread) has its per-element statements rolled into loops, and computes what the program
means, through the reference interpreter and the thread-by-thread simulator of the rolled
code, on aligned and ragged shapes; a kernel whose fragments fit keeps its straight-line
code. The GPU side: gpu/test_roll_loops_gpu.py."""
import os
import re
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import roll_loops_programs as rp  # noqa: E402
import tegula  # noqa: E402
import tegula.testing as tt  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::tegula.RegisterPressureWarning")


def rolled_loops(source: str) -> int:
    return len(re.findall(r"for \(int roll\d+ = ", source))


@pytest.mark.parametrize("M,N", [(64, 1024), (50, 1000)], ids=["aligned", "ragged"])
@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_wide_softmax_rolled_computes_the_program(run, M, N):
    kernel = tegula.compile(rp.wide_softmax(M, N, 32), target="sm_90a")
    assert rolled_loops(kernel.get_kernel_source()) >= 3
    x = torch.randn(M, N) * 4
    x[3, 7] = float("-inf")  # exp(-inf - max) is 0, as torch has it
    y = torch.full((M, N), float("nan"))
    run(kernel, x, y)
    torch.testing.assert_close(y.double(), rp.softmax_ref(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("M,N", [(64, 1024), (33, 1000)], ids=["aligned", "ragged"])
@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_wide_rms_norm_rolled_computes_the_program(run, M, N):
    kernel = tegula.compile(rp.wide_rms_norm(M, N, 32), target="sm_90a")
    assert rolled_loops(kernel.get_kernel_source()) >= 3
    x, w = torch.randn(M, N), torch.rand(N) + 0.5
    y = torch.full((M, N), float("nan"))
    run(kernel, x, w, y)
    torch.testing.assert_close(y.double(), rp.rms_norm_ref(x, w), rtol=1e-5, atol=1e-6)


def test_rolled_code_is_small_and_compiles():
    kernel = tegula.compile(rp.wide_softmax(256, 4096, 32), target="sm_90a")
    source = kernel.get_kernel_source()
    # 1024 elements a thread: one statement each would be thousands of lines.
    assert source.count("\n") < 1200, source.count("\n")
    assert "rows[1023]" not in source and re.search(r"rows\[\(?\(?roll\d+", source)
    # The temporaries of the vector loads after the first are gone with their statements.
    assert len(re.findall(r"float vld_\d+\[4\]", source)) <= 2
    # Constants a call spells as literals stay literals.
    assert "tegula::shfl_xor(" in source and not re.search(r"shfl_xor\([^;]*roll\d+", source)
    assert kernel.cubin()[:4] == b"\x7fELF"
    assert kernel.get_ir("roll_loops") == kernel.get_ir("final")


def test_fragments_that_fit_are_not_rolled():
    # 4 x 1024 over 128 threads: 32 words a thread, registers; the code stays straight.
    kernel = tegula.compile(rp.wide_softmax(64, 1024, 4), target="sm_90a")
    source = kernel.get_kernel_source()
    assert rolled_loops(source) == 0 and "rows[31]" in source
    x, y = torch.randn(64, 1024), torch.full((64, 1024), float("nan"))
    tt.simulate(kernel, x, y)
    torch.testing.assert_close(y.double(), rp.softmax_ref(x), rtol=1e-5, atol=1e-7)
