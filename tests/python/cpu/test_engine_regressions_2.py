"""Engine bugs kernel authors met, each pinned by the smallest program that showed it.
No GPU needed: kernels compile for sm_90a / sm_80, the reference interpreter gives the
language's meaning and the simulator runs the generated code thread by thread (it reports
every out-of-bounds access), both checked against torch.

1. A global load inside another access's index was not masked: a gather C[Pos[s], i]
   whose last block runs past Pos read Pos out of bounds (the vectorised path tested the
   outer access with the inner load unmasked). Same hole in scatters (an index tensor in a
   store's index), atomics, copies into shared memory, and in code outside a T.Parallel
   nest, which was not masked at all. Rule: every global access is masked wherever it sits;
   a load past the edge gives 0, a store or atomic past it is skipped.
2. A T.macro returning an expression over a name its body bound to a load left that let
   behind (an internal verifier error). Rule: such a macro's lets close over the rest of
   the calling block, the calling statement included.
3. T.sin and T.cos were missing from the language.
4. T.alloc_global shaped by an expression of the dynamic sizes made tegula.testing fail
   with a bare KeyError and the runtime refuse the program. Rule: such shapes are
   evaluated per call; one that cannot be is an error naming the buffer and its shape.
"""
import importlib.util
import math
import textwrap

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula import env

TARGETS = ["sm_90a", "sm_80"]
NO_VECTORIZE = {"tir.disable_vectorize": True}


def compile_(func, target, out_idx=(-1,), pass_configs=None):
    return tegula.compile(func, out_idx=list(out_idx), target=target, pass_configs=pass_configs or {})


def both(kernel, *args):
    """The outputs of the reference and of the simulator (which raises on any
    out-of-bounds access), for the same inputs."""
    ref = tt.reference(kernel, *[a.clone() for a in args])
    sim = tt.simulate(kernel, *[a.clone() for a in args])
    return ref, sim


# ------------------------------------------------------------------ 1. masks of nested loads

def gather_rows(B, S, N, D, blk=16, dtype="float16"):
    @T.prim_func
    def gather(Pos: T.Tensor((B, S), "int32"), C: T.Tensor((N, D), dtype), Out: T.Tensor((B, S, D), dtype)):
        with T.Kernel(T.ceildiv(S, blk), B, threads=64) as (bx, b):
            s0 = bx * blk
            for t, i in T.Parallel(blk, D):
                Out[b, s0 + t, i] = C[Pos[b, s0 + t], i]

    return gather


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("configs", [None, NO_VECTORIZE], ids=["vector", "scalar"])
def test_gather_by_index_tensor_with_ragged_tail(target, configs):
    # S = 37: the last block's rows 37..47 index Pos past its end.
    kernel = compile_(gather_rows(2, 37, 50, 64), target, pass_configs=configs)
    pos = torch.randint(0, 50, (2, 37), dtype=torch.int32)
    c = torch.randn(50, 64).half()
    ref, sim = both(kernel, pos, c)
    expected = c[pos.long()]
    assert torch.equal(ref, expected)
    assert torch.equal(sim, expected)


def test_gather_masks_the_index_load_before_the_row_test():
    source = compile_(gather_rows(2, 37, 50, 64), "sm_90a").get_kernel_source()
    # The row test reads Pos only where s < 37 (the masked index), never unguarded.
    assert "< 37) ? Pos[" in source
    assert "(Pos[" not in source.replace("? Pos[", "")


def scatter_rows(S, D, blk=16):
    @T.prim_func
    def scatter(Pos: T.Tensor((S,), "int32"), X: T.Tensor((S, D), "float32"), Out: T.Tensor((S + 1, D), "float32")):
        with T.Kernel(T.ceildiv(S, blk), threads=64) as bx:
            for t, i in T.Parallel(blk, D):
                Out[Pos[bx * blk + t], i] = X[bx * blk + t, i]

    return scatter


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_by_index_tensor_with_ragged_tail(target):
    # Pos holds rows 1..37 of Out. Rows of the last block past Pos's end read index 0 and
    # value 0 (loads past an edge give 0), so they write 0 into row 0, and nothing else.
    kernel = compile_(scatter_rows(37, 32), target, out_idx=())
    pos = torch.randperm(37).int() + 1
    x = torch.randn(37, 32)
    ref, sim = torch.full((38, 32), 7.0), torch.full((38, 32), 7.0)
    tt.reference(kernel, pos, x, ref)
    tt.simulate(kernel, pos, x, sim)
    expected = torch.zeros(38, 32)
    expected[pos.long()] = x
    assert torch.equal(ref, expected)
    assert torch.equal(sim, expected)


