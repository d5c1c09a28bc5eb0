"""The row kernels at any hidden size, and the backward kernels of the norms and softmax,
no GPU needed: each program simulated thread by thread (sm_90a and sm_80) on small ragged
shapes against torch autograd in float64, in both forms (the row in registers, and the
row walked in chunks, forced here with a small chunk); the plans and argument errors;
compile checks at the real sizes, including the narrower accesses of rows whose length is
not a multiple of 8."""
import importlib
import warnings

import pytest
import torch
import torch.nn.functional as F

import tegula
import tegula.testing as tt
from tegula.kernels._common import (check_hidden, dtype_name, persistent_grid, plan_backward_rows,
                                    plan_rows)
from tegula.registers import compiled_resources

rmsnorm = importlib.import_module("tegula.kernels.rmsnorm")
layernorm = importlib.import_module("tegula.kernels.layernorm")
softmax_mod = importlib.import_module("tegula.kernels.row_softmax")
reduce_mod = importlib.import_module("tegula.kernels.reduce")

TARGETS = ["sm_90a", "sm_80"]
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 2e-5}
# (n, dtype, rows, forced plan or None). A forced plan (blk_m, threads, n_pad, chunks) walks
# the row in chunks of n_pad columns, the last one ragged.
CASES = [
    (1, torch.float16, 7, None),
    (13, torch.float32, 29, None),
    (100, torch.bfloat16, 37, None),
    (100, torch.float32, 9, (1, 32, 16, 7)),
    (37, torch.float16, 5, (1, 32, 32, 2)),
]


