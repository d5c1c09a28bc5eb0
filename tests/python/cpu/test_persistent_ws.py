"""A T.Pipelined loop inside a persistent kernel's loop over tiles is warp specialised on
sm_90a across the tiles: the producer walks the tiles' copies on its own, its stages and
phases counting on from tile to tile, while the consumers compute and store. Checked here
on the lowered code (the simulator runs the warpgroups, bulk copies and mbarriers as the
GPU would, and reports a wait that never ends) and with the reference interpreter, both
against torch; the loops it must not run ahead in keep the cp.async form; the shipped
GEMM's persistent schedule (gpu/test_persistent_ws_gpu.py runs all of it on the GPU)."""
import os
import sys

import pytest
import torch

import tegula
import tegula.testing as tt
from tegula.kernels import gemm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import persistent_ws_programs as pw  # noqa: E402

CASES = {
    # name: (M, N, K, blocks, program options)
    "one_block_walks_all": (192, 128, 96, 1, {}),              # 6 tiles, 18 loads: phases wrap
    "fewer_blocks_ragged": (200, 136, 72, 4, {"stages": 3}),   # 12 tiles, 3 waves, the last short
    "blocks_without_tiles": (128, 64, 64, 5, {}),              # 2 tiles, 3 blocks idle
    "one_stage": (128, 128, 64, 3, {"stages": 1}),
    "four_stages_two_groups": (256, 128, 160, 3, {"stages": 4, "threads": 256, "block_M": 128}),
    "staged_epilogue": (200, 128, 96, 3, {"staged": True}),
    "staged_epilogue_padded": (200, 128, 96, 3, {"staged": True, "pad": 4}),
    "second_computation": (130, 128, 96, 2, {"second": True, "stages": 3}),
}


def _run(case, run):
    M, N, K, blocks, opts = CASES[case]
    prog, ref = pw.persistent_gemm(M, N, K, blocks, **opts)
    kernel = tegula.compile(prog, target="sm_90a")
    a, b = pw.inputs(M, N, K, seed=M + N + K)
    c = torch.full((M, N), float("nan"))
    run(kernel, a, b, c)
    return kernel, c, ref(a, b)


