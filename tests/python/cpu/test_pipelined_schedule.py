"""TileLang's hand schedule of a T.Pipelined loop (order=, stage=, group=, sync=): honoured
where it is the schedule Tegula's pipeline runs (the global->shared copies ahead, the rest
in one later stage), a compile error at the argument otherwise. No GPU: generated source,
the reference and the simulator against torch."""
import math
import os

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

TARGETS = ["sm_90a", "sm_80"]

with open(__file__, encoding="utf-8") as _f:
    _LINES = _f.read().splitlines()


def line_of(marker: str) -> int:
    hits = [n for n, text in enumerate(_LINES, 1) if text.rstrip().endswith("# " + marker)]
    assert len(hits) == 1, f"marker {marker!r} must end exactly one line of this file, found {len(hits)}"
    return hits[0]


def gemm_program(M, N, K, block_M=64, block_N=64, block_K=32, **loop):
    """TileLang's GEMM; `loop` is what T.Pipelined gets besides the trip count."""

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), "float16")
            B_s = T.alloc_shared((block_K, block_N), "float16")
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), **loop):  # MARK-gemm-loop
                T.copy(A[by * block_M, k * block_K], A_s)  # MARK-copy-A
                T.copy(B[k * block_K, bx * block_N], B_s)  # MARK-copy-B
                T.gemm(A_s, B_s, C_l)  # MARK-gemm
            T.copy(C_l, C[by * block_M, bx * block_N])

    return gemm


