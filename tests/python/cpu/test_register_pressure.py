"""A kernel whose fragments cannot all live in its threads' registers gets a
RegisterPressureWarning when it is compiled, naming the fragments and their registers per
thread; the shipped kernels get none. Compile-only (sm_90a, wgmma): the registers ptxas
chose are read back from the cubin to check that the warning means a spill."""
import importlib
import re
import warnings

import pytest

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402
from tegula import registers  # noqa: E402

TARGET = "sm_90a"
# Lower on the threads T.Kernel declares: without it, a one-warpgroup kernel over its
# registers is lowered on two (test_widen_threads.py).
KEEP = {"tegula.keep_threads": True}


def attention_like(block_M, block_N, dim=128, threads=128, seq=1024):
    """FlashAttention's shape: S = Q Kᵀ in acc_s, its row statistics, P = exp(S) cast to
    float16, O += P V in acc_o."""

    @T.prim_func
    def attention(Q: T.Tensor((seq, dim), "float16"), K: T.Tensor((seq, dim), "float16"),
                  V: T.Tensor((seq, dim), "float16"), O: T.Tensor((seq, dim), "float16")):
        with T.Kernel(T.ceildiv(seq, block_M), threads=threads) as bx:
            Q_shared = T.alloc_shared((block_M, dim), "float16")
            K_shared = T.alloc_shared((block_N, dim), "float16")
            V_shared = T.alloc_shared((block_N, dim), "float16")
            acc_s = T.alloc_fragment((block_M, block_N), "float32")
            acc_s_cast = T.alloc_fragment((block_M, block_N), "float16")
            acc_o = T.alloc_fragment((block_M, dim), "float32")
            row_max = T.alloc_fragment((block_M,), "float32")
            row_sum = T.alloc_fragment((block_M,), "float32")
            T.copy(Q[bx * block_M, 0], Q_shared)
            T.clear(acc_o)
            for kb in T.Pipelined(T.ceildiv(seq, block_N), num_stages=2):
                T.copy(K[kb * block_N, 0], K_shared)
                T.copy(V[kb * block_N, 0], V_shared)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, clear_accum=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.reduce_max(acc_s, row_max, dim=1)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] - row_max[i])
                T.reduce_sum(acc_s, row_sum, dim=1)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] = acc_o[i, j] / row_sum[i]
            T.copy(acc_o, O[bx * block_M, 0])

    return attention


