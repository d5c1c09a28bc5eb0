"""Global loads nested in another access's index, on the GPU: gathers, scatters and
atomics through an index tensor whose last block runs past its end, against torch; and the
same calls under compute-sanitizer's memcheck (where it is installed), which fails on any
read past an allocation: before the masks covered nested loads, the gather read past the
index tensor.

Run as a script, this file makes the calls the sanitizer watches (every tensor its own
allocation of a multiple of 512 bytes, so that a read past one is past the allocation)."""
import os
import shutil
import subprocess
import sys

import pytest
import torch

import tegula
import tegula.language as T

pytestmark = pytest.mark.gpu

NO_VECTORIZE = {"tir.disable_vectorize": True}


def gather_rows(S, N, D, blk):
    @T.prim_func
    def gather(Pos: T.Tensor((S,), "int32"), C: T.Tensor((N, D), "float16"), Out: T.Tensor((S, D), "float16")):
        with T.Kernel(T.ceildiv(S, blk), threads=64) as bx:
            for t, i in T.Parallel(blk, D):
                Out[bx * blk + t, i] = C[Pos[bx * blk + t], i]

    return gather


def scatter_rows(S, D, blk):
    @T.prim_func
    def scatter(Pos: T.Tensor((S,), "int32"), X: T.Tensor((S, D), "float32"), Out: T.Tensor((S + 1, D), "float32")):
        with T.Kernel(T.ceildiv(S, blk), threads=64) as bx:
            for t, i in T.Parallel(blk, D):
                Out[Pos[bx * blk + t], i] = X[bx * blk + t, i]

    return scatter


def scatter_add_rows(S, R, D, blk):
    @T.prim_func
    def scatter_add(Idx: T.Tensor((S,), "int32"), X: T.Tensor((S, D), "float32"), Out: T.Tensor((R, D), "float32")):
        with T.Kernel(T.ceildiv(S, blk), threads=64) as bx:
            for t, i in T.Parallel(blk, D):
                T.atomic_add(Out[Idx[bx * blk + t], i], X[bx * blk + t, i])

    return scatter_add


# S = 128 int32 is 512 bytes; blocks of 48 rows read Pos[128..143] in the last block.
S, N, D, BLK = 128, 50, 64, 48


def run_gather(configs=None):
    kernel = tegula.compile(gather_rows(S, N, D, BLK), out_idx=[-1], target="auto", pass_configs=configs or {})
    pos = torch.randint(0, N, (S,), dtype=torch.int32, device="cuda")
    c = torch.randn(N, D, device="cuda").half()
    out = kernel(pos, c)
    torch.cuda.synchronize()
    return out, c[pos.long()]


def run_scatter():
    # Pos names rows 1..S of Out; the last block's rows past Pos's end read index 0 and
    # value 0 (loads past an edge give 0): they write 0 into row 0.
    kernel = tegula.compile(scatter_rows(S, D, BLK), target="auto")
    pos = torch.randperm(S, device="cuda").int() + 1
    x = torch.randn(S, D, device="cuda")
    out = torch.full((S + 1, D), float("nan"), device="cuda")
    kernel(pos, x, out)
    torch.cuda.synchronize()
    expected = torch.zeros_like(out)
    expected[pos.long()] = x
    return out, expected


def run_scatter_add():
    kernel = tegula.compile(scatter_add_rows(S, 8, D, BLK), target="auto")
    idx = torch.randint(0, 8, (S,), dtype=torch.int32, device="cuda")
    idx[3], idx[20] = -1, 8  # outside Out: skipped
    x = torch.randn(S, D, device="cuda")
    out = torch.zeros(8, D, device="cuda")
    kernel(idx, x, out)
    torch.cuda.synchronize()
    keep = (idx >= 0) & (idx < 8)
    expected = torch.zeros(8, D, dtype=torch.float64, device="cuda").index_add_(0, idx[keep].long(), x[keep].double())
    return out, expected


@pytest.mark.parametrize("configs", [None, NO_VECTORIZE], ids=["vector", "scalar"])
def test_gather_with_ragged_tail_matches_torch(configs):
    out, expected = run_gather(configs)
    assert torch.equal(out, expected)


def test_scatter_with_ragged_tail_matches_torch():
    out, expected = run_scatter()
    assert torch.equal(out, expected)


def test_atomic_scatter_add_with_ragged_tail_matches_torch():
    out, expected = run_scatter_add()
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_no_read_past_the_index_tensor_under_memcheck():
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not installed")
    env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1")
    run = subprocess.run([sanitizer, "--tool", "memcheck", "--error-exitcode", "1", sys.executable, __file__],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "ok: gather vector, gather scalar, scatter, scatter_add" in run.stdout


if __name__ == "__main__":
    for name, call in [("gather vector", run_gather), ("gather scalar", lambda: run_gather(NO_VECTORIZE)),
                       ("scatter", run_scatter), ("scatter_add", run_scatter_add)]:
        got, want = call()
        assert torch.allclose(got.double(), want.double(), atol=1e-5), name
    print("ok: gather vector, gather scalar, scatter, scatter_add")