def scatter_add_rows(S, R, D, blk=16):
    @T.prim_func
    def scatter_add(Idx: T.Tensor((S,), "int32"), X: T.Tensor((S, D), "float32"), Out: T.Tensor((R, D), "float32")):
        with T.Kernel(T.ceildiv(S, blk), threads=64) as bx:
            for t, i in T.Parallel(blk, D):
                T.atomic_add(Out[Idx[bx * blk + t], i], X[bx * blk + t, i])

    return scatter_add


@pytest.mark.parametrize("target", TARGETS)
def test_atomic_scatter_add_by_index_tensor_with_ragged_tail(target):
    # Idx's own tail is ragged (37 of 48 rows), and two entries point outside Out: those adds
    # are skipped.
    kernel = compile_(scatter_add_rows(37, 8, 32), target, out_idx=())
    idx = torch.randint(0, 8, (37,), dtype=torch.int32)
    idx[3], idx[20] = -1, 8
    x = torch.randn(37, 32)
    ref, sim = torch.zeros(8, 32), torch.zeros(8, 32)
    tt.reference(kernel, idx, x, ref)
    tt.simulate(kernel, idx, x, sim)
    keep = (idx >= 0) & (idx < 8)
    expected = torch.zeros(8, 32, dtype=torch.float64).index_add_(0, idx[keep].long(), x[keep].double())
    torch.testing.assert_close(ref.double(), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sim.double(), expected, rtol=1e-6, atol=1e-6)


def gather_sum_through_shared(L, N, D, blk=16, stages=2):
    @T.prim_func
    def gather_sum(Pos: T.Tensor((L,), "int32"), C: T.Tensor((N, D), "float16"), Out: T.Tensor((blk, D), "float32")):
        with T.Kernel(1, threads=128) as bx:
            rows = T.alloc_shared((blk, D), "float16")
            acc = T.alloc_fragment((blk, D), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(L, blk), num_stages=stages):
                for t, i in T.Parallel(blk, D):
                    rows[t, i] = C[Pos[k * blk + t], i]
                for t, i in T.Parallel(blk, D):
                    acc[t, i] += T.cast(rows[t, i], "float32")
            T.copy(acc, Out[0, 0])

    return gather_sum


@pytest.mark.parametrize("target", TARGETS)
def test_gather_into_shared_inside_a_pipeline(target):
    kernel = compile_(gather_sum_through_shared(37, 40, 64), target)
    pos = torch.randint(0, 40, (37,), dtype=torch.int32)
    c = torch.randn(40, 64).half()
    ref, sim = both(kernel, pos, c)
    # Rows past Pos's end read index 0 (a load past the edge gives 0): row 0 of C.
    padded = torch.cat([pos, torch.zeros(48 - 37, dtype=torch.int32)]).long()
    expected = c.double()[padded].view(3, 16, 64).sum(0)
    torch.testing.assert_close(ref.double(), expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sim.double(), expected, rtol=1e-6, atol=1e-6)


def strided_sums(N, per=8, blocks=4):
    @T.prim_func
    def sums(X: T.Tensor((N,), "float32"), Idx: T.Tensor((blocks,), "int32"), Out: T.Tensor((blocks,), "float32")):
        with T.Kernel(blocks, threads=32) as bx:
            acc = T.alloc_var("float32")
            acc = 0.0
            for k in T.serial(per):
                acc = acc + X[bx * per + k]  # past N in the last block
            Out[Idx[bx]] = acc  # Idx holds rows outside Out

    return sums


@pytest.mark.parametrize("target", TARGETS)
def test_accesses_outside_parallel_loops_are_masked(target):
    kernel = compile_(strided_sums(29), target, out_idx=())
    x = torch.randn(29)
    idx = torch.tensor([2, -1, 4, 0], dtype=torch.int32)
    sums = torch.cat([x, torch.zeros(3)]).view(4, 8).sum(1)
    expected = torch.full((4,), 7.0)
    expected[2], expected[0] = sums[0], sums[3]
    for run in (tt.reference, tt.simulate):
        out = torch.full((4,), 7.0)
        run(kernel, x, idx, out)
        torch.testing.assert_close(out, expected, msg=run.__name__)


# ------------------------------------------------------------------ 2. value-returning macros