@pytest.mark.parametrize("run", [tt.simulate, tt.reference], ids=["simulate", "reference"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_persistent_gemm_agrees_with_torch(case, run):
    kernel, c, expected = _run(case, run)
    assert "setmaxnreg_inc" in kernel.get_kernel_source()  # warp specialised
    torch.testing.assert_close(c, expected, rtol=1e-3, atol=1e-3)


def test_a_staged_epilogue_tile_is_stored_swizzled_unless_its_rows_are_padded():
    """Copied from the accumulator, 8 rows a warp store at one column: swizzled chunks put
    them in 8 banks. A padded row (68 floats) already does, and is no swizzle's shape."""
    for case, swizzled in (("staged_epilogue", True), ("staged_epilogue_padded", False)):
        M, N, K, blocks, opts = CASES[case]
        src = tegula.compile(pw.persistent_gemm(M, N, K, blocks, **opts)[0], target="sm_90a").get_kernel_source()
        assert ("C_s[swizzle_offset<64, 4>(" in src) == swizzled, case


def _staged_tile_program(other):
    """A (64, 64) -> C = A @ A through a shared tile C_s, plus `other` touching C_s:
    "store" writes one element, "view" copies C_s through a T.reshape view to Flat."""
    import tegula.language as T

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16"), Flat: T.Tensor((4096,), "float16")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), "float16")
            C_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.clear(acc)
            T.gemm(A_s, A_s, acc)
            T.copy(acc, C_s)
            if other == "store":
                C_s[0, 0] = T.float16(1)  # an element store: not only whole-tile copies
            T.copy(C_s, C)
            if other == "view":
                T.copy(T.reshape(C_s, (4096,)), Flat)

    return main


def test_a_shared_tile_with_other_accesses_keeps_plain_rows():
    src = tegula.compile(_staged_tile_program("store"), target="sm_90a").get_kernel_source()
    assert "C_s[swizzle_offset" not in src


def test_a_shared_tile_read_through_a_view_keeps_plain_rows():
    kernel = tegula.compile(_staged_tile_program("view"), target="sm_90a")
    assert "C_s[swizzle_offset" not in kernel.get_kernel_source()
    a = torch.randn(64, 64).half()
    c, flat = torch.full((64, 64), float("nan")).half(), torch.full((4096,), float("nan")).half()
    tt.simulate(kernel, a, c, flat)
    torch.testing.assert_close(c.float(), a.float() @ a.float(), rtol=2e-3, atol=2e-2)
    assert torch.equal(flat, c.flatten())


def test_the_producer_walks_the_tiles_with_its_own_counter():
    M, N, K, blocks, opts = CASES["fewer_blocks_ragged"]
    src = tegula.compile(pw.persistent_gemm(M, N, K, blocks, **opts)[0], target="sm_90a").get_kernel_source()
    producer, consumer = src.split("setmaxnreg_inc")
    producer = producer.split("setmaxnreg_dec")[1]
    # Both sides walk the waves; only the consumer clears, computes and stores.
    for side in (producer, consumer):
        assert "for (int w = 0;" in side
        assert side.count("ws_iters_") >= 3  # starts at 0, read for the stage, moved past the tile
    assert "tma_load_2d" in producer and "tma_load_2d" not in consumer
    assert "wgmma" not in producer and "C[" not in producer
    # The consumer releases the last stage of each tile after its final wait, for the
    # producer to refill for the next tile.
    tail = consumer.split("wgmma_wait_regs<0")[1]
    assert tail.index("mbar_arrive") < tail.index("C[")


@pytest.mark.parametrize("opts", [{"touch_a": True}], ids=["epilogue_writes_a_staged_tile"])
def test_a_loop_the_producer_may_not_run_ahead_of_keeps_the_cp_async_form(opts):
    """The epilogue writes A_s, which the producer would be refilling for the next tile."""
    M, N, K, blocks = 128, 128, 64, 2
    prog, ref = pw.persistent_gemm(M, N, K, blocks, **opts)
    kernel = tegula.compile(prog, target="sm_90a")
    src = kernel.get_kernel_source()
    assert "setmaxnreg_inc" not in src and "cp_async" in src
    a, b = pw.inputs(M, N, K, seed=3)
    c = torch.full((M, N), float("nan"))
    tt.simulate(kernel, a, b, c)
    torch.testing.assert_close(c, ref(a, b), rtol=1e-3, atol=1e-3)


def test_a_shifted_schedule_nested_in_a_tile_loop_keeps_the_cp_async_form():
    """Computations in two stages drain at each tile's end; the nested form runs every
    iteration on one stage, so such a loop is not specialised (and still computes C)."""
    import tegula.language as T

    M = N = 128
    K = 96

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(2, threads=128) as bid:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            part = T.alloc_fragment((64, 64), "float32")
            acc = T.alloc_fragment((64, 64), "float32")
            for ty, tx in T.Persistent([2, 2], 2, bid):
                T.clear(acc)
                for kb in T.Pipelined(3, num_stages=2, order=[-1, -1, 1, 0], stage=[-1, -1, 0, 1]):
                    T.copy(A[ty * 64, kb * 32], A_s)
                    T.copy(B[kb * 32, tx * 64], B_s)
                    T.gemm(A_s, B_s, part, clear_accum=True)
                    for i, j in T.Parallel(64, 64):
                        acc[i, j] += part[i, j]
                T.copy(acc, C[ty * 64, tx * 64])

    kernel = tegula.compile(main, target="sm_90a")
    assert "setmaxnreg_inc" not in kernel.get_kernel_source()
    a, b = pw.inputs(M, N, K, seed=5)
    for run in (tt.simulate, tt.reference):
        c = torch.full((M, N), float("nan"))
        run(kernel, a, b, c)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def test_the_shipped_gemm_runs_persistent_with_a_staged_epilogue_on_large_outputs():
    cfg = gemm.default_config(4096, 4096, 4096, wgmma=True, sms=132)
    assert cfg["blocks"] == 132 and cfg["stage_c"] and cfg["num_stages"] == 3
    assert gemm.default_config(2048, 2048, 2048, wgmma=True, sms=132)["blocks"] == 128  # one tile a block
    assert "blocks" not in gemm.default_config(1024, 1024, 1024, wgmma=True)
    assert "blocks" not in gemm.default_config(4096, 4096, 4096, wgmma=False)
    # The grouped GEMM takes the tile and the staged epilogue, one block a tile.
    from tegula.kernels import expert_gemm
    grouped = expert_gemm.grouped_config(8192, 14336, 4096, 8, wgmma=True)
    assert "blocks" not in grouped and grouped["stage_c"] and grouped["num_stages"] == 3


@pytest.mark.parametrize("epilogue", ["none", "bias_gelu"])
def test_the_shipped_persistent_program_simulates(epilogue):
    """Three blocks over 2 x 2 wide tiles (the last ragged in both extents, B's rows padded
    to 16 bytes as matmul() pads them), its epilogue through the padded shared tile."""
    M, N, K = 200, 300, 136
    ldb = (N + 7) // 8 * 8
    cfg = dict(gemm.default_config(4096, 4096, 4096, wgmma=True, sms=3))
    prog = gemm.matmul_program(M, N, K, epilogue=epilogue, ldb=ldb, **cfg)
    kernel = tegula.compile(prog, target="sm_90a")
    assert "setmaxnreg_inc" in kernel.get_kernel_source()
    g = torch.Generator().manual_seed(7)
    a, b, bias = torch.randn(M, K, generator=g).half(), torch.randn(K, ldb, generator=g).half(), \
        torch.randn(N, generator=g).half()
    c = torch.full((M, N), float("nan")).half()
    tt.simulate(kernel, a, b, bias, c)
    expected = a.float() @ b[:, :N].float()
    if epilogue == "bias_gelu":
        expected = torch.nn.functional.gelu(expected + bias.float(), approximate="tanh")
    torch.testing.assert_close(c.float(), expected, rtol=2e-3, atol=2e-2)