def attention_program(seq, dim, block_M=64, block_N=64, **loop):
    """FlashAttention forward written as TileLang's wgmma-pipelined example writes it: 15
    statements in the loop, its `group` making them 6 units."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504

    @T.prim_func
    def attention(Q: T.Tensor((seq, dim), "float16"), K: T.Tensor((seq, dim), "float16"),
                  V: T.Tensor((seq, dim), "float16"), Output: T.Tensor((seq, dim), "float16")):
        with T.Kernel(T.ceildiv(seq, block_M), threads=128) as bx:
            Q_shared = T.alloc_shared([block_M, dim], "float16")
            K_shared = T.alloc_shared([block_N, dim], "float16")
            V_shared = T.alloc_shared([block_N, dim], "float16")
            acc_s = T.alloc_fragment([block_M, block_N], "float")
            acc_s_cast = T.alloc_fragment([block_M, block_N], "float16")
            acc_o = T.alloc_fragment([block_M, dim], "float")
            scores_max = T.alloc_fragment([block_M], "float")
            scores_max_prev = T.alloc_fragment([block_M], "float")
            scores_scale = T.alloc_fragment([block_M], "float")
            scores_sum = T.alloc_fragment([block_M], "float")
            logsum = T.alloc_fragment([block_M], "float")
            T.copy(Q[bx * block_M, 0], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity("float"))
            for k in T.Pipelined(T.ceildiv(seq, block_N), **loop):  # MARK-attention-loop
                T.copy(K[k * block_N, 0], K_shared)
                for i, j in T.Parallel(block_M, block_N):  # MARK-mask
                    acc_s[i, j] = T.if_then_else(k * block_N + j >= seq, -T.infinity("float"), 0)
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)  # MARK-qk
                T.copy(scores_max, scores_max_prev)  # MARK-softmax
                T.fill(scores_max, -T.infinity("float"))
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
                T.copy(acc_s, acc_s_cast)  # MARK-cast
                for i, j in T.Parallel(block_M, dim):  # MARK-rescale
                    acc_o[i, j] *= scores_scale[i]
                T.copy(V[k * block_N, 0], V_shared)  # MARK-copy-V
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)  # MARK-pv
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, Output[bx * block_M, 0])

    return attention


ATTENTION_GROUPS = [[0], [1, 2], [3, 4, 5, 6, 7, 8, 9, 10, 11], [12], [13], [14]]


def source(program, target, out_idx=(-1,)):
    return tegula.compile(program, out_idx=list(out_idx), target=target).get_kernel_source()


def loop_order(program) -> list[str]:
    """The top-level statements of the pipelined loop as the frontend built it, each cut
    at its first '[' ("T.copy(B", "for i in parallel(0, 64):")."""
    lines = program.script().splitlines()
    start = next(n for n, text in enumerate(lines) if "pipelined(" in text)
    indent = len(lines[start]) - len(lines[start].lstrip()) + 4
    body = []
    for text in lines[start + 1:]:
        depth = len(text) - len(text.lstrip())
        if depth < indent:
            break
        if depth == indent:
            body.append(text.strip().split("[")[0])
    return body


def compile_error(build) -> tegula.TegulaCompileError:
    with pytest.raises(tegula.TegulaCompileError) as info:
        build()
    assert info.value.file == __file__, str(info.value)
    return info.value


def gemm_numbers(kernel, M, N, K, run):
    torch.manual_seed(0)
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    out = run(kernel, a, b)
    torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- honoured

@pytest.mark.parametrize("target", TARGETS)
def test_copies_first_compute_last_is_the_default_schedule(target):
    """TileLang's documented schedule (copies in stage 0, the gemm in stage 1) is Tegula's
    own: the same generated source, num_stages inferred as max(stage) + 1 or given."""
    plain2 = source(gemm_program(256, 256, 256, num_stages=2), target)
    plain3 = source(gemm_program(256, 256, 256, num_stages=3), target)
    assert source(gemm_program(256, 256, 256, order=[0, 1, 2], stage=[0, 0, 1]), target) == plain2
    assert source(gemm_program(256, 256, 256, num_stages=3, order=[0, 1, 2], stage=[0, 0, 1]), target) == plain3
    assert source(gemm_program(256, 256, 256, order=[0, 1, 2], stage=[0, 0, 2]), target) == plain3
    # TileLang's older warp-specialised form marks the producer copies with -1.
    assert source(gemm_program(256, 256, 256, order=[-1, -1, 0], stage=[-1, -1, 0]), target) == plain2
    # sync is accepted with no effect, as in TileLang; empty lists are no schedule.
    assert source(gemm_program(256, 256, 256, num_stages=2, sync=[[0, 1]]), target) == plain2
    assert source(gemm_program(256, 256, 256, num_stages=2, order=[], stage=[], group=[]), target) == plain2
    assert plain2 != plain3  # the comparisons above can tell depths apart


@pytest.mark.parametrize("target", TARGETS)
def test_reordered_copies_run_in_the_given_order(target):
    program = gemm_program(64, 64, 96, num_stages=2, order=[1, 0, 2], stage=[0, 0, 1])
    assert loop_order(program) == ["T.copy(B", "T.copy(A", "T.gemm(A_s"]
    assert source(program, target) != source(gemm_program(64, 64, 96, num_stages=2), target)
    kernel = tegula.compile(program, out_idx=[-1], target=target)
    gemm_numbers(kernel, 64, 64, 96, tt.simulate)
    gemm_numbers(kernel, 64, 64, 96, tt.reference)


@pytest.mark.parametrize("target", TARGETS)
def test_grouped_copies_count_as_one_statement(target):
    program = gemm_program(64, 64, 96, group=[[0, 1], [2]], order=[0, 1], stage=[0, 1])
    assert source(program, target) == source(gemm_program(64, 64, 96, num_stages=2), target)
    gemm_numbers(tegula.compile(program, out_idx=[-1], target=target), 64, 64, 96, tt.simulate)


@pytest.mark.parametrize("target", TARGETS)
def test_one_stage_runs_nothing_ahead(target):
    program = gemm_program(64, 64, 96, order=[0, 1, 2], stage=[0, 0, 0])
    assert "num_stages=1" in program.script()
    assert source(program, target) == source(gemm_program(64, 64, 96, num_stages=1), target)
    gemm_numbers(tegula.compile(program, out_idx=[-1], target=target), 64, 64, 96, tt.simulate)


@pytest.mark.parametrize("target", TARGETS)
def test_attention_with_copies_ahead_is_the_default_schedule(target):
    """TileLang's attention groups with both copies in stage 0: the V copy moves to the
    front of the body, which Tegula's pipeline does anyway."""
    scheduled = attention_program(128, 64, num_stages=2, group=ATTENTION_GROUPS, order=[0, 2, 3, 4, 1, 5],
                                  stage=[0, 1, 1, 1, 0, 1])
    body = loop_order(scheduled)
    assert len(body) == 15 and body[:4] == ["T.copy(K", "T.copy(V", "for i in parallel(0, 64):", "T.gemm(Q_shared"]
    assert source(scheduled, target, (3,)) == source(attention_program(128, 64, num_stages=2), target, (3,))
    torch.manual_seed(0)
    q, k, v = (torch.randn(128, 64, dtype=torch.float16) for _ in range(3))
    out = tt.simulate(tegula.compile(scheduled, out_idx=[3], target=target), q, k, v)
    ref = torch.softmax(q.float() @ k.float().T / 8, dim=-1) @ v.float()
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)


# ---------------------------------------------------------------- refused, at the argument

