"""Tile code under a branch on the thread index, on the CPU: the reference (the program's
meaning: each side runs once when some thread takes it) and the simulator (the lowered
code, thread by thread: the tile code divided among the guard's threads, barriers among
them alone) agree with torch, exactly for copies; and the guards the engine cannot divide
tile code under are errors at the branch's line. tests/python/gpu/test_thread_guards_gpu.py
runs the same programs on the GPU."""
import re

import pytest
import torch

import guard_programs as gp

import tegula
import tegula.language as T
import tegula.testing as tt

TARGETS = ["sm_90a", "sm_80"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", gp.COPY_GUARDS)
@pytest.mark.parametrize("shape", [(256, 256), (200, 136)], ids=["aligned", "ragged"])
def test_copy_under_guard(target, how, shape):
    kernel = gp.copy_guarded(target, how)(*shape)
    a = torch.randn(*shape).half()
    assert torch.equal(tt.reference(kernel, a), a)
    assert torch.equal(tt.simulate(kernel, a), a)


@pytest.mark.parametrize("target", TARGETS)
def test_guard_divides_the_tile_among_its_threads(target):
    # 128 threads of 256 fill a 128x128 half tile: 16 KiB over 128 threads is 8 vectors of
    # 16 bytes each, indexed by the scope's own thread index (tx - 0 here).
    src = gp.copy_guarded(target, "parallel_high")(256, 256).get_kernel_source()
    assert re.search(r"const int (\w+) = \(tx - 128\);", src)
    kernel = gp.chain_in_scope(target)(128, 64)
    src = kernel.get_kernel_source()
    # the scope's barriers meet its 64 threads alone
    assert "barrier_sync(2, 64);" in src
    assert "__syncthreads" not in src.split("tx - 128")[1]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(128, 64), (100, 72)], ids=["aligned", "ragged"])
def test_dependent_steps_in_one_scope(target, shape):
    kernel = gp.chain_in_scope(target)(*shape)
    a = torch.randn(*shape)
    expected = gp.chain_expected(torch.nn.functional.pad(a, (0, 0, 0, (-shape[0]) % 64)))[:shape[0]]
    ref = tt.reference(kernel, a)
    sim = tt.simulate(kernel, a)
    assert torch.equal(sim, ref)
    # rows past the last full tile come from the zero padding the masked loads give
    full = shape[0] // 64 * 64
    assert torch.equal(ref[:full], expected[:full])


@pytest.mark.parametrize("target", TARGETS)
def test_gemm_and_reduction_under_guard(target):
    kernel = gp.gemm_reduce_guarded(target)()
    a, b = torch.randn(64, 32).half(), torch.randn(32, 64).half()
    c_ref, r_ref = tt.reference(kernel, a, b)
    c_sim, r_sim = tt.simulate(kernel, a, b)
    expected = a.double() @ b.double()
    torch.testing.assert_close(c_ref.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(c_sim, c_ref, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(r_sim.double(), expected.sum(1), rtol=1e-5, atol=1e-3)
    src = kernel.get_kernel_source()
    # the warps are counted from the scope's index, not threadIdx.x
    assert re.search(r"gemm_ss<[^>]*>\([^;]*, (\w+_scope_\d+)\);", src)


@pytest.mark.parametrize("target", TARGETS)
def test_uniform_branch_gets_its_barrier_inside(target):
    kernel = gp.uniform_branch_chain(target)(96)
    a = torch.randn(96, 96)
    b0 = torch.randn(96, 96)
    b_ref, b_sim = b0.clone(), b0.clone()
    tt.reference(kernel, a, b_ref)
    tt.simulate(kernel, a, b_sim)
    expected = gp.uniform_expected(a, b0)
    assert torch.equal(b_ref, expected)
    assert torch.equal(b_sim, expected)


# ------------------------------------------------------------------ refusals


def _guard_program(cond_kind):
    @tegula.jit(out_idx=[1], target="sm_90a")
    def program(M=128, N=128):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
            with T.Kernel(1, threads=256) as bx:
                S = T.alloc_shared((M, N), "float32")
                frag = T.alloc_fragment((M, N), "float32")
                r = T.alloc_local((1,), "int32")
                tx = T.get_thread_binding(0)
                r[0] = tx
                T.fill(S, 0)
                if cond_kind == "pieces":
                    if tx % 2 == 0:  # MARK
                        T.copy(A, S)
                elif cond_kind == "partial_warps":
                    if tx < 100:  # MARK
                        T.copy(A, S)
                elif cond_kind == "register":
                    if r[0] < 128:  # MARK
                        T.copy(A, S)
                elif cond_kind == "nobody":
                    if tx >= 200 and tx < 160:  # MARK
                        T.copy(A, S)
                elif cond_kind == "mixed_else":
                    if tx < 128 and bx == 0:  # MARK
                        T.copy(A, S)
                    else:
                        T.fill(S, 1)
                elif cond_kind == "fragment_crosses":
                    T.fill(frag, 1)
                    if tx < 128:
                        T.copy(A, frag)  # MARK
                T.copy(S, B)

        return main

    return program


@pytest.mark.parametrize("kind, message", [
    ("pieces", "not one contiguous range"),
    ("partial_warps", "not whole warps"),
    ("register", "may differ between the block's threads"),
    ("nobody", "which no thread of the block"),
    ("mixed_else", "else branch of a condition that mixes"),
    ("fragment_crosses", "cannot cross a thread guard"),
])
def test_guard_the_engine_cannot_divide_is_an_error_at_its_line(kind, message):
    import inspect
    src_lines, first = inspect.getsourcelines(_guard_program)
    start = next(i for i, l in enumerate(src_lines) if f'"{kind}"' in l)
    mark = next(i for i in range(start, len(src_lines)) if "# MARK" in src_lines[i])
    with pytest.raises(tegula.TegulaCompileError) as e:
        _guard_program(kind)()
    assert message in str(e.value)
    assert f":{first + mark}:" in str(e.value).splitlines()[0]


def test_scalar_code_under_a_guard_stays_per_thread():
    # `if tx == 0: B[0] = ...` is one thread's store, not tile code: no scope, as before.
    @tegula.jit(out_idx=[1], target="sm_90a")
    def program(N=64):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                tx = T.get_thread_binding(0)
                if tx == 0:
                    B[0] = A[3] * 2.0

        return main

    kernel = program()
    assert "_scope" not in kernel.get_kernel_source()
    a = torch.randn(64)
    assert torch.equal(tt.simulate(kernel, a), a[3:4] * 2.0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stages", [0, 1, 2, 3])
@pytest.mark.parametrize("shape", [(128, 64, 128), (100, 72, 120)], ids=["aligned", "ragged"])
def test_masked_k_steps_get_their_barriers(target, stages, shape):
    # Without barriers inside the branch, the gemm reads tiles the copies have not finished
    # (the simulator reports the race); with them, every kept K tile is summed once.
    M, N, K = shape
    kernel = gp.masked_block_gemm(target, stages)(M, N, K)
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    mask = (torch.rand((M + 63) // 64, (K + 31) // 32) < 0.6).to(torch.int8)
    mask[0, 0] = 1  # at least one kept tile
    expected = gp.masked_block_gemm_expected(a, b, mask)
    ref = tt.reference(kernel, a, b, mask)
    sim = tt.simulate(kernel, a, b, mask)
    torch.testing.assert_close(ref.double(), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(sim.double(), expected, rtol=1e-5, atol=1e-4)
