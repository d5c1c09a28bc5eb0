"""T.cumsum on the GPU against torch.cumsum (float64 from the same inputs): the programs
of tests/python/scan_programs.py, shared and fragment tiles, both dimensions, forward and
reversed, in place and into another tile, a column band, 1-D lines, a scan under a
run-time guard; ragged and aligned sizes, fresh inputs (the CPU side: cpu/test_scan.py)."""
import pytest
import torch

import tegula
import scan_programs as sp

pytestmark = pytest.mark.gpu

TILES = [  # M, N, bm, bn, dim, reverse, src, dst
    (256, 128, 32, 64, 1, False, "shared", None),
    (1000, 300, 64, 32, 0, True, "shared", None),
    (333, 77, 16, 32, 1, True, "fragment", None),
    (512, 512, 64, 64, 0, False, "fragment", "shared"),
    (129, 65, 8, 64, -1, False, "shared", "fragment"),
    (640, 96, 32, 32, 0, True, "fragment", "fragment"),
]


@pytest.mark.parametrize("case", TILES, ids=[f"{c[0]}x{c[1]}_d{c[4]}_{'rev' if c[5] else 'fwd'}_{c[6]}_{c[7]}"
                                             for c in TILES])
def test_tile_scan_against_torch(case):
    M, N, bm, bn, dim, reverse, src, dst = case
    k = tegula.compile(sp.tile_scan(M, N, bm, bn, dim, reverse, src, dst))
    A = torch.randn(M, N, device="cuda")
    B = torch.zeros(M, N, device="cuda")
    k(A, B)
    torch.testing.assert_close(B.double(), sp.expected_tile(A, bm, bn, dim % 2, reverse), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("N,bn,reverse,scope", [(4096, 256, False, "shared"), (5000, 128, True, "shared"),
                                                (1000, 64, False, "fragment"), (96, 96, True, "fragment")])
def test_line_scan_against_torch(N, bn, reverse, scope):
    k = tegula.compile(sp.line_scan(N, bn, reverse, scope))
    A = torch.randn(N, device="cuda")
    B = torch.zeros(N, device="cuda")
    k(A, B)
    torch.testing.assert_close(B.double(), sp.expected_line(A, bn, reverse), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("reverse", [False, True])
def test_band_scan_against_torch(reverse):
    M, N, bm, bn, lo, hi = 300, 200, 32, 64, 16, 48
    k = tegula.compile(sp.band_scan(M, N, bm, bn, lo, hi, reverse))
    A = torch.randn(M, N, device="cuda")
    B = torch.zeros(M, N, device="cuda")
    k(A, B)
    torch.testing.assert_close(B.double(), sp.expected_band(A, bm, bn, lo, hi, reverse), rtol=1e-5, atol=1e-4)


def test_int_scan_is_exact():
    k = tegula.compile(sp.tile_scan(333, 100, 16, 32, 1, True, "fragment", None, dtype="int32"))
    A = torch.randint(-1000, 1000, (333, 100), dtype=torch.int32, device="cuda")
    B = torch.zeros(333, 100, dtype=torch.int32, device="cuda")
    k(A, B)
    assert torch.equal(B.cpu(), sp.expected_tile(A.cpu(), 16, 32, 1, True).to(torch.int32))


@pytest.mark.parametrize("threads", [32, 128])
def test_scan_under_a_guard(threads):
    M, n, sentinel = 64, 37, -7
    k = tegula.compile(sp.guarded_scan(M, threads))
    B = torch.full((M,), sentinel, dtype=torch.int32, device="cuda")
    k(B, n)
    assert torch.equal(B.cpu(), sp.expected_guarded(M, n, threads, sentinel))