def _plan(n, dtype, forced, backward=False):
    if forced:
        return forced
    p = (plan_backward_rows if backward else plan_rows)(n, torch.finfo(dtype).bits // 8)
    return p.blk_m, p.threads, p.n_pad, p.chunks


def _jit(target, program, n_out=1):
    return tegula.jit(out_idx=list(range(-n_out, 0)), target=target)(program)


def _rel(out, ref):
    return ((out.double() - ref).norm() / ref.norm()).item()


def _assert_rel(outs, refs, dtype, what):
    for k, (out, ref) in enumerate(zip(outs, refs)):
        assert not torch.isnan(out).any(), f"{what} output {k}: unwritten (NaN) elements"
        err = _rel(out, ref)
        assert err <= TOL[dtype], f"{what} output {k}: relative error {err:.2e}"


def _inputs(n, dtype, m, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * 2 + 1).to(dtype)
    w = (1 + 0.1 * torch.randn(n, generator=g)).to(dtype)
    b = torch.randn(n, generator=g).to(dtype)
    dy = torch.randn(m, n, generator=g).to(dtype)
    return x, w, b, dy


def _autograd(fn, dy, *inputs):
    leaves = [t.double().requires_grad_() for t in inputs]
    return torch.autograd.grad(fn(*leaves), leaves, dy.double())


# ------------------------------------------------------------------ forwards at any N


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,dtype,m,forced", CASES, ids=str)
def test_forward_row_kernels_any_hidden_size(target, n, dtype, m, forced):
    x, w, b, _ = _inputs(n, dtype, m, 1)
    xd, wd, bd = x.double(), w.double(), b.double()
    name, plan = dtype_name(dtype), _plan(n, dtype, forced)
    for silu in (False, True):
        k = _jit(target, rmsnorm.rms_norm_program)(n, name, 1e-6, silu, *plan)
        ref = F.rms_norm(xd, (n,), wd, 1e-6)
        _assert_rel([tt.simulate(k, x, w)], [F.silu(ref) if silu else ref], dtype, f"rms_norm silu={silu}")
    k = _jit(target, layernorm.layer_norm_program)(n, name, 1e-5, *plan)
    _assert_rel([tt.simulate(k, x, w, b)], [F.layer_norm(xd, (n,), wd, bd, 1e-5)], dtype, "layer_norm")
    for kind, ref in (("sum", xd.sum(-1)), ("max", xd.amax(-1)), ("min", xd.amin(-1))):
        k = _jit(target, reduce_mod.row_reduce_program)(n, name, kind, *plan)
        _assert_rel([tt.simulate(k, x)[:, 0]], [ref], dtype, f"row_{kind}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,dtype,m,forced", CASES[1:], ids=str)
def test_softmax_any_hidden_size_with_inf_and_nan_rows(target, n, dtype, m, forced):
    """As torch: a leading run of -inf is harmless (also across chunks of the online pass),
    a row of only -inf, or holding +inf or NaN, is NaN."""
    x = _inputs(n, dtype, m, 2)[0] * 3
    x[0, :min(n - 1, 20)] = -float("inf")
    x[1, :] = -float("inf")
    x[2, n // 2] = float("inf")
    x[3, n - 1] = float("nan")
    k = _jit(target, softmax_mod.softmax_program)(n, dtype_name(dtype), *_plan(n, dtype, forced))
    y = tt.simulate(k, x)
    ref = torch.softmax(x.double(), -1)
    assert torch.equal(torch.isnan(y), torch.isnan(ref))
    finite = ~torch.isnan(ref)
    torch.testing.assert_close(y.double()[finite], ref[finite], rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("plan", [(1, 32, 64, 4), (1, 32, 96, 3), (1, 64, 256, 1)], ids=str)
def test_rms_norm_inf_in_a_row_as_torch_on_the_cpu(target, plan):
    """An inf makes its row's sum of squares inf, so rstd 0: the inf's own output NaN
    (inf·0), the rest of its row 0, the other rows untouched, whether the row is walked in
    chunks (the inf in the second chunk, a ragged last chunk) or held in registers. The
    reference is torch on the CPU, x·rsqrt(mean(x²) + eps)·w in float64. (torch's CUDA
    rms_norm on a float64 tensor is no reference here: its statistics are a Welford mean
    and variance of x, where an inf turns the running mean to NaN (inf - inf), so the
    whole row comes out NaN.)"""
    n = 250
    x, w, _, _ = _inputs(n, torch.float32, 3, 8)
    x[1, 100] = float("inf")
    for silu in (False, True):
        k = _jit(target, rmsnorm.rms_norm_program)(n, "float32", 1e-6, silu, *plan)
        y = tt.simulate(k, x, w)
        ref = F.rms_norm(x.double(), (n,), w.double(), 1e-6)
        ref = F.silu(ref) if silu else ref
        assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(y[1]).sum() == 1
        assert torch.equal(y[1] == 0, ref[1] == 0) and (y[1] == 0).sum() == n - 1
        _assert_rel([y[[0, 2]]], [ref[[0, 2]]], torch.float32, f"rms_norm silu={silu}, rows without inf")


# ------------------------------------------------------------------ backwards


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("n,dtype,m,forced", CASES, ids=str)
def test_rms_norm_backward(target, silu, n, dtype, m, forced):
    x, w, _, dy = _inputs(n, dtype, m, 3)
    grid = 3  # blocks loop over rows; m rows leave some blocks one group more than others
    k = _jit(target, rmsnorm.rms_norm_backward_program, 2)(n, dtype_name(dtype), 1e-6, silu,
                                                           *_plan(n, dtype, forced, True), grid)

    def fn(x, w):
        y = F.rms_norm(x, (n,), w, 1e-6)
        return F.silu(y) if silu else y
    outs, refs = tt.simulate(k, dy, x, w), _autograd(fn, dy, x, w)
    if n == 1:
        # One element a row: dx = rstd·g·w·eps/(x² + eps) is a cancellation to almost 0, so
        # its error is measured against the size of the terms, rstd·|g·w|.
        scale = (dy.double() * w.double() / x.double().abs()).norm()
        assert (outs[0].double() - refs[0]).norm() <= TOL[dtype] * scale
        outs, refs = outs[1:], refs[1:]
    _assert_rel(outs, refs, dtype, f"rms_norm_backward silu={silu}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,dtype,m,forced", CASES, ids=str)
def test_layer_norm_backward(target, n, dtype, m, forced):
    x, w, b, dy = _inputs(n, dtype, m, 4)
    k = _jit(target, layernorm.layer_norm_backward_program, 3)(n, dtype_name(dtype), 1e-5,
                                                               *_plan(n, dtype, forced, True), 4)
    refs = _autograd(lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5), dy, x, w, b)
    if n == 1:  # one element a row: xh = 0, so dx and dw are exactly 0 (no relative error)
        dx, dw, db = tt.simulate(k, dy, x, w)
        assert torch.equal(dx, torch.zeros_like(dx)) and torch.equal(dw, torch.zeros_like(dw))
        _assert_rel([db], refs[2:], dtype, "layer_norm_backward db")
        return
    _assert_rel(tt.simulate(k, dy, x, w), refs, dtype, "layer_norm_backward")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,dtype,m,forced", CASES[1:], ids=str)
def test_softmax_backward(target, n, dtype, m, forced):
    x, _, _, dy = _inputs(n, dtype, m, 5)
    y = torch.softmax(x.float(), -1).to(dtype)
    k = _jit(target, softmax_mod.softmax_backward_program)(n, dtype_name(dtype), *_plan(n, dtype, forced))
    yd = y.double()
    ref = yd * (dy.double() - (dy.double() * yd).sum(-1, keepdim=True))
    _assert_rel([tt.simulate(k, dy, y)], [ref], dtype, "softmax_backward")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,dtype,m", [(1, torch.float16, 300), (13, torch.float32, 29), (300, torch.bfloat16, 70),
                                       (37, torch.float16, 1)])