P = 6


@T.macro
def source_row(Idx, r):
    entry = Idx[T.min(r, P - 1)]
    return T.if_then_else(entry >= 0, entry // 2, -1)


@T.macro
def source_row_twice(Idx, r):
    first = source_row(Idx, r)  # a macro's value, itself over a let
    second = Idx[T.min(r + 1, P - 1)]
    return T.max(first, second // 2)


def expected_source(idx, rows):
    r = torch.arange(rows).clamp(max=P - 1)
    e = idx[r].long()
    return torch.where(e >= 0, torch.div(e, 2, rounding_mode="floor"), torch.full_like(e, -1))


def gathered(x, src):
    valid = (src >= 0) & (src < x.shape[0])
    return torch.where(valid[:, None], x[src.clamp(0, x.shape[0] - 1)], torch.zeros(()))


def macro_gather(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Idx: T.Tensor((P,), "int32"), Y: T.Tensor((8, N), "float32")):
        with T.Kernel(2, threads=128) as bx:
            x = T.alloc_fragment((4, 64), "float32")
            for i, j in T.Parallel(4, 64):
                x[i, j] = X[source_row(Idx, bx * 4 + i), j]
            T.copy(x, Y[bx * 4, 0])

    return main


IDX = torch.tensor([0, 5, -1, 7, 30, 3], dtype=torch.int32)


@pytest.mark.parametrize("target", TARGETS)
def test_macro_returning_an_expression_over_its_let_as_a_gather_index(target):
    kernel = compile_(macro_gather(16, 64), target)
    x = torch.randn(16, 64)
    ref, sim = both(kernel, x, IDX)
    expected = gathered(x, expected_source(IDX, 8))
    assert torch.equal(ref, expected)
    assert torch.equal(sim, expected)


def macro_placements(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Idx: T.Tensor((P,), "int32"), Y: T.Tensor((8, N), "float32"),
             Z: T.Tensor((8,), "int32")):
        with T.Kernel(8, threads=64) as bx:
            row = T.alloc_shared((1, N), "float32")
            count = T.alloc_var("int32", init=source_row(Idx, bx))  # an initial value
            # a region's corner, an if test, a loop extent and a value bound to a name
            T.copy(X[T.max(source_row(Idx, bx), 0), 0], row)
            if source_row(Idx, bx) >= 0:
                for j in T.Parallel(N):
                    Y[bx, j] = row[0, j]
            else:
                for j in T.Parallel(N):
                    Y[bx, j] = 0.0
            twice = source_row_twice(Idx, bx)
            for k in T.serial(T.max(source_row(Idx, bx), 0)):
                count = count + 1
            Z[bx] = count * 100 + twice

    return main


@pytest.mark.parametrize("target", TARGETS)
def test_macro_value_wherever_an_expression_goes(target):
    kernel = compile_(macro_placements(16, 64), target, out_idx=(2, 3))
    x = torch.randn(16, 64)
    src = expected_source(IDX, 8)
    nxt = IDX[(torch.arange(8) + 1).clamp(max=P - 1)].long()
    twice = torch.maximum(src, torch.div(nxt, 2, rounding_mode="floor"))
    count = src + src.clamp(min=0)
    y_expected = torch.where((src >= 0)[:, None], x[src.clamp(0, 15)], torch.zeros(()))
    for run in (tt.reference, tt.simulate):
        y, z = run(kernel, x, IDX)
        assert torch.equal(y, y_expected), run.__name__
        assert z.tolist() == (count * 100 + twice).tolist(), run.__name__


def _load(tmp_path, body: str):
    path = tmp_path / "prog.py"
    path.write_text("import tegula\nimport tegula.language as T\n\n" + textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location("engine_regression_prog", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path.read_text().splitlines()


def test_macro_reading_a_buffer_outside_a_kernel_is_a_user_error(tmp_path):
    module, lines = _load(tmp_path, """
        @T.macro
        def blocks(Lens):
            n = Lens[0]  # here
            return n + 1

        def make():
            @T.prim_func
            def main(Lens: T.Tensor((4,), "int32"), Y: T.Tensor((64,), "float32")):
                with T.Kernel(blocks(Lens), threads=64) as bx:
                    for j in T.Parallel(64):
                        Y[j] = 0.0
            return main
        """)
    with pytest.raises(tegula.TegulaCompileError) as info:
        module.make()
    err = info.value
    assert err.line == next(i + 1 for i, line in enumerate(lines) if "# here" in line), str(err)
    assert "inside `with T.Kernel(...)`" in err.message
    for internal in ("InternalError", "verification", "scope that binds"):
        assert internal not in str(err)


# ------------------------------------------------------------------ 3. T.sin and T.cos

def trig(M, N, dtype):
    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, 16), threads=128) as bx:
            x = T.alloc_fragment((16, N), dtype)
            T.copy(X[bx * 16, 0], x)
            for i, j in T.Parallel(16, N):
                x[i, j] = T.sin(x[i, j]) + T.cos(x[i, j])
            T.copy(x, Y[bx * 16, 0])

    return main


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-6), ("float16", 4e-3), ("bfloat16", 3e-2)])
def test_sin_and_cos_against_torch(dtype, tol):
    kernel = compile_(trig(37, 64, dtype), "sm_90a")
    x = (torch.randn(37, 64) * 3).to(getattr(torch, dtype))
    ref, sim = both(kernel, x)
    expected = torch.sin(x.double()) + torch.cos(x.double())
    torch.testing.assert_close(ref.double(), expected, rtol=tol, atol=tol)
    assert torch.equal(sim, ref)  # the generated code rounds where the language does


