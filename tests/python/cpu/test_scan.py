"""T.cumsum on the CPU: the programs of scan_programs.py (shared and fragment tiles, both
dimensions, forward and reversed, in place and into another tile, a column band, a 1-D
line, a scan under a run-time guard), ragged and aligned, in the reference interpreter
and the simulator against torch.cumsum; the generated code compiles; bad arguments are
errors naming the argument at the DSL line (the GPU side: gpu/test_scan_gpu.py)."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.frontend.errors import TegulaCompileError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import scan_programs as sp  # noqa: E402

RUNS = [tt.reference, tt.simulate]
IDS = ["reference", "simulate"]

TILES = [  # M, N, bm, bn, dim, reverse, src, dst
    (64, 32, 32, 16, 1, False, "shared", None),
    (70, 50, 32, 16, 0, True, "shared", None),
    (45, 33, 16, 16, 1, True, "fragment", None),
    (32, 64, 32, 32, 0, False, "fragment", "shared"),
    (37, 20, 8, 32, -1, False, "shared", "fragment"),
    (64, 64, 16, 64, 0, True, "fragment", "fragment"),
]


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("case", TILES, ids=[f"{c[0]}x{c[1]}_d{c[4]}_{'rev' if c[5] else 'fwd'}_{c[6]}_{c[7]}"
                                             for c in TILES])
def test_tile_scan_matches_torch(run, case):
    M, N, bm, bn, dim, reverse, src, dst = case
    k = tegula.compile(sp.tile_scan(M, N, bm, bn, dim, reverse, src, dst), target="sm_90a")
    A = torch.randn(M, N, generator=torch.Generator().manual_seed(M * N + bm))
    B = torch.zeros(M, N)
    run(k, A, B)
    torch.testing.assert_close(B.double(), sp.expected_tile(A, bm, bn, dim % 2, reverse), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("N,bn,reverse,scope", [(256, 128, False, "shared"), (200, 64, True, "shared"),
                                                (100, 32, False, "fragment"), (96, 96, True, "fragment")])
def test_line_scan_matches_torch(run, N, bn, reverse, scope):
    k = tegula.compile(sp.line_scan(N, bn, reverse, scope), target="sm_80")
    A = torch.randn(N, generator=torch.Generator().manual_seed(N + bn))
    B = torch.zeros(N)
    run(k, A, B)
    torch.testing.assert_close(B.double(), sp.expected_line(A, bn, reverse), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("reverse", [False, True])
def test_band_scan_leaves_the_rest_of_the_tile(run, reverse):
    M, N, bm, bn, lo, hi = 40, 60, 16, 32, 8, 24
    k = tegula.compile(sp.band_scan(M, N, bm, bn, lo, hi, reverse), target="sm_90a")
    A = torch.randn(M, N, generator=torch.Generator().manual_seed(7))
    B = torch.zeros(M, N)
    run(k, A, B)
    torch.testing.assert_close(B.double(), sp.expected_band(A, bm, bn, lo, hi, reverse), rtol=1e-5, atol=1e-5)


def test_int_scan_is_exact():
    k = tegula.compile(sp.tile_scan(33, 40, 16, 16, 1, False, "fragment", None, dtype="int32"), target="sm_80")
    A = torch.randint(-50, 50, (33, 40), dtype=torch.int32, generator=torch.Generator().manual_seed(3))
    for run in RUNS:
        B = torch.zeros(33, 40, dtype=torch.int32)
        run(k, A, B)
        assert torch.equal(B, sp.expected_tile(A, 16, 16, 1).to(torch.int32))


def test_scan_under_a_guard_in_the_simulator():
    M, n, threads, sentinel = 16, 11, 32, -7
    k = tegula.compile(sp.guarded_scan(M, threads), target="sm_90a")
    B = torch.full((M,), sentinel, dtype=torch.int32)
    tt.simulate(k, B, n)
    assert torch.equal(B, sp.expected_guarded(M, n, threads, sentinel))


def test_the_generated_code_compiles_and_scans_in_place():
    k = tegula.compile(sp.tile_scan(64, 64, 32, 32, 1, False, "shared", None), target="sm_90a")
    src = k.get_kernel_source()
    assert "scan_k" in src
    # in place, the first element of a line is its own sum: no self-copy a[..] = a[..]
    assert not any(line.strip().startswith("a[") and line.split("=")[0].strip() == line.split("=")[1].strip(" ;")
                   for line in src.splitlines() if line.count("=") == 1)
    assert len(k.cubin()) > 0
    k2 = tegula.compile(sp.tile_scan(45, 33, 16, 16, 1, True, "fragment", None), target="sm_80")
    assert "cumsum_scratch" in k2.get_kernel_source() and len(k2.cubin()) > 0


def _bad(kind):
    @T.prim_func
    def main(A: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((32, 32), "float32")
            t = T.alloc_shared((32, 16), "float32")
            if kind == "dim":
                T.cumsum(s, dim=2)
            elif kind == "global":
                T.cumsum(A, dim=0)
            elif kind == "shape":
                T.cumsum(s, dst=t, dim=1)
            else:
                T.cumsum(s, dim=0, reverse="yes")
    return main


@pytest.mark.parametrize("kind,arg,words", [("dim", "dim", "dim must be an int in -2..1"),
                                            ("global", "src", "must be a shared or fragment buffer"),
                                            ("shape", "dst", "dst must have the extents of src"),
                                            ("reverse", "reverse", "'reverse' must be True or False")])
def test_bad_arguments_name_the_argument_at_the_line(kind, arg, words):
    with pytest.raises(TegulaCompileError) as info:
        tegula.compile(_bad(kind), target="sm_90a")
    text = str(info.value)
    assert words in text, text
    assert "T.cumsum(" in text  # the caret line shows the call
