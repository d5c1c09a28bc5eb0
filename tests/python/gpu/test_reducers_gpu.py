"""T.alloc_reducer programs on the GPU (tests/python/reducer_programs.py; the CPU side in
cpu/test_reducers.py), against torch with fresh inputs, ragged extents."""
import functools

import pytest
import torch

import tegula
import reducer_programs as rp

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("extent,threads", [(8, 128), (100, 64), (256, 256), (3, 32)])
def test_each_iteration_counts_once(extent, threads):
    a = torch.arange(1, extent + 1, dtype=torch.float32, device="cuda")
    assert tegula.compile(rp.scalar_program(extent, threads), out_idx=-1)(a).item() == a.sum().item()


def test_a_loop_over_replicated_values_counts_each_row_once():
    a = torch.randn(8, 16, device="cuda")
    out = tegula.compile(rp.replicated_program(), out_idx=-1)(a)
    torch.testing.assert_close(out.double(), a.double().sum().reshape(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_and_nan(op):
    k = tegula.compile(rp.scalar_program(40, op=op), out_idx=-1)
    a = torch.randn(40, device="cuda")
    assert k(a).item() == (a.max() if op == "max" else a.min()).item()
    a[17] = float("nan")
    assert torch.isnan(k(a)).all()


def test_the_seed_is_combined_once():
    a = torch.arange(1, 9, dtype=torch.float32, device="cuda")
    assert tegula.compile(rp.scalar_program(seed=100.0), out_idx=-1)(a).item() == 136.0


@pytest.mark.parametrize("op", ["sum", "bitand", "bitor", "bitxor", "max"])
def test_integer_reducers(op):
    a = torch.randint(-1000, 1000, (24,), dtype=torch.int32, device="cuda")
    fold = {"sum": lambda x, y: x + y, "bitand": lambda x, y: x & y, "bitor": lambda x, y: x | y,
            "bitxor": lambda x, y: x ^ y, "max": max}[op]
    out = tegula.compile(rp.scalar_program(24, op=op, dtype="int32"), out_idx=-1)(a)
    assert out.item() == functools.reduce(fold, a.tolist())


@pytest.mark.parametrize("M,K,block_K,op,pipelined", [(32, 512, 128, "sum", False), (16, 200, 64, "max", False),
                                                      (32, 300, 128, "sum", True)])
def test_accumulation_across_tiles(M, K, block_K, op, pipelined):
    a = torch.randn(M, K, device="cuda")
    k = tegula.compile(rp.rows_program(M, K, block_K, op=op, pipelined=pipelined), out_idx=-1,
                       pass_configs={"tl.disable_warp_specialized": True})
    want = a.double().sum(1) if op == "sum" else a.double().max(1).values
    torch.testing.assert_close(k(a).double(), want, rtol=1e-5, atol=1e-4)


def test_an_epoch_per_iteration_of_a_serial_loop():
    a = torch.randn(256, device="cuda") * 3
    out = tegula.compile(rp.online_softmax_program(256, 64), out_idx=-1)(a).double().cpu()
    m = a.double().max().cpu()
    torch.testing.assert_close(out, torch.stack([m, torch.exp(a.double().cpu() - m).sum()]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("K,threads,fill", [(256, 128, None), (100, 64, None), (37, 32, 0.5)])
def test_the_first_form_finalizes_in_place(K, threads, fill):
    """TileLang's first form: T.clear / T.fill, acc[i, j] += v, T.finalize_reducer(acc)."""
    a, a2 = torch.randn(4, K, device="cuda"), torch.randn(4, K, device="cuda")
    out = tegula.compile(rp.first_form_program(4, K, threads, fill), out_idx=-1)(a, a2).double()
    want = a.double() @ a2.double().T + (0 if fill is None else fill)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


def test_the_first_form_of_a_bitwise_reducer():
    a, a2 = (torch.randint(-50, 50, (4, 40), dtype=torch.int32, device="cuda") for _ in range(2))
    out = tegula.compile(rp.first_form_program(4, 40, 32, op="bitxor", dtype="int32"), out_idx=-1)(a, a2)
    want = functools.reduce(lambda x, y: x ^ y, (a[:, None, :] * a2[None, :, :]).unbind(-1))
    assert torch.equal(out, want)
