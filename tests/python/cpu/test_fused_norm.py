"""The fused residual add + RMSNorm (tegula.kernels.fused_norm) without a GPU: it compiles
for sm_80 and sm_90a with 16-byte accesses and no stack at Llama's hidden size; its lowered
code, simulated thread by thread (and the program interpreted as written), gives h equal
to torch's x + residual bit for bit and y = F.rms_norm(h) on ragged, short, chunked and
in-place rows, with NaN and inf propagating as in torch; the entry point names a bad
argument."""
import importlib
import re

import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

import tegula.testing as tt  # noqa: E402
from tegula import registers  # noqa: E402
from tegula.kernels._common import RowPlan, dtype_name, plan_rows  # noqa: E402

FN = importlib.import_module("tegula.kernels.fused_norm")
F = torch.nn.functional

EPS = 1e-6
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}


def compiled(n, dtype, inplace, target="sm_90a", plan=None):
    p = plan or FN.plan(n, dtype)
    program = FN.add_rms_norm_program(n, dtype_name(dtype), EPS, inplace, p.blk_m, p.threads, p.n_pad, p.chunks)
    return tegula.compile(program, target=target)


def reference(x, r, w):
    """torch's unfused code: h = x + residual in the dtype, then F.rms_norm of h in float32."""
    h = x + r
    return F.rms_norm(h.float(), (x.shape[-1],), w.float(), EPS), h


def run(kernel, x, r, w, inplace, interpret=False):
    """(y, h) from the simulated (or interpreted) kernel, outputs starting as NaN."""
    run_with = tt.reference if interpret else tt.simulate
    y = torch.full_like(x, float("nan"))
    if inplace:
        h = r.clone()
        run_with(kernel, x, h, w, y)
    else:
        h = torch.full_like(x, float("nan"))
        run_with(kernel, x, r, w, y, h)
    return y, h


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("inplace", [False, True])
def test_compiles_with_16_byte_accesses_and_no_stack(target, inplace):
    kernel = compiled(4096, torch.bfloat16, inplace, target)
    src = kernel.get_kernel_source()
    written = ("R", "Y") if inplace else ("H", "Y")
    for name in ("X", "R") + written:
        accesses = re.findall(rf"Vec<bfloat16_t, (\d+)>\*>\(&{name}\[", src)
        assert accesses and set(accesses) == {"8"}, f"{name}: accesses of {accesses} elements"
    (regs, stack), = registers.compiled_resources(kernel.cubin()).values()
    assert stack == 0


def test_plan_holds_rows_up_to_16384_in_registers():
    assert FN.plan(4096, torch.bfloat16) == plan_rows(4096, 2)
    assert FN.plan(16384, torch.float16).chunks == 1
    assert FN.plan(32768, torch.bfloat16).chunks == 4
    # float32: x, residual and the working copy are three registers an element.
    assert FN.registers_per_element(4) == 3 and FN.registers_per_element(2) == 2
    for n in (16384, 20000, 32768):
        kernel = compiled(n, torch.float32, False)
        (regs, stack), = registers.compiled_resources(kernel.cubin()).values()
        assert stack == 0, n


SMALL_CHUNKS = RowPlan(blk_m=1, threads=32, n_pad=256, threads_per_row=32, per_thread=8, chunks=3)


@pytest.mark.parametrize("n,plan", [(4096, None), (1000, None), (13, None), (1, None), (600, SMALL_CHUNKS)],
                         ids=["4096", "1000", "13", "1", "600-chunked"])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_name)
def test_simulated_and_reference_match_torch(n, plan, inplace, dtype):
    kernel = compiled(n, dtype, inplace, plan=plan)
    gen = torch.Generator().manual_seed(n * 10 + inplace)
    m = 3
    x = torch.randn(m, n, generator=gen).to(dtype)
    r = (4 * torch.randn(m, n, generator=gen)).to(dtype)
    w = (1 + 0.1 * torch.randn(n, generator=gen)).to(dtype)
    y_ref, h_ref = reference(x, r, w)
    for interpret in (False, True):
        y, h = run(kernel, x, r, w, inplace, interpret)
        assert torch.equal(h, h_ref), "h differs from torch's x + residual"
        assert rel_err(y, y_ref) <= TOL[dtype]


def test_nan_and_inf_propagate_as_in_torch():
    n = 64
    kernel = compiled(n, torch.float16, False)
    x = torch.randn(4, n).half()
    r = torch.randn(4, n).half()
    x[1, 3] = float("nan")
    x[2, 7] = float("inf")
    x[3, 0], r[3, 0] = 10000.0, 60000.0   # h overflows float16 to inf, as torch's x + r does
    w = torch.ones(n).half()
    y, h = run(kernel, x, r, w, False)
    y_ref, h_ref = reference(x, r, w)
    assert torch.equal(h.isnan(), h_ref.isnan()) and torch.equal(h.isinf(), h_ref.isinf())
    torch.testing.assert_close(y.float(), y_ref, equal_nan=True, rtol=2e-3, atol=2e-3)
    assert torch.isnan(y[1]).all() and torch.isinf(h[3, 0])
    assert not torch.isnan(y[0]).any()


x16 = torch.randn(4, 64).half()
w16 = torch.ones(64).half()

ERRORS = {
    "x-None": (lambda: FN.add_rms_norm(None, x16, w16), TypeError, r"add_rms_norm: x must be a torch\.Tensor"),
    "x-int": (lambda: FN.add_rms_norm(x16.int(), x16, w16), ValueError, r"add_rms_norm: x must be a tensor of float16"),
    "residual-dtype": (lambda: FN.add_rms_norm(x16, x16.bfloat16(), w16), ValueError,
                       r"add_rms_norm: residual must be a float16 tensor"),
    "residual-shape": (lambda: FN.add_rms_norm(x16, x16[:2], w16), ValueError,
                       r"add_rms_norm: residual must have the shape \(4, 64\) of x"),
    "weight-dtype": (lambda: FN.add_rms_norm(x16, x16, w16.float()), ValueError,
                     r"add_rms_norm: weight must be a float16 tensor"),
    "weight-shape": (lambda: FN.add_rms_norm(x16, x16, w16[:32]), ValueError,
                     r"add_rms_norm: weight must have shape \(64,\)"),
    "scalar": (lambda: FN.add_rms_norm(x16[0, 0], x16[0, 0], w16), ValueError,
               r"add_rms_norm: x must have at least one dimension"),
    "eps": (lambda: FN.add_rms_norm(x16, x16, w16, eps=-1.0), ValueError, r"add_rms_norm: eps"),
    "inplace": (lambda: FN.add_rms_norm(x16, x16, w16, inplace=1), TypeError, r"add_rms_norm: inplace must be a bool"),
    "cpu": (lambda: FN.add_rms_norm(x16, x16, w16), ValueError, r"add_rms_norm: x must be a CUDA tensor"),
    "grad": (lambda: FN.add_rms_norm(x16, x16.clone().requires_grad_(), w16), RuntimeError,
             r"add_rms_norm: residual requires grad, but add_rms_norm has no backward yet"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_argument_errors_name_the_argument(name):
    fn, exc, pattern = ERRORS[name]
    with pytest.raises(exc, match=pattern):
        fn()