@pytest.mark.parametrize("target", TARGETS)
def test_sin_and_cos_compile(target):
    kernel = compile_(trig(64, 64, "float16"), target)
    source = kernel.get_kernel_source()
    assert "tegula::sin(" in source and "tegula::cos(" in source
    assert len(kernel.cubin()) > 0  # NVRTC accepts the device library's sin / cos


def test_sin_and_cos_fold_on_numbers_and_are_documented():
    assert T.sin(0.5) == math.sin(0.5) and T.cos(0.5) == math.cos(0.5)
    assert T.sin.__doc__ == "T.sin(x): elementwise sin; folds for a Python number."
    assert T.cos.__doc__ == "T.cos(x): elementwise cos; folds for a Python number."


# ------------------------------------------------------------------ 4. T.alloc_global shapes

M = T.dynamic("m")


def staged_through_workspace(N=64, blk=16):
    @T.prim_func
    def staged(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        ws = T.alloc_global((T.ceildiv(M, blk) * blk, N), "float32")
        with T.Kernel(T.ceildiv(M, blk), threads=128) as bx:
            for i, j in T.Parallel(blk, N):
                ws[bx * blk + i, j] = X[bx * blk + i, j] * 2.0
        with T.Kernel(T.ceildiv(M, blk), threads=128) as bx:
            for i, j in T.Parallel(blk, N):
                Y[bx * blk + i, j] = ws[bx * blk + i, j] + 1.0

    return staged


@pytest.mark.parametrize("m", [37, 64])
def test_alloc_global_shaped_by_an_expression(m):
    kernel = compile_(staged_through_workspace(), "sm_90a")
    x = torch.randn(m, 64)
    ref, sim = both(kernel, x)
    torch.testing.assert_close(ref, x * 2 + 1)
    torch.testing.assert_close(sim, x * 2 + 1)


def test_runtime_accepts_and_saves_a_workspace_shaped_by_an_expression():
    kernel = compile_(staged_through_workspace(), "sm_90a")
    C = env.native()
    program = C.build_program(kernel._lowered_all, kernel.out_idx, len(kernel.prim_func.workspaces))
    saved = program.save()
    assert saved  # the shape expression is written with the program
    assert C.load_program(saved).save() == saved


def workspace_sized_by_a_scalar(N=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), n: T.int32, Y: T.Tensor((N,), "float32")):
        ws = T.alloc_global((n,), "float32")
        with T.Kernel(1, threads=64) as bx:
            for j in T.Parallel(N):
                ws[j] = X[j]
        with T.Kernel(1, threads=64) as bx:
            for j in T.Parallel(N):
                Y[j] = ws[j]

    return main


def test_workspace_shape_that_no_size_determines_is_named():
    kernel = compile_(workspace_sized_by_a_scalar(), "sm_90a")
    for run in (tt.reference, tt.simulate):
        with pytest.raises(ValueError, match=r"T.alloc_global 'ws' has shape \(n\)"):
            run(kernel, torch.randn(64), 64)
    C = env.native()
    with pytest.raises(ValueError, match=r"T.alloc_global 'ws': shape entry n must be"):
        C.build_program(kernel._lowered_all, kernel.out_idx, len(kernel.prim_func.workspaces))
