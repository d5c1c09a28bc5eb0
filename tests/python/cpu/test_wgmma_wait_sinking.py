"""pipeline_loops' wait sinking (docs/pipeline.md, "pipeline_loops"): in a pipelined loop a
wgmma gemm's wait moves down past statements that need neither its accumulator nor shared
memory, so that work runs while the tensor cores do.

Three programs on sm_90a, each checked three ways: the interpreter (the program as
written); the thread-by-thread simulator, which writes a wgmma's accumulator only at the
wait that retires its group and reports a read of it before then (it runs a
warp-specialised kernel in its cp.async form, where the same sinking applies); and the
lowered IR and CUDA source of both forms for where the waits stand:
  - two gemms into two accumulators, then one promotion each (the block-scaled FP8 GEMM's
    shape): the first gemm's wait moves past the second's issue (one group left pending)
    to the first promotion, the second's past that promotion;
  - the same with a store to shared memory between the gemms: no move;
  - one gemm whose result the next statement reads: no move."""
import re

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

BM, BN, BK = 64, 64, 32


def two_gemms(M, N, K, shared_store=False):
    """C = sum over pairs of K blocks of 2 * (A_2k B_2k) + 3 * (A_2k+1 B_2k+1), through two
    partial accumulators; `shared_store`: each iteration also writes a shared tile (read
    back into C's last row block), which the first gemm's wait may not pass."""

    @T.prim_func
    def kernel(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=128) as (bx, by):
            A_s = T.alloc_shared((BM, 2 * BK), "float16")
            B_s = T.alloc_shared((2 * BK, BN), "float16")
            D_s = T.alloc_shared((BM, BN), "float32")
            c0 = T.alloc_fragment((BM, BN), "float32")
            c1 = T.alloc_fragment((BM, BN), "float32")
            acc = T.alloc_fragment((BM, BN), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // (2 * BK), num_stages=2):
                T.copy(A[by * BM, 2 * k * BK], A_s)
                T.copy(B[2 * k * BK, bx * BN], B_s)
                T.gemm(A_s[:, 0:BK], B_s[0:BK, :], c0, clear_accum=True)
                if shared_store:
                    for i, j in T.Parallel(BM, BN):
                        D_s[i, j] = T.cast(k, "float32")
                T.gemm(A_s[:, BK:2 * BK], B_s[BK:2 * BK, :], c1, clear_accum=True)
                for i, j in T.Parallel(BM, BN):
                    acc[i, j] += c0[i, j] * 2.0
                for i, j in T.Parallel(BM, BN):
                    acc[i, j] += c1[i, j] * 3.0
            if shared_store:
                for i, j in T.Parallel(BM, BN):
                    acc[i, j] += D_s[i, j]
            T.copy(acc, C[by * BM, bx * BN])

    return kernel


def one_gemm_then_use(M, N, K):
    """C = 2 * A B + 1, the scaling read at once after each gemm (nothing to overlap)."""

    @T.prim_func
    def kernel(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=128) as (bx, by):
            A_s = T.alloc_shared((BM, BK), "float16")
            B_s = T.alloc_shared((BK, BN), "float16")
            c0 = T.alloc_fragment((BM, BN), "float32")
            acc = T.alloc_fragment((BM, BN), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // BK, num_stages=2):
                T.copy(A[by * BM, k * BK], A_s)
                T.copy(B[k * BK, bx * BN], B_s)
                T.gemm(A_s, B_s, c0, clear_accum=True)
                for i, j in T.Parallel(BM, BN):
                    acc[i, j] += c0[i, j] * 2.0
            for i, j in T.Parallel(BM, BN):
                acc[i, j] += 1.0
            T.copy(acc, C[by * BM, bx * BN])

    return kernel


def operands(M, N, K, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, K, generator=g).half(), torch.randn(K, N, generator=g).half()


def want_two(a, b, shared_store, K):
    a, b = a.float(), b.float()
    w = torch.zeros(a.shape[0], b.shape[1])
    for p in range(K // (2 * BK)):
        k0, k1 = 2 * p * BK, (2 * p + 1) * BK
        w += 2 * (a[:, k0:k0 + BK] @ b[k0:k0 + BK]) + 3 * (a[:, k1:k1 + BK] @ b[k1:k1 + BK])
    return w + (K // (2 * BK) - 1) if shared_store else w


def consumer_loop(kernel):
    """The compute loop's body of the final IR (the consumer's, warp-specialised), one
    statement a line, stripped."""
    ir = kernel.get_ir("final")
    loops = [m.start() for m in re.finditer(r"for k in serial", ir)]
    assert len(loops) in (1, 2), ir  # (producer, then) consumer
    return [line.strip() for line in ir[loops[-1]:].splitlines()[1:]]


def position(lines, pattern):
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    assert hits, f"{pattern!r} not in the consumer loop:\n" + "\n".join(lines[:80])
    return hits[0]


def run_all(kernel, a, b, want):
    for run in (tt.reference, tt.simulate):
        out = run(kernel, a, b)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


WS = {}
CP_ASYNC = {"tl.disable_warp_specialized": True}


@pytest.mark.parametrize("form", [WS, CP_ASYNC], ids=["warp_specialized", "cp_async"])
def test_waits_sink_past_the_other_gemm_and_promotion(form):
    M, N, K = 64, 128, 128   # two K pairs, two column blocks
    k = tegula.compile(two_gemms(M, N, K), out_idx=[-1], target="sm_90a", pass_configs=form)
    lines = consumer_loop(k)
    issue0 = position(lines, r"^wgmma_ss\(.*c0\[0\]\)")
    issue1 = position(lines, r"^wgmma_ss\(.*c1\[0\]\)")
    wait0 = position(lines, r"^wgmma_wait\(c0\[0\], ")
    promote0 = position(lines, r"^acc\[0\] = acc\[0\] \+ c0\[0\]")
    wait1 = position(lines, r"^wgmma_wait\(c1\[0\], ")
    promote1 = position(lines, r"^acc\[0\] = acc\[0\] \+ c1\[0\]")
    assert issue0 < issue1 < wait0 < promote0 < wait1 < promote1
    assert lines[wait0] == "wgmma_wait(c0[0], 1)"   # the second gemm's group may still run
    assert lines[wait1] == "wgmma_wait(c1[0], 0)"
    if form is WS:
        # The stage's release ("empty" arrival) follows the wait of the last gemm reading it.
        releases = [i for i, line in enumerate(lines) if line.startswith("mbar_arrive(")]
        assert releases and min(releases) > wait1
    src = k.get_kernel_source()
    assert re.search(r"wgmma_wait_regs<1, \d+>\(&c0\[0\]\)", src)
    a, b = operands(M, N, K, 1)
    run_all(k, a, b, want_two(a, b, False, K))
    assert k.cubin()


@pytest.mark.parametrize("form", [WS, CP_ASYNC], ids=["warp_specialized", "cp_async"])
def test_no_sinking_past_a_shared_store(form):
    M, N, K = 64, 64, 128
    k = tegula.compile(two_gemms(M, N, K, shared_store=True), out_idx=[-1], target="sm_90a", pass_configs=form)
    lines = consumer_loop(k)
    wait0 = position(lines, r"^wgmma_wait\(c0\[0\], ")
    assert lines[wait0] == "wgmma_wait(c0[0], 0)"
    assert wait0 < position(lines, r"^D_s\[") < position(lines, r"^wgmma_ss\(.*c1\[0\]\)")
    src = k.get_kernel_source()
    assert not re.search(r"wgmma_wait_regs<1, \d+>\(&c0\[0\]\)", src)
    a, b = operands(M, N, K, 2)
    run_all(k, a, b, want_two(a, b, True, K))


def test_no_sinking_when_the_next_statement_reads_the_accumulator():
    M, N, K = 64, 64, 96
    k = tegula.compile(one_gemm_then_use(M, N, K), out_idx=[-1], target="sm_90a")
    lines = consumer_loop(k)
    issue0 = position(lines, r"^wgmma_ss\(.*c0\[0\]\)")
    assert lines[issue0 + 1] == "wgmma_wait(c0[0], 0)"
    a, b = operands(M, N, K, 3)
    run_all(k, a, b, 2 * (a.float() @ b.float()) + 1)


def test_mma_sync_is_unaffected():
    # sm_80's mma.sync is synchronous: no waits to move, same results.
    M, N, K = 64, 64, 128
    k = tegula.compile(two_gemms(M, N, K, True), out_idx=[-1], target="sm_80")
    assert "wgmma" not in k.get_kernel_source()
    a, b = operands(M, N, K, 4)
    torch.testing.assert_close(tt.simulate(k, a, b), want_two(a, b, True, K), rtol=1e-5, atol=1e-4)