def test_column_sum(target, n, dtype, m):
    x = _inputs(n, dtype, m, 6)[0]
    plan = reduce_mod.plan_column_sum(n, torch.finfo(dtype).bits // 8, m, sms=4)
    k = _jit(target, reduce_mod.column_sum_program)(n, dtype_name(dtype), *plan)
    assert k.num_kernels == 2
    _assert_rel([tt.simulate(k, x)], [x.double().sum(0)], dtype, f"column_sum plan={plan}")


def test_column_sum_spreads_rows_over_blocks():
    plan = reduce_mod.plan_column_sum(4096, 2, 32768, sms=132)
    assert plan == (32, 256, 256, 33)  # 16 strips x 33 row blocks cover 132 SMs four times
    assert reduce_mod.plan_column_sum(4096, 2, 20, sms=132)[3] == 1  # no more than the row tiles
    assert reduce_mod.plan_column_sum(4096, 2, 100, sms=132)[3] == 4


# ------------------------------------------------------------------ plans and errors


@pytest.mark.parametrize("n", [1, 7, 13, 1000, 4100, 4096, 32768, 65536, 100003])
def test_every_hidden_size_has_a_plan_that_covers_it(n):
    check_hidden("op", "x", n)
    for elem in (2, 4):
        for plan in (plan_rows(n, elem), plan_backward_rows(n, elem)):
            assert plan.n_pad * plan.chunks >= n and plan.threads <= 1024
            assert plan.threads == plan.blk_m * plan.threads_per_row
            if plan.chunks > 1:
                assert plan.blk_m == 1 and n > plan.n_pad * (plan.chunks - 1)
    assert (plan_rows(n, 2).chunks > 1) == (n > 16384)
    assert (plan_backward_rows(n, 2).chunks > 1) == (n > 8192)


def test_persistent_grid():
    assert persistent_grid(132, 256, 10 ** 6, 1) == 264
    assert persistent_grid(132, 512, 10 ** 6, 1) == 132
    assert persistent_grid(132, 256, 5, 1) == 8      # a power of two at least the row groups
    assert persistent_grid(132, 256, 1000, 4) == 256


def test_programs_refuse_a_plan_that_does_not_cover_the_row():
    with pytest.raises(ValueError, match=r"rms_norm_program: 1 chunk\(s\) of n_pad=64 columns do not cover"):
        rmsnorm.rms_norm_program(100, "float16", 1e-6, False, 1, 32, 64)


def test_backward_argument_errors():
    x, w, b, dy = _inputs(64, torch.float16, 4, 7)
    with pytest.raises(ValueError, match=r"rms_norm_backward: x must be a CUDA tensor"):
        rmsnorm.rms_norm_backward(dy, x, w, 1e-6)
    with pytest.raises(ValueError, match=r"rms_norm_backward: dy must have the dtype and shape \(4, 64\)"):
        rmsnorm.rms_norm_backward(dy[:, :32], x, w, 1e-6)
    with pytest.raises(ValueError, match=r"rms_norm_backward: weight must have the dtype of x and shape \(64,\)"):
        rmsnorm.rms_norm_backward(dy, x, w.float(), 1e-6)
    with pytest.raises(ValueError, match=r"rms_norm_backward: eps"):
        rmsnorm.rms_norm_backward(dy, x, w, -1.0)
    with pytest.raises(ValueError, match=r"layer_norm_backward: bias must have the dtype of x and shape"):
        layernorm.layer_norm_backward(dy, x, w, b[:8], 1e-5)
    with pytest.raises(TypeError, match=r"layer_norm_backward: bias must be a torch.Tensor"):
        layernorm.layer_norm_backward(dy, x, w, None, 1e-5)
    with pytest.raises(ValueError, match=r"softmax_backward: dy must have the dtype and shape .* of y"):
        softmax_mod.softmax_backward(dy.float(), x)
    with pytest.raises(ValueError, match=r"softmax_backward: y must be a CUDA tensor"):
        softmax_mod.softmax_backward(dy, x)
    with pytest.raises(ValueError, match=r"column_sum: x must be a CUDA tensor"):
        reduce_mod.column_sum(x)
    with pytest.raises(ValueError, match=r"column_sum: x must be a tensor of float16"):
        reduce_mod.column_sum(x.int())


# ------------------------------------------------------------------ compile checks


@pytest.mark.parametrize("n", [13, 1002, 1004, 4100, 65536, 100003])
def test_backward_kernels_compile_at_real_sizes(n, monkeypatch):
    monkeypatch.setenv("TEGULA_TARGET", "sm_90a")
    for dtype in (torch.float16, torch.float32):
        plan = plan_backward_rows(n, torch.finfo(dtype).bits // 8)
        grid = persistent_grid(132, plan.threads, 1 << 20, plan.blk_m)
        kernels = [rmsnorm.backward_kernel_for(n, dtype, 1e-6, True, grid),
                   layernorm.backward_kernel_for(n, dtype, 1e-5, grid), softmax_mod.backward_kernel_for(n, dtype),
                   rmsnorm.kernel_for(n, dtype, 1e-6), softmax_mod.kernel_for(n, dtype)]
        assert [k.num_kernels for k in kernels] == [2, 3, 1, 1, 1]
        assert all(len(k.cubin(i)) > 0 for k in kernels for i in range(k.num_kernels))
        if plan.chunks > 1:
            assert "for (int c" in kernels[0].get_kernel_source()


@pytest.mark.parametrize("n", [4096, 8192, 12288, 16384, 32768, 65536])
def test_row_kernels_fit_their_registers(n, monkeypatch):
    """Every forward and backward row kernel at the sizes models use: no plan whose
    fragments exceed the register budget (no RegisterPressureWarning, every T.Kernel's
    peak within budget, whether or not an earlier test compiled it already), and no spill
    in what ptxas made of the row kernel (zero stack). 32768 used to take 1024 threads x
    32 elements a thread, which spilled; now it is walked in chunks."""
    monkeypatch.setenv("TEGULA_TARGET", "sm_90a")
    with warnings.catch_warnings():
        warnings.simplefilter("error", tegula.RegisterPressureWarning)
        for dtype in (torch.float16, torch.float32):
            grid = persistent_grid(132, 512, 1 << 20, 1)
            kernels = [rmsnorm.kernel_for(n, dtype, 1e-6), rmsnorm.kernel_for(n, dtype, 1e-6, True),
                       layernorm.kernel_for(n, dtype, 1e-5), softmax_mod.kernel_for(n, dtype),
                       reduce_mod.kernel_for(n, dtype, "sum"), reduce_mod.kernel_for(n, dtype, "max"),
                       rmsnorm.backward_kernel_for(n, dtype, 1e-6, False, grid),
                       rmsnorm.backward_kernel_for(n, dtype, 1e-6, True, grid),
                       layernorm.backward_kernel_for(n, dtype, 1e-5, grid), softmax_mod.backward_kernel_for(n, dtype)]
            for k in kernels:
                for i in range(k.num_kernels):
                    usage = k.register_usage(i)
                    assert usage is not None and not usage.over_budget, str(usage)
                (regs, stack), = compiled_resources(k.cubin(0)).values()
                assert stack == 0, f"{k.prim_func.name} N={n} {dtype}: ptxas spilled ({regs} registers, {stack} B stack)"


def test_wide_backward_plans_keep_12288_in_registers():
    """Rows of 12288 stay in registers in the backward where the kernel's fragments fit 512
    threads × 24 elements (4 float32 registers an element): rms_norm in both dtypes,
    layer_norm in float16; layer_norm in float32 (5 an element) is walked in chunks."""
    for dtype in (torch.float16, torch.float32):
        plan = plan_backward_rows(12288, torch.finfo(dtype).bits // 8, rmsnorm.BACKWARD_REGISTERS_PER_ELEMENT)
        assert (plan.threads, plan.per_thread, plan.chunks) == (512, 24, 1)
    assert layernorm._backward_plan(12288, torch.float16).chunks == 1
    assert layernorm._backward_plan(12288, torch.float32).chunks == 2
    assert plan_backward_rows(16384, 2, 4).chunks == 2  # 32 elements a thread would not fit
    assert plan_rows(16384, 2).chunks == 1 and plan_rows(16392, 2).chunks == 3 and plan_rows(32768, 4).chunks == 4


@pytest.mark.parametrize("n,widest", [(4096, "Vec<half_t, 8>"), (1004, "Vec<half_t, 4>"), (1002, "Vec<half_t, 2>"),
                                      (13, None)])
def test_row_starts_off_16_bytes_take_narrower_accesses(n, widest, monkeypatch):
    """Rows of N halves start on a 16-byte boundary only when 8 divides N: the copies are
    vectorised as wide as N allows, and element-wise for odd N."""
    monkeypatch.setenv("TEGULA_TARGET", "sm_90a")
    src = rmsnorm.kernel_for(n, torch.float16, 1e-6).get_kernel_source()
    order = ["Vec<half_t, 8>", "Vec<half_t, 4>", "Vec<half_t, 2>"]
    wider = order[:order.index(widest)] if widest else order
    assert all(v not in src for v in wider)
    assert widest is None or widest in src
