"""MLA decode and the language features it rests on, without a GPU: the kernel compiles for
sm_90a with wgmma in both warpgroups and no local-memory spill; a prim_func of several
`with T.Kernel` blocks sharing a `T.alloc_global` workspace computes in order; the score
exchange between warpgroups that layout inference derives from two FullCol gemms is
right (simulated thread by thread) and races nowhere. (The errors of those features'
misuse are in test_porting.py.)"""
import os
import shutil
import subprocess

import pytest
import torch

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402
from tegula.testing import reference, simulate  # noqa: E402

from tegula.kernels import mla_decode as mla  # noqa: E402

import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lang_kernels as lk  # noqa: E402


def _tool():
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(tool):
        try:
            import triton

            tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        except ImportError:
            pass
    if not os.path.exists(tool):
        pytest.skip("no cuobjdump (CUDA toolkit or triton) to disassemble with")
    return tool


def _dump(cubin: bytes, flag: str, tmp_path) -> str:
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    return subprocess.run([_tool(), flag, str(path)], capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mla_compiles_to_wgmma_without_spills(paged, dtype, tmp_path):
    k = tegula.compile(mla.mla_decode_program(4, 128, 64 if paged else 1024, 4, paged=paged,
                                              table_width=16 if paged else 0, dtype=dtype),
                       out_idx=[4, 5], target="sm_90a", pass_configs=mla.FAST_MATH)
    assert k.num_kernels == 2
    src = k.get_kernel_source()
    # Both gemms of the scores split their columns over the two warpgroups (WGN = 2), and
    # the value gemm reads P from registers that the exchange filled.
    assert src.count("wgmma_ss<64, 64, 512, 1, 2") == 1 and src.count("wgmma_rs<64, 512, 64, 1, 2") == 1
    assert "acc_s_cast_exchange" in src
    sass = _dump(k.cubin(0), "-sass", tmp_path)
    assert sass.count("HGMMA") >= 4
    usage = _dump(k.cubin(0), "-res-usage", tmp_path)
    assert "STACK:0" in usage and "LOCAL:0" in usage, usage


@pytest.mark.parametrize("heads", [16, 32])
def test_mla_for_a_tensor_parallel_shard_runs_on_mma_over_four_warps(heads, tmp_path):
    k = tegula.compile(mla.mla_decode_program(1, heads, 4096, 8), out_idx=[4, 5], target="sm_90a",
                       pass_configs=mla.FAST_MATH)
    src = k.get_kernel_source()
    assert f"gemm_rs<{heads}, 512, 64, 1, 4" in src and "acc_s_cast_exchange" in src
    assert "wgmma" not in src.split("kernel 1 of 2")[0].split("__global__")[1]
    usage = _dump(k.cubin(0), "-res-usage", tmp_path)
    assert "STACK:0" in usage and "LOCAL:0" in usage, usage
    assert "HMMA" in _dump(k.cubin(0), "-sass", tmp_path)


def _exchange_program(dtype="float16"):
    @T.prim_func
    def exchange(Q: T.Tensor((64, 32), dtype), K: T.Tensor((64, 32), dtype), V: T.Tensor((64, 128), dtype),
                 O: T.Tensor((64, 128), "float32")):
        with T.Kernel(1, threads=256) as bx:
            q = T.alloc_shared((64, 32), dtype)
            kk = T.alloc_shared((64, 32), dtype)
            v = T.alloc_shared((64, 128), dtype)
            s = T.alloc_fragment((64, 64), "float32")
            p = T.alloc_fragment((64, 64), dtype)
            o = T.alloc_fragment((64, 128), "float32")
            T.copy(Q, q)
            T.copy(K, kk)
            T.copy(V, v)
            T.gemm(q, kk, s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                s[i, j] = s[i, j] * 0.25
            T.copy(s, p)
            T.gemm(p, v, o, policy=T.GemmWarpPolicy.FullCol, clear_accum=True)
            T.copy(o, O)

    return exchange


def test_fullcol_score_exchange_is_derived_and_simulates_right():
    k = tegula.compile(_exchange_program(), out_idx=[-1], target="sm_90a")
    src = k.get_kernel_source()
    assert "p_exchange" in src and "wgmma_rs<64, 128, 64, 1, 2" in src
    gen = torch.Generator().manual_seed(3)
    q, kk, v = (torch.randn(shape, generator=gen).half() for shape in ((64, 32), (64, 32), (64, 128)))
    expect = ((q.double() @ kk.double().T * 0.25).half().double() @ v.double())
    out = simulate(k, q, kk, v)  # raises on a race, an unwritten read or a misused barrier
    torch.testing.assert_close(out.double(), expect, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(reference(k, q, kk, v).double(), expect, rtol=2e-3, atol=2e-3)


def test_kernels_of_one_prim_func_run_in_order_over_a_workspace():
    k = tegula.compile(lk.two_kernels_program(5, 100), out_idx=[-1], target="sm_90a")
    assert k.num_kernels == 2 and [p.name for p in k.params] == ["A", "C"]
    src = k.get_kernel_source()
    assert src.index("two_kernel0") < src.index("two_kernel1")
    a = torch.randn(5, 100)
    expect = (a * 2).flip(1) + 1
    torch.testing.assert_close(simulate(k, a), expect)
    torch.testing.assert_close(reference(k, a), expect)
    assert k.cubin(1)[:4] == b"\x7fELF"


@pytest.mark.parametrize("heads, paged", [(16, False), (32, True)])
def test_mla_for_a_shard_simulates_right(heads, paged):
    """The whole program (split kernel, exchange, combine over the workspaces) run thread
    by thread: ragged lengths (0, mid-page, past the cache), NaN in the unused tail."""
    import math

    B, S = 3, 150
    k = tegula.compile(mla.mla_decode_program(B, heads, 3 if paged else S, 2, paged=paged,
                                              table_width=1 if paged else 0),
                       out_idx=[4, 5], target="sm_90a", pass_configs=mla.FAST_MATH)
    gen = torch.Generator().manual_seed(heads)
    q = torch.randn(B, heads, 576, generator=gen).half()
    rows = 64 if paged else S
    kv = torch.randn(B, rows, 576, generator=gen).half()
    lens = torch.tensor([0, 37, 999], dtype=torch.int32)
    for b in range(B):
        kv[b, min(int(lens[b]), rows):] = float("nan")
    if paged:  # page b of sequence b is stored at page 2 - b
        cache, table = kv.flip(0).contiguous(), torch.tensor([[2], [1], [0]], dtype=torch.int32)
    else:
        cache, table = kv, torch.zeros(B, 1, dtype=torch.int32)
    out, lse = simulate(k, q, cache, table, lens)
    assert torch.equal(out[0].float(), torch.zeros(heads, 512)) and torch.isinf(lse[0]).all()
    for b in (1, 2):
        n = min(int(lens[b]), rows)
        s = q[b].double() @ kv[b, :n].double().T / math.sqrt(576)
        ref = torch.softmax(s, -1) @ kv[b, :n, :512].double()
        torch.testing.assert_close(out[b].double(), ref, rtol=2e-3, atol=2e-3)
        torch.testing.assert_close(lse[b].double(), torch.logsumexp(s, -1), rtol=1e-4, atol=1e-4)
