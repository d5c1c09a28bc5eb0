"""A one-warpgroup kernel whose fragments do not fit its registers (FlashAttention's 128 x 128
tiles on 128 threads) is lowered on two warpgroups when nothing it computes depends on its
thread count: no RegisterPressureWarning, no spill in ptxas' report, and the same numbers
as the program as written (the reference interpreter runs the program, the simulator the
wider lowered kernel). A program that reads its thread index, or that asks to keep its
threads, is lowered as declared. Compile-only (sm_90a)."""
import warnings

import torch
import pytest

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402
from tegula import registers  # noqa: E402
from tegula.testing import reference, simulate  # noqa: E402

from test_register_pressure import KEEP, TARGET, attention_like  # noqa: E402


def compile_quiet(func, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tegula.compile(func, target=TARGET, out_idx=[-1], **kwargs)
    return kernel, [w for w in caught if issubclass(w.category, tegula.RegisterPressureWarning)]


def test_attention_on_one_warpgroup_runs_on_two_without_spilling():
    wide, caught = compile_quiet(attention_like(128, 128, threads=128))
    assert caught == []
    lowered = wide._lowered_all[0]
    assert lowered.tile_threads == 256
    assert wide.register_usage().threads == 256 and not wide.register_usage().over_budget
    regs, stack = registers.compiled_resources(wide.cubin())["attention_kernel"]
    assert stack == 0 and regs <= 240
    kept, caught = compile_quiet(attention_like(128, 128, threads=128), pass_configs=KEEP)
    assert kept._lowered_all[0].tile_threads == 128 and len(caught) == 1


def test_a_program_that_fits_keeps_its_threads():
    kernel, _ = compile_quiet(attention_like(64, 64, threads=128))
    assert kernel._lowered_all[0].tile_threads == 128


def attention_reading_tx(seq=256, dim=128):
    """attention_like's first half, and each thread's index stored: its result depends on
    how many threads run it, so it must not be widened."""

    @T.prim_func
    def f(Q: T.Tensor((seq, dim), "float16"), K: T.Tensor((seq, dim), "float16"),
          V: T.Tensor((seq, dim), "float16"), Tid: T.Tensor((seq,), "int32"), O: T.Tensor((seq, dim), "float16")):
        with T.Kernel(T.ceildiv(seq, 128), threads=128) as bx:
            Q_shared = T.alloc_shared((128, dim), "float16")
            K_shared = T.alloc_shared((128, dim), "float16")
            V_shared = T.alloc_shared((128, dim), "float16")
            acc_s = T.alloc_fragment((128, 128), "float32")
            acc_s_cast = T.alloc_fragment((128, 128), "float16")
            acc_o = T.alloc_fragment((128, dim), "float32")
            tx = T.get_thread_binding()
            Tid[bx * 128 + tx] = tx
            T.copy(Q[bx * 128, 0], Q_shared)
            T.clear(acc_o)
            for kb in T.serial(T.ceildiv(seq, 128)):
                T.copy(K[kb * 128, 0], K_shared)
                T.copy(V[kb * 128, 0], V_shared)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o)
            T.copy(acc_o, O[bx * 128, 0])

    return f


def test_a_program_reading_its_thread_index_keeps_its_threads():
    kernel, caught = compile_quiet(attention_reading_tx())
    assert kernel._lowered_all[0].tile_threads == 128 and len(caught) == 1


def test_the_wider_kernel_computes_what_the_program_does():
    """The reference runs the program as written, the simulator the kernel on 256 threads;
    both against torch in float64, on a ragged sequence."""
    import widen_programs as wp

    seq = 200
    kernel = wp.attention(seq)
    assert kernel._lowered_all[0].tile_threads == 256
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(seq, 128, generator=gen).half() for _ in range(3))
    want = wp.expected(q, k, v)
    torch.testing.assert_close(reference(kernel, q, k, v).double(), want, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(simulate(kernel, q, k, v).double(), want, rtol=2e-2, atol=2e-2)
