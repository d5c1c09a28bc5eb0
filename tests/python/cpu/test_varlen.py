"""Varlen and paged kernels (offsets from cu_seqlens in lets, a let for the tile index, a
block table read in the pipelined loop's body) on the CPU:
on sm_90a their T.Pipelined loop is warp specialised through the lets (the lets are lifted
to the top of the block, the tile index substituted), and the reference and the simulator
agree with torch, ragged and aligned."""
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import varlen_programs as vp  # noqa: E402

CASES = [((100, 37, 64), 128, 0), ((64, 128), 64, 0), ((130, 70), 64, 1)]


@pytest.mark.parametrize("lens,D,first", CASES)
def test_the_loop_is_warp_specialised_through_the_lets(lens, D, first):
    k = tegula.compile(vp.varlen_tile_scores(lens, D, first=first)[0], target="sm_90a")
    assert k._lowered.warp_specialized
    src = k.get_kernel_source()
    assert "tma_load" in src and "cp_async" not in src


def test_a_let_reading_a_written_buffer_is_not_lifted():
    # cu is written in the kernel: its value depends on where it is read, so the lets stay
    # where they are and the loop keeps the cp.async pipeline.
    import tegula.language as T

    @T.prim_func
    def main(Q: T.Tensor((256, 64), "float16"), cu: T.Tensor((3,), "int32"), S: T.Tensor((2, 64, 64), "float32")):
        with T.Kernel(1, 2, threads=128) as (bx, b):
            Q_s = T.alloc_shared((64, 64), "float16")
            K_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            cu[2] = 256
            start = cu[b]
            T.copy(Q[start: start + 64, :], Q_s)
            T.clear(acc)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(Q[start + k * 64: start + k * 64 + 64, :], K_s)
                T.gemm(Q_s, K_s, acc, transpose_B=True)
            T.copy(acc, S[b, :, :])

    k = tegula.compile(main, target="sm_90a")
    assert not k._lowered.warp_specialized


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("lens,D,first", CASES)
def test_varlen_agrees_with_torch(run, lens, D, first):
    prog, ref = vp.varlen_tile_scores(lens, D, first=first)
    k = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(sum(lens) + D)
    Q = torch.randn(sum(lens), D, generator=g).half()
    K = torch.randn(sum(lens), D, generator=g).half()
    cu = vp.cu_seqlens(lens)
    S = torch.full([int(d) for d in k.params[-1].shape], float("nan"))
    run(k, Q, K, cu, S)
    torch.testing.assert_close(S.double(), ref(Q, K, cu), rtol=1e-3, atol=1e-2)


PAGED = [(3, 4, 64, 64, 16, False), (2, 5, 64, 128, 12, True)]


def _table(B, pages, total_pages, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(total_pages, generator=g)[:pages] for _ in range(B)]).int()


def test_a_block_table_let_stays_a_let():
    # A let that reads memory (the page's start from a block table) is kept: substituting it
    # repeats the load in every copy's address, which measured slower.
    k = tegula.compile(vp.paged_scores(2, 4, 64, 128, 12)[0], target="sm_80")
    assert "const int start = " in k.get_kernel_source()


def test_a_block_table_let_is_read_by_the_producer_on_sm90():
    # Warp specialised, one producer thread computes the page's start for each bulk copy.
    k = tegula.compile(vp.paged_scores(2, 4, 64, 128, 12, reverse=True)[0], target="sm_90a")
    assert k._lowered.warp_specialized
    src = k.get_kernel_source()
    assert "tma_load" in src and "cp_async" not in src


def test_the_output_tile_shares_the_stages_bytes_when_warp_specialised():
    prog, _ = vp.paged_values(1, 2, 384, 4)
    k = tegula.compile(prog, target="sm_90a")
    assert k._lowered.warp_specialized
    src = k.get_kernel_source()
    offset = {name: int(at) for name, at in re.findall(r"(\w+_s) = reinterpret_cast<half_t\*>\(tegula_smem \+ (\d+)\)", src)}
    assert offset["O_s"] == offset["K_s"], offset
    assert len(set(offset.values())) == 3, offset  # Q_s and S_s each in bytes of their own


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_paged_values_agree_with_torch(run):
    B, pages, D, total = 1, 2, 384, 4
    prog, ref = vp.paged_values(B, pages, D, total)
    k = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(7)
    Q = (torch.randn(B, 64, D, generator=g) / 8).half()
    KV = (torch.randn(total * 64, D, generator=g) / 8).half()
    table = _table(B, pages, total, 7)
    O = torch.full((B, 64, D), float("nan")).half()
    run(k, Q, KV, table, O)
    torch.testing.assert_close(O.double(), ref(Q, KV, table), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("B,pages,page,D,total,reverse", PAGED)
def test_paged_agrees_with_torch(run, B, pages, page, D, total, reverse):
    prog, ref = vp.paged_scores(B, pages, page, D, total, reverse=reverse)
    k = tegula.compile(prog, target="sm_90a")
    g = torch.Generator().manual_seed(B * pages + D)
    Q = torch.randn(B, 64, D, generator=g).half()
    KV = torch.randn(total * page, D, generator=g).half()
    table = _table(B, pages, total, D)
    S = torch.full((B, 64, page), float("nan"))
    run(k, Q, KV, table, S)
    torch.testing.assert_close(S.double(), ref(Q, KV, table), rtol=1e-3, atol=1e-2)