@pytest.mark.parametrize("loop, arg, message", [
    (dict(order=[0, 1], stage=[0, 1]), "order",
     "order and stage have 2 entries, but the loop body has 3 statement(s): T.copy (global -> shared) (line {A})"),
    (dict(order=[0, 1], stage=[0, 0, 1]), "stage", "order has 2 entries and stage 3"),
    (dict(order=[0, 0, 1], stage=[0, 0, 1]), "order", "order must be a permutation of 0..2"),
    (dict(order=[0, 1, 3], stage=[0, 0, 1]), "order", "3 is out of range"),
    (dict(order=[0, 1, 2]), "order", "order needs stage too"),
    (dict(order=[0, 1, 2], stage=[0, 0, -2]), "stage", "stage values must be >= 0"),
    (dict(order=[0, 1, 2], stage=[0, 0, 1.5]), "stage", "stage must be a list of ints"),
    (dict(group=[[0, 1], [2]]), "group", "group needs order and stage"),
    (dict(group=[[0], [2]], order=[0, 1], stage=[0, 1]), "group", "group must split the loop body's statements"),
    (dict(group=[[0], [1]], order=[0, 1], stage=[0, 1]), "group", "group covers 2 statement(s), but the loop body "
                                                                  "has 3"),
    (dict(order=[0, 1, 2], stage=[0, 0, 1], sync=4), "sync", "sync must be a list of lists of ints"),
    (dict(order=[0, 1, 2], stage=[0, 0, 0], num_stages=3), "num_stages", "stage puts every statement in stage 0"),
    (dict(order=[0, 1, 2], stage=[0, 0, 1], num_stages=1), "num_stages", "num_stages=1 leaves them one buffer"),
    (dict(order=[0, 1, 2], stage=[0, 1, 1]), "stage",
     "stage gives T.copy (global -> shared) (line {B}) stage 1, after stage 0"),
    (dict(order=[0, 1, 2], stage=[1, 1, 0]), "stage", "stage gives T.gemm (line {G}) stage 0, the stage of the copies"),
    (dict(order=[2, 0, 1], stage=[0, 0, 0]), "order",
     "order puts T.gemm (line {G}) before T.copy (global -> shared) (line {A}) in stage 0, but one writes A_s"),
])
def test_schedule_errors_name_the_argument_at_the_loop(loop, arg, message):
    lines = {"A": line_of("MARK-copy-A"), "B": line_of("MARK-copy-B"), "G": line_of("MARK-gemm")}
    err = compile_error(lambda: gemm_program(64, 64, 96, **loop))
    assert err.line == line_of("MARK-gemm-loop"), str(err)
    assert message.format(**lines) in err.message, str(err)
    assert f"{arg} " in err.message or f"{arg}=" in err.message, str(err)


FA3 = dict(num_stages=2, group=ATTENTION_GROUPS, order=[-1, 0, 3, 1, -1, 2], stage=[-1, 0, 0, 1, -1, 1])


def attention_reference(q, k, v):
    return torch.softmax(q.float() @ k.float().T / math.sqrt(q.shape[1]), dim=-1) @ v.float()


def test_fa3_schedule_shifts_the_stages_on_sm90a():
    """TileLang's FlashAttention-3 example: Q Kᵀ and the softmax in stage 0, the rescale and
    P V in stage 1 (the copies are -1, its producer mark). The warp-specialised consumer
    runs P V of tile k - 1 during the softmax of tile k: its wait (with A's registers held)
    comes after the softmax's last statement that does not touch P, and Q Kᵀ's wait lets
    P V run on (one group pending)."""
    src = source(attention_program(256, 64, **FA3), "sm_90a", (3,))
    loop = src[src.index("for (int k_t = 1;"):]
    issue_qk, issue_pv = loop.index("tegula::wgmma_ss<"), loop.index("tegula::wgmma_rs_held<")
    wait_qk, wait_pv = loop.index("tegula::wgmma_wait_regs<1, "), loop.index("tegula::wgmma_wait_held<0, ")
    assert issue_qk < issue_pv < wait_qk < wait_pv, loop[:2000]
    between = loop[wait_qk:wait_pv]
    assert "shfl_xor" in between and "exp2" in between, between  # the softmax runs while P V does
    assert "acc_s_cast[" not in between.replace("&acc_s_cast[0]", "")  # P is rewritten only after its wait
    # Elsewhere the loop runs one iteration at a time, in the schedule's order.
    assert "wgmma" not in source(attention_program(256, 64, **FA3), "sm_80", (3,))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seq", [64, 128, 200, 320])
