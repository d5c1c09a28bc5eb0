"""Frontend control flow and constants (issue 24), without a GPU: comprehensions and
generator expressions run at compile time over Python values; over kernel values they
build the expression. Each kernel compiles for sm_80 and sm_90a, and the program's
meaning (reference) and the lowered code (simulate) agree with torch on fresh inputs
written into poisoned outputs."""
import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

TARGETS = ["sm_80", "sm_90a"]
SIZES = [5, 12, 0, 7]


def block_sums(sizes, block):
    """Out[i] = sum of X over the ith group of `sizes` rows, padded to whole blocks: the
    block count is a generator expression over Python ints (folded), the row offsets a
    list comprehension, and the per-group sum a generator over kernel values."""
    n = sum(sizes)
    blocks = sum((s + block - 1) // block for s in sizes)
    starts = [sum(sizes[:g]) for g in range(len(sizes))]
    groups = len(sizes)

    @T.prim_func
    def kernel(X: T.Tensor((n, 4), T.float32), Out: T.Tensor((groups + 1,), T.float32)):
        with T.Kernel(1, threads=32) as bx:
            for g in T.serial(groups):
                Out[g] = T.float32(0)
            Out[0] = sum(X[starts[0] + r, c] for r in range(sizes[0]) for c in range(4) if c % 2 == 0)
            Out[1] = sum(X[starts[1] + r, c] for r in range(sizes[1]) for c in range(4) if c % 2 == 0)
            Out[3] = sum([X[starts[3] + r, c] for r, c in [(r, c) for r in range(sizes[3]) for c in (0, 2)]])
            Out[groups] = T.float32(blocks)

    return kernel


def block_sums_torch(x, sizes, block):
    out, start = [], 0
    for s in sizes:
        out.append(x[start:start + s, ::2].sum() if s else torch.tensor(0.0))
        start += s
    out.append(torch.tensor(float(sum((s + block - 1) // block for s in sizes))))
    return torch.stack(out)


@pytest.mark.parametrize("target", TARGETS)
def test_generator_expressions_fold_and_build(target):
    kernel = tegula.compile(block_sums(SIZES, 4), target=target)
    for run in (tt.reference, tt.simulate):
        x = torch.randn(sum(SIZES), 4)
        out = torch.full((len(SIZES) + 1,), float("nan"))
        run(kernel, x, out)
        torch.testing.assert_close(out, block_sums_torch(x, SIZES, 4), msg=run.__name__)


def test_a_comprehension_over_a_kernel_value_is_refused_at_its_line():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def kernel(X: T.Tensor((8,), T.float32), n: T.int32):
            with T.Kernel(1, threads=32) as bx:
                X[0] = sum(X[i] for i in range(n))  # marker: over-kernel-value
    assert "iterates over Python values only" in str(info.value)
    assert "marker: over-kernel-value" in str(info.value)


def test_a_comprehension_if_on_a_kernel_value_is_refused():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def kernel(X: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32) as bx:
                X[0] = sum(X[i] for i in range(8) if X[i] > 0)  # marker: kernel-if
    assert "must be a Python value at compile time" in str(info.value)
    assert "marker: kernel-if" in str(info.value)


# ---- T.const used before the annotation that sizes it, through assigned names ----

def padded_window_sums(P):
    """TileLang's `KH, KW = K, K` and `q_shape = [...]`: the T.consts are read off the
    arguments through names the body assigns before the annotations."""
    @tegula.jit(target="sm_90a")
    def window(X, W):
        N, K = T.const("N, K")
        KH, KW = K, K
        ON = N + 2 * P - K + 1  # K used before any annotation names it
        x_shape = [N]
        X: T.Tensor(x_shape, T.float32)
        W: T.Tensor((KH, KW), T.float32)
        Out = T.empty((ON,), T.float32)
        with T.Kernel(1, threads=32) as bx:
            for i in T.serial(ON):
                acc = T.alloc_var(T.float32)
                acc = T.float32(0)
                for k in T.serial(K):
                    if i + k - P >= 0 and i + k - P < N:
                        acc = acc + X[i + k - P] * W[k, k]
                Out[i] = acc
        return Out

    return window


def window_torch(x, w, P):
    k = w.shape[0]
    xp = torch.nn.functional.pad(x, (P, P))
    return torch.stack([(xp[i:i + k] * w.diagonal()).sum() for i in range(xp.shape[0] - k + 1)])


@pytest.mark.parametrize("n,k", [(19, 3), (8, 5)])
def test_const_used_before_its_annotation_through_aliases(n, k):
    fn = padded_window_sums(1)
    x, w = torch.randn(n), torch.randn(k, k)
    kernel = fn.compile(x, w)
    assert kernel.params[-1].shape == (n + 2 - k + 1,)
    for run in (tt.reference, tt.simulate):
        x, w = torch.randn(n), torch.randn(k, k)
        out = run(kernel, x, w)  # the output is allocated by the runner
        torch.testing.assert_close(out, window_torch(x, w, 1), msg=run.__name__)


def test_const_alias_that_disagrees_with_the_argument_is_refused():
    fn = padded_window_sums(0)
    with pytest.raises(tegula.TegulaCompileError) as info:  # W is 3x4, K is read as 3
        fn.compile(torch.randn(9), torch.randn(3, 4))
    assert "argument 'W' dimension 1 is 4, but the declaration says 3" in str(info.value)
    assert "W: T.Tensor((KH, KW), T.float32)" in str(info.value)
