"""Programs that use T.cumsum, shared by cpu/test_scan.py and gpu/test_scan_gpu.py, with
the torch computation each must match (`expected`, in float64 from the same inputs).

Every program scans tile by tile: block (by, bx) copies its (bm, bn) tile of A (zeros past
A's edge, which leave the sums as they are), scans it, and copies it to B."""
import torch

import tegula.language as T


def tile_scan(M, N, bm, bn, dim, reverse=False, src="shared", dst=None, dtype="float32", threads=128):
    """T.cumsum(a, dst=b) of a (bm, bn) tile along dim; dst=None scans in place."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            a = T.alloc_shared((bm, bn), dtype) if src == "shared" else T.alloc_fragment((bm, bn), dtype)
            T.copy(A[by * bm, bx * bn], a)
            if dst is None:
                T.cumsum(a, dim=dim, reverse=reverse)
                T.copy(a, B[by * bm, bx * bn])
            else:
                b = T.alloc_shared((bm, bn), dtype) if dst == "shared" else T.alloc_fragment((bm, bn), dtype)
                T.cumsum(a, b, dim, reverse)
                T.copy(b, B[by * bm, bx * bn])

    return main


def line_scan(N, bn, reverse=False, scope="shared", threads=128, dtype="float32"):
    """A 1-D tile scanned whole: the TileLang form T.cumsum(src=x, dim=0)."""

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, bn), threads=threads) as bx:
            x = T.alloc_shared((bn,), dtype) if scope == "shared" else T.alloc_fragment((bn,), dtype)
            T.copy(A[bx * bn], x)
            T.cumsum(src=x, dim=0, reverse=reverse)
            T.copy(x, B[bx * bn])

    return main


def band_scan(M, N, bm, bn, lo, hi, reverse=False, threads=128):
    """Columns lo:hi of a shared tile scanned along its rows in place; the rest copied as is."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            a = T.alloc_shared((bm, bn), "float32")
            T.copy(A[by * bm, bx * bn], a)
            T.cumsum(a[:, lo:hi], dim=1, reverse=reverse)
            T.copy(a, B[by * bm, bx * bn])

    return main


def guarded_scan(M, threads=32):
    """The scan under a run-time guard, other threads' stores before it (TileLang's
    rand test): block bx < n writes B[bx] = sum of 1..threads, the others leave B alone."""

    @T.prim_func
    def main(B: T.Tensor((M,), "int32"), n: T.int32):
        with T.Kernel(M, threads=threads) as bx:
            tx = T.get_thread_binding()
            s = T.alloc_shared((threads,), "int32")
            if bx < n:
                s[tx] = tx + 1
                T.cumsum(s, dim=0)
                if tx == 0:
                    B[bx] = s[threads - 1] + s[threads // 2]

    return main


def _blocks(A, bm, bn, fn):
    """fn applied to every (bm, bn) tile of A, zero-padded at the edges, cut back to A."""
    M, N = A.shape
    out = torch.empty_like(A)
    for r in range(0, M, bm):
        for c in range(0, N, bn):
            tile = torch.zeros(bm, bn, dtype=A.dtype, device=A.device)
            part = A[r:r + bm, c:c + bn]
            tile[:part.shape[0], :part.shape[1]] = part
            out[r:r + bm, c:c + bn] = fn(tile)[:part.shape[0], :part.shape[1]]
    return out


def scan(t, dim, reverse):
    return t.flip(dim).cumsum(dim).flip(dim) if reverse else t.cumsum(dim)


def expected_tile(A, bm, bn, dim, reverse=False):
    return _blocks(A.double(), bm, bn, lambda t: scan(t, dim, reverse))


def expected_line(A, bn, reverse=False):
    return expected_tile(A.double()[None, :], 1, bn, 1, reverse)[0]


def expected_band(A, bm, bn, lo, hi, reverse=False):
    def fn(t):
        t = t.clone()
        t[:, lo:hi] = scan(t[:, lo:hi], 1, reverse)
        return t
    return _blocks(A.double(), bm, bn, fn)


def expected_guarded(M, n, threads, sentinel):
    total = threads * (threads + 1) // 2 + (threads // 2 + 1) * (threads // 2 + 2) // 2
    return torch.tensor([total if b < n else sentinel for b in range(M)], dtype=torch.int32)