def test_fa3_schedule_computes_attention(target, seq):
    """One to five key tiles (the prologue and epilogue alone, then the loop between),
    ragged at 200: the simulated lowered code and the reference agree with torch."""
    kernel = tegula.compile(attention_program(seq, 64, **FA3), out_idx=[3], target=target)
    torch.manual_seed(seq)
    q, k, v = (torch.randn(seq, 64, dtype=torch.float16) for _ in range(3))
    expected = attention_reference(q, k, v)
    for run in (tt.simulate, tt.reference):
        torch.testing.assert_close(run(kernel, q, k, v).float(), expected, rtol=2e-3, atol=2e-3)


def counted_gemm_program(M, N, K, block_K=32, counted_stage=3):
    """A GEMM whose loop also counts its iterations per row, in a stage of its own two
    behind the gemm's: the stages run D = 2 apart."""
    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 64), T.ceildiv(M, 64), threads=128) as (bx, by):
            A_s = T.alloc_shared((64, block_K), "float16")
            B_s = T.alloc_shared((block_K, 64), "float16")
            C_l = T.alloc_fragment((64, 64), "float32")
            seen = T.alloc_fragment((64,), "float32")
            T.clear(C_l)
            T.clear(seen)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2, order=[0, 1, 2, 3],
                                 stage=[0, 0, 1, counted_stage]):  # MARK-counted-loop
                T.copy(A[by * 64, k * block_K], A_s)
                T.copy(B[k * block_K, bx * 64], B_s)
                T.gemm(A_s, B_s, C_l)
                for i in T.Parallel(64):  # MARK-count
                    seen[i] = seen[i] + 1
            for i, j in T.Parallel(64, 64):
                C_l[i, j] = C_l[i, j] + seen[i] * 1000
            T.copy(C_l, C[by * 64, bx * 64])

    return gemm


@pytest.mark.parametrize("steps", [1, 2, 3, 5])
def test_stages_two_apart_run_shifted_or_in_order(steps):
    """With fewer iterations than the stages are apart, the consumer runs the loop one
    iteration at a time; with more, shifted (prologue, loop, epilogue): both agree."""
    K = 32 * steps
    kernel = tegula.compile(counted_gemm_program(64, 64, K), out_idx=[2], target="sm_90a")
    src = kernel.get_kernel_source()
    # (the trip count is a constant here, so only one of the two forms is left)
    assert "setmaxnreg" in src and ("int k_i = 0" in src) == (steps < 2) and ("int k_t = 2" in src) == (steps >= 2)
    torch.manual_seed(steps)
    a, b = torch.randn(64, K, dtype=torch.float16), torch.randn(K, 64, dtype=torch.float16)
    expected = a.float() @ b.float() + 1000 * steps
    for run in (tt.simulate, tt.reference):
        torch.testing.assert_close(run(kernel, a, b), expected, rtol=1e-3, atol=1e-2)


def test_a_schedule_that_reorders_dependent_statements_is_refused():
    """The softmax of one tile (stage 0, placed first) rewrites the scale before the rescale
    of the tile before it (stage 1) has read it: the schedule would change what the loop
    computes."""
    err = compile_error(lambda: attention_program(128, 64, num_stages=2, group=ATTENTION_GROUPS,
                                                  order=[-1, 0, 1, 2, -1, 3], stage=[-1, 0, 0, 1, -1, 1]))
    assert err.line == line_of("MARK-attention-loop"), str(err)
    assert (f"stage and order run a T.Parallel loop (line {line_of('MARK-rescale')}) (stage 1) of one iteration "
            f"after the group of lines {line_of('MARK-softmax')}-{line_of('MARK-cast')}") in err.message, str(err)
    assert "(stage 0) of the next, but one writes scores_scale" in err.message and "second copy" in err.message
    # Within one iteration: the rescale (reading the softmax's scale) put a stage before it.
    err = compile_error(lambda: attention_program(128, 64, num_stages=2, group=ATTENTION_GROUPS,
                                                  order=[-1, 0, 2, 1, -1, 3], stage=[-1, 1, 1, 0, -1, 1]))
    assert (f"run a T.Parallel loop (line {line_of('MARK-rescale')}) before the group of lines "
            f"{line_of('MARK-softmax')}-{line_of('MARK-cast')}") in err.message, str(err)
    assert "of the same iteration" in err.message and "scores_scale" in err.message, str(err)


def test_compute_in_the_copies_stage_is_refused():
    """The next QK gemm given the copies' stage (so it would run ahead of this softmax)."""
    stage = [0, 0, 0] + [1] * 10 + [0, 1]
    err = compile_error(lambda: attention_program(128, 64, order=list(range(15)), stage=stage))
    assert err.line == line_of("MARK-attention-loop"), str(err)
    assert f"stage gives a T.Parallel loop (line {line_of('MARK-mask')}) stage 0, the stage of the copies that run " \
           "ahead; Tegula runs only global->shared T.copy statements ahead" in err.message, str(err)