def compile_recording(func, **kwargs):
    """(kernel, the RegisterPressureWarnings its compilation gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = tegula.compile(func, target=TARGET, **kwargs)
    return kernel, [w for w in caught if issubclass(w.category, tegula.RegisterPressureWarning)]


def budget(threads):
    """Computed here, not by the module: 64K registers shared by the block, at most 255 a
    thread, allocated in eights; 24 kept for addresses and indices. (A warp-specialised
    kernel's consumers may get a little less: 240 at most.)"""
    return min(255, 65536 // threads) // 8 * 8 - 24


def test_registers_per_thread_limit_and_budget():
    assert [registers.register_limit(t) for t in (32, 128, 256, 384, 512, 1024)] == [248, 248, 248, 168, 128, 64]
    assert registers.fragment_budget(registers.register_limit(128)) == budget(128) == 224
    assert issubclass(tegula.RegisterPressureWarning, UserWarning)
    assert "RegisterPressureWarning" in tegula.__all__


def test_attention_at_128x128_tiles_on_one_warpgroup_warns_naming_its_fragments():
    kernel, caught = compile_recording(attention_like(128, 128, threads=128), out_idx=[-1], pass_configs=KEEP)
    assert len(caught) == 1
    text = str(caught[0].message)
    per_tile = 128 * 128 // 128  # a 128x128 float32 fragment over 128 threads, one register an element
    usage = kernel.register_usage()
    assert usage.fragments["acc_s"] == usage.fragments["acc_o"] == per_tile
    assert usage.fragments["acc_s_cast"] == per_tile // 2  # float16: two to a register
    # acc_s, acc_o and the row vectors are live together; acc_s_cast replaces acc_s.
    assert list(usage.live_at_peak)[:2] == ["acc_s", "acc_o"] and "acc_s_cast" not in usage.live_at_peak
    assert usage.peak == sum(usage.live_at_peak.values()) > 2 * per_tile
    assert usage.budget == budget(128) and usage.over_budget
    assert text.startswith(f"kernel attention: its fragments need {usage.peak} registers per thread at once, "
                           f"over the budget of {budget(128)}")
    lines = text.splitlines()
    named = [line.split()[0] for line in lines[1:len(usage.live_at_peak) + 1]]
    assert named == list(usage.live_at_peak)  # largest first
    for line, name in zip(lines[1:3], ("acc_s", "acc_o")):
        assert re.fullmatch(rf" +{name} +{per_tile} registers +\(float32\[128, 128\] over 128 threads\)", line)
    assert any(line.split()[:2] == ["total", str(usage.peak)] for line in lines)
    for hint in ("block_M / block_N", "more threads", "T.GemmWarpPolicy"):
        assert hint in text
    # It points at the line that compiled, not into tegula.
    assert caught[0].filename == __file__


def test_the_warning_means_ptxas_spills_and_its_absence_that_it_does_not():
    spilling, caught = compile_recording(attention_like(128, 128, threads=128), out_idx=[-1], pass_configs=KEEP)
    assert caught
    regs, stack = registers.compiled_resources(spilling.cubin())["attention_kernel"]
    assert regs == 255 and stack > 0
    roomy, caught = compile_recording(attention_like(128, 128, threads=256), out_idx=[-1])
    assert not caught
    regs, stack = registers.compiled_resources(roomy.cubin())["attention_kernel"]
    assert regs <= registers.register_limit(256) and stack == 0


@pytest.mark.parametrize("block_M,block_N,threads", [(128, 128, 256), (128, 64, 128), (64, 128, 128), (64, 64, 128)])
def test_more_threads_or_smaller_tiles_do_not_warn(block_M, block_N, threads):
    kernel, caught = compile_recording(attention_like(block_M, block_N, threads=threads), out_idx=[-1])
    assert caught == []
    usage = kernel.register_usage()
    assert usage.fragments["acc_o"] == block_M * 128 // threads
    assert usage.fragments["acc_s"] == block_M * block_N // threads
    assert usage.peak <= usage.budget and budget(threads) - 16 <= usage.budget <= budget(threads)  # warp specialised, two blocks an SM: 232


def test_a_fragment_cast_into_another_counts_once_and_both_when_both_are_read_later():
    def cast(read_again):
        @T.prim_func
        def f(X: T.Tensor((128, 128), "float32"), Y: T.Tensor((128, 128), "float16"),
              Z: T.Tensor((128, 128), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_fragment((128, 128), "float32")
                b = T.alloc_fragment((128, 128), "float16")
                T.copy(X[0, 0], a)
                T.copy(a, b)
                T.copy(b, Y[0, 0])
                if read_again:
                    T.copy(a, Z[0, 0])

        return f

    once = tegula.compile(cast(False), target=TARGET).register_usage()
    both = tegula.compile(cast(True), target=TARGET).register_usage()
    assert once.fragments == both.fragments == {"a": 128, "b": 64}
    assert (once.peak, list(once.live_at_peak)) == (128, ["a"])
    assert (both.peak, list(both.live_at_peak)) == (192, ["a", "b"])


def test_liveness_follows_branches_and_loops():
    def program(with_else):
        @T.prim_func
        def f(X: T.Tensor((128, 128), "float32"), Z: T.Tensor((128, 128), "float32")):
            with T.Kernel(2, threads=256) as bx:
                a = T.alloc_fragment((128, 128), "float32")  # 64 registers each at 256 threads
                b = T.alloc_fragment((128, 128), "float32")
                c = T.alloc_fragment((128, 128), "float32")
                T.copy(X[0, 0], c)
                T.copy(c, Z[0, 0])
                if bx == 0:
                    T.copy(X[0, 0], a)
                elif with_else:
                    T.fill(a, 1)
                T.clear(b)
                for k in T.serial(4):
                    for i, j in T.Parallel(128, 128):
                        b[i, j] = b[i, j] + a[i, j] * k
                T.copy(b, Z[0, 0])

        return f

    # Written on every path, a is dead until the if: c, then a and b, never three at once.
    usage = tegula.compile(program(True), target=TARGET).register_usage()
    assert usage.fragments == {"a": 64, "b": 64, "c": 64}
    assert (usage.peak, list(usage.live_at_peak)) == (128, ["a", "b"])
    # Without the else, a may keep its first value (none) past the if: live from the start.
    usage = tegula.compile(program(False), target=TARGET).register_usage()
    assert (usage.peak, list(usage.live_at_peak)) == (128, ["a", "c"])


def test_a_jit_cache_hit_does_not_warn_again_and_a_new_compilation_does():
    @tegula.jit(out_idx=[-1], target=TARGET, pass_configs=KEEP)
    def attention(block_M, threads):
        return attention_like(block_M, 128, threads=threads)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = attention(128, 128)
        again = attention(128, 128)
        attention(128, 256)
        attention(64, 128)
        other = attention(block_M=128, threads=128)
    assert first is again is other
    pressure = [w for w in caught if issubclass(w.category, tegula.RegisterPressureWarning)]
    assert len(pressure) == 1 and pressure[0].filename == __file__
    attention.cache_clear()
    with pytest.warns(tegula.RegisterPressureWarning, match=r"acc_o +128 registers"):
        attention(128, 128)


def test_each_kernel_of_a_program_is_measured_on_its_own():
    @T.prim_func
    def two(A: T.Tensor((128, 256), "float32"), B: T.Tensor((128, 256), "float32"),
            C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128) as bx:
            big = T.alloc_fragment((128, 256), "float32")  # 256 registers at 128 threads
            T.copy(A[0, 0], big)
            T.copy(big, B[0, 0])
        with T.Kernel(1, threads=256) as bx:
            small = T.alloc_fragment((128, 128), "float32")  # 64 at 256 threads
            T.copy(B[0, 0], small)
            T.copy(small, C[0, 0])

    kernel, caught = compile_recording(two)
    assert [kernel.register_usage(i).fragments for i in range(2)] == [{"big": 256}, {"small": 64}]
    assert len(caught) == 1
    assert str(caught[0].message).startswith("kernel two (T.Kernel 0 of 2): its fragments need 256 registers")


@pytest.mark.parametrize("hopper", [True, False])
@pytest.mark.parametrize("dim,causal", [(64, False), (128, False), (128, True), (256, False)])
def test_shipped_flash_attention_defaults_do_not_warn(monkeypatch, hopper, dim, causal):
    fa = importlib.import_module("tegula.kernels.flash_attention")
    monkeypatch.setattr(fa, "wgmma_gpu", lambda: hopper)  # the tile default_config picks on that GPU
    cfg = fa.default_config(1024, dim, causal)
    kernel, caught = compile_recording(fa.flash_attention_program(2, 8, 8, 1024, 1024, dim, is_causal=causal,
                                                                  **cfg), out_idx=[3, 4])
    assert caught == []
    usage = kernel.register_usage()
    assert usage.fragments["acc_o"] == cfg["block_M"] * dim // cfg["threads"]
    assert usage.peak <= usage.budget


@pytest.mark.parametrize("wgmma", [True, False])
def test_shipped_matmul_default_does_not_warn(wgmma):
    gemm = importlib.import_module("tegula.kernels.gemm")
    cfg = gemm.default_config(4096, 4096, 4096, wgmma=wgmma)
    kernel, caught = compile_recording(gemm.matmul_program(4096, 4096, 4096, **cfg), out_idx=[-1])
    assert caught == []
    usage = kernel.register_usage()
    assert usage.fragments == {"C_local": cfg["block_M"] * cfg["block_N"] // cfg["threads"]}
    assert usage.peak == usage.fragments["C_local"] <= usage.budget


def test_compiled_resources_reads_the_cubin():
    with pytest.raises(ValueError, match="ELF"):
        registers.compiled_resources(b"not a cubin")
    kernel = tegula.compile(attention_like(64, 64), target=TARGET, out_idx=[-1])
    (entry, (regs, stack)), = registers.compiled_resources(kernel.cubin()).items()
    assert entry == "attention_kernel" and 0 < regs <= 255 and stack == 0


def test_the_eager_form_warns_at_the_users_line():
    @tegula.jit(target=TARGET)
    def gemm(A, B, block_M=256, block_N=256):
        M, N, K = T.const("M, N, K")
        A: T.Tensor((M, K), "float16")
        B: T.Tensor((K, N), "float16")
        C = T.empty((M, N), "float16")
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_shared = T.alloc_shared((block_M, 32), "float16")
            B_shared = T.alloc_shared((32, block_N), "float16")
            C_local = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=2):
                T.copy(A[by * block_M, k * 32], A_shared)
                T.copy(B[k * 32, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])
        return C

    # 256 x 256 float32 on 128 threads: lowered on two warpgroups (test_widen_threads.py),
    # still 256 registers a thread.
    with pytest.warns(tegula.RegisterPressureWarning, match=r"C_local +256 registers .* over 256 threads") as caught:
        gemm.compile(M=1024, N=1024, K=1024)
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", tegula.RegisterPressureWarning)
        assert gemm.compile(M=1024, N=1024, K=1024, block_M=128, block_N=128).register_usage().peak == 128