def test_caret_points_at_the_offending_element():
    def build(which):
        @T.prim_func
        def f(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((16, 64), "float16")
                C_l = T.alloc_fragment((16, 64), "float32")
                T.clear(C_l)
                if which == 0:
                    for k in T.Pipelined(4, order=[1, 1], stage=[0, 1]):  # MARK-caret-order
                        T.copy(A[k * 16, 0], A_s)
                        T.copy(A_s, C_l)
                else:
                    for k in T.Pipelined(4, order=[0, 1], stage=[1, 0]):  # MARK-caret-stage
                        T.copy(A[k * 16, 0], A_s)
                        T.copy(A_s, C_l)  # MARK-caret-use
                T.copy(C_l, C[0, 0])

    # Both errors are about the second element: a repeated position, and the shared->fragment
    # copy (a computation, here) given the stage of the copies that run ahead.
    for which, marker, literal, message in (
            (0, "MARK-caret-order", "order=[1, 1]", "1 is also at index 0"),
            (1, "MARK-caret-stage", "stage=[1, 0]", f"T.copy (shared -> fragment) (line {line_of('MARK-caret-use')}) "
                                                    "stage 0, the stage of the copies")):
        err = compile_error(lambda: build(which))
        second = _LINES[line_of(marker) - 1].index(literal) + literal.index("[") + 4  # 0-based column
        assert (err.line, err.col) == (line_of(marker), second + 1), str(err)
        assert message in err.message, str(err)


def test_a_name_bound_to_a_buffer_read_is_refused():
    def build():
        @T.prim_func
        def f(A: T.Tensor((64, 64), "float16"), Ids: T.Tensor((4,), "int32"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((16, 64), "float16")
                C_l = T.alloc_fragment((16, 64), "float32")
                T.clear(C_l)
                for k in T.Pipelined(4, order=[0, 1], stage=[0, 1]):  # MARK-let-loop
                    row = Ids[k]  # MARK-let
                    T.copy(A[row * 16, 0], A_s)
                    T.copy(A_s, C_l)
                T.copy(C_l, C[0, 0])

    err = compile_error(build)
    assert err.line == line_of("MARK-let-loop"), str(err)
    assert f"the name bound at line {line_of('MARK-let')} reads a buffer" in err.message, str(err)


def guarded_copy_program(K, guarded, **loop):
    """A loop with an index alias (no statement, as in TileLang) and, when `guarded`, its
    copy under an `if` on a kernel value."""

    @T.prim_func
    def f(A: T.Tensor((64, K), "float16"), C: T.Tensor((64, 16), "float32"), n: T.int32):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 16), "float16")
            C_l = T.alloc_fragment((64, 16), "float32")
            T.clear(C_l)
            for k in T.Pipelined(K // 16, **loop):  # MARK-guard-loop
                col: T.int32 = k * 16
                if guarded:
                    if k < n:  # MARK-guard-if
                        T.copy(A[0, col], A_s)  # MARK-guarded-copy
                else:
                    T.copy(A[0, col], A_s)
                for i, j in T.Parallel(64, 16):
                    C_l[i, j] += A_s[i, j]
            T.copy(C_l, C[0, 0])

    return f


def test_index_aliases_are_not_statements_and_guarded_copies_are_refused():
    program = guarded_copy_program(64, False, order=[0, 1], stage=[0, 1])
    assert source(program, "sm_80", (1,)) == source(guarded_copy_program(64, False, num_stages=2), "sm_80", (1,))
    a = torch.randn(64, 64, dtype=torch.float16)
    out = tt.simulate(tegula.compile(program, out_idx=[1], target="sm_80"), a, 4)
    torch.testing.assert_close(out, a.float().reshape(64, 4, 16).sum(1), rtol=1e-4, atol=1e-4)
    err = compile_error(lambda: guarded_copy_program(64, True, order=[0, 1], stage=[0, 1]))
    assert err.line == line_of("MARK-guard-loop"), str(err)
    assert (f"an if at line {line_of('MARK-guard-if')} holds a global->shared T.copy "
            f"(line {line_of('MARK-guarded-copy')})") in err.message, str(err)


def test_porting_page_describes_the_schedule():
    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "porting.md"),
                encoding="utf-8").read()
    assert "order=, stage=, group=" in page and "hand schedule is not applied" not in page
