"""T.reinterpret and the explicit-width accesses (T.ldg32 ... T.stg256, T.lds / T.sts):
the reference and the simulator agree with torch, the source calls the device library's
load_global_64-style functions (the unaligned form where the offset is not provably
aligned), and bad arguments are errors at the DSL line naming them."""
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import helpers  # noqa: E402
import ldst_programs as lp  # noqa: E402

RUNS = pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
WIDTHS = [(32, "float32"), (64, "float32"), (128, "float32"), (256, "float32"), (64, "float16"),
          (128, "bfloat16"), (32, "float16")]


def _rand(n, dtype, seed):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(getattr(torch, dtype))


@RUNS
@pytest.mark.parametrize("bits,dtype", WIDTHS)
@pytest.mark.parametrize("N", [128, 130])
@pytest.mark.parametrize("pred_half", [False, True])
def test_a_load_reinterpreted_and_stored_into_a_slice(run, bits, dtype, N, pred_half):
    k = tegula.compile(lp.copy_program(N, bits, dtype, pred_half), target="sm_90a")
    x, y = _rand(N, dtype, N + bits), torch.full((N,), 7.0).to(getattr(torch, dtype))
    run(k, x, y)
    n = bits // (8 * x.element_size())
    blocks = (N + n - 1) // n
    want = torch.zeros_like(x)
    loaded = (blocks // 2 if pred_half else blocks) * n
    full = N // n * n  # a block past the end loads nothing (0) and stores nothing
    want[:min(loaded, full)] = x[:min(loaded, full)]
    want[full:] = 7.0
    assert torch.equal(y, want)


@RUNS
@pytest.mark.parametrize("bits", [32, 64, 128, 256])
@pytest.mark.parametrize("pred_half", [False, True])
def test_explicit_stores(run, bits, pred_half):
    N = 256
    k = tegula.compile(lp.store_program(N, bits, "float32", pred_half), target="sm_90a")
    x, y = _rand(N, "float32", bits), torch.full((N,), 7.0)
    run(k, x, y)
    want = x.clone()
    if pred_half:
        want[N // 2:] = 7.0
    assert torch.equal(y, want)


@pytest.mark.parametrize("run", [tt.simulate], ids=["simulate"])  # the reference runs no thread index
@pytest.mark.parametrize("bits,dtype", [(32, "float32"), (64, "float32"), (128, "float32"), (128, "float16")])
def test_shared_loads_and_stores(run, bits, dtype):
    N = 256
    k = tegula.compile(lp.shared_program(N, bits, dtype), target="sm_90a")
    x, y = _rand(N, dtype, 3), torch.zeros(N).to(getattr(torch, dtype))
    run(k, x, y)
    n = bits // (8 * x.element_size())
    assert torch.equal(y, x.view(-1, n).flip(0).reshape(-1))


@RUNS
def test_bit_tricks(run):
    N = 64
    k = tegula.compile(lp.bits_program(N), target="sm_90a")
    a = _rand(N, "float32", 5)
    a[0], a[1] = 0.0, -0.0
    e = torch.arange(-30, 34, dtype=torch.int32)
    b, c, h = torch.zeros(N, dtype=torch.int64), torch.zeros(N), torch.zeros(N, dtype=torch.int32)
    b, h = torch.zeros(N, dtype=torch.uint32), torch.zeros(N, dtype=torch.uint16)
    run(k, a, e, b, c, h)
    assert torch.equal(b.view(torch.int32), a.view(torch.int32))
    assert torch.equal(c, torch.pow(2.0, e.double()).float())
    assert torch.equal(h.view(torch.int16), a.half().view(torch.int16))


@RUNS
@pytest.mark.parametrize("k_off", [0, 1, 2, 3])
def test_an_offset_not_provably_aligned(run, k_off):
    N = 64
    k = tegula.compile(lp.offset_program(N), target="sm_90a")
    x, y = _rand(N, "float32", 9), torch.full((N,), 5.0)
    run(k, x, y, k_off)
    m = N - 2
    # k_off = 3: the last pair runs past the edge and is masked whole (reads 0).
    whole = m if k_off + m <= N else m - 2
    assert torch.equal(y[:whole], x[k_off:k_off + whole])
    assert torch.equal(y[whole:m], torch.zeros(m - whole))


def test_the_source_calls_the_device_library():
    src = tegula.compile(lp.copy_program(128, 128), target="sm_90a").get_kernel_source()
    assert "load_global_128(&X[" in src and "reinterpret<Vec<float, 4>>" in src
    assert "_unaligned" not in src
    src = tegula.compile(lp.copy_program(128, 64, pred_half=True), target="sm_90a").get_kernel_source()
    assert "load_global_64_conditional(" in src
    src = tegula.compile(lp.store_program(128, 64, pred_half=True), target="sm_90a").get_kernel_source()
    assert "store_global_64_conditional(" in src
    src = tegula.compile(lp.shared_program(256, 64), target="sm_90a").get_kernel_source()
    assert "store_shared_64(" in src and "load_shared_64(" in src
    # An offset the compiler cannot prove a multiple of 8 bytes: the form that checks at run time.
    src = tegula.compile(lp.offset_program(64), target="sm_90a").get_kernel_source()
    assert "load_global_64_unaligned_conditional(" in src  # conditional: the access is masked at the edge


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a", "sm_100a"])
def test_nvrtc_compiles_every_width(arch):
    """NVRTC (no GPU needed) builds every form: 32-byte accesses are one instruction on
    sm_100a and two 16-byte ones before it."""
    programs = [lp.store_program(128, bits, pred_half=True) for bits in (32, 64, 128, 256)]
    programs += [lp.shared_program(256, 128), lp.offset_program(64), lp.bits_program(64),
                 lp.copy_program(130, 64, "float16", True)]
    for prog in programs:
        assert len(tegula.compile(prog, target=arch).cubin()) > 0


def _compile_error(body):
    """The error of a kernel whose block is `body`, parsed from a file of its own (the
    error names that file's line)."""
    src = f'''
import tegula.language as T

@T.prim_func
def f(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
    with T.Kernel(32, threads=32) as i:
        {body}
'''
    path = helpers.source_file(f"ldst_bad_{abs(hash(body))}", src)
    with pytest.raises(tegula.TegulaCompileError) as info:
        exec(compile(src, path, "exec"), {})
    return info.value


@pytest.mark.parametrize("body,match,arg", [
    ("Y[i] = T.reinterpret(T.ldg64(X[i * 4: i * 4 + 4]), T.float32x2)", "T.ldg64 moves 8 bytes, but 'X[...]' names "
     "4 float32 element(s), 16 bytes: give 2", "X[i * 4"),
    ("Y[i] = T.reinterpret(X[i], T.float16)", "T.reinterpret: float16 (16 bits) has not the width", "T.float16"),
    ("T.stg64(Y[i * 2: i * 2 + 2], X[i])", "stores 64 bits, but the value is a float32", "X[i])"),
    ("T.lds32(X[i])", "'X' is a global buffer; T.lds32 accesses shared memory", "X[i]"),
    ("T.stg32(Y[i * 2: i * 2 + 2], T.ldg64(X[i * 2: i * 2 + 2]))", "T.stg32 moves 4 bytes", "Y[i * 2"),
    ("Y[i * 2: i * 2 + 4] = T.reinterpret(T.ldg64(X[i * 2: i * 2 + 2]), T.float32x2)", "has 2 lanes", "Y[i * 2"),
    ("Y[i] = T.ldg64(X[i * 2: i * 2 + 2]) + 1", "vector value", "T.ldg64"),
    ("Y[i] = T.reinterpret(X[i], \"float32x3\")", "float32x3 (96 bits) has not the width", "\"float32x3\""),
])
def test_bad_arguments_are_errors_at_the_argument(body, match, arg):
    err = _compile_error(body)
    assert match in str(err), str(err)
    assert err.source_line.strip() == body
    # The caret is under the argument named.
    assert err.source_line[err.col - 1:].startswith(arg), (err.col, err.source_line)


def test_vector_dtypes():
    assert T.float32x4.lanes == 4 and T.float32x4.bits == 128 and T.uint32x8.bits == 256
    assert str(T.uint32x2) == "uint32x2"
    with pytest.raises(ValueError):  # vectors are values only: a tensor of them is refused
        T.Tensor((4,), "float32x2")


@RUNS
@pytest.mark.parametrize("bits,dtype", [(32, "float32"), (64, "float32"), (128, "float16")])
def test_shared_loads_and_stores_in_one_thread(run, bits, dtype):
    N = 64
    k = tegula.compile(lp.shared_serial_program(N, bits, dtype), target="sm_90a")
    x, y = _rand(N, dtype, 4), torch.zeros(N).to(getattr(torch, dtype))
    run(k, x, y)
    n = bits // (8 * x.element_size())
    assert torch.equal(y, x.view(-1, n).flip(0).reshape(-1))


@RUNS
def test_not_of_an_unsigned_value(run):
    """`~bits & 0xFFFF` on a uint16 (TileLang's topk example): all ones of the type."""

    @T.prim_func
    def f(A: T.Tensor((8,), "float32"), H: T.Tensor((8,), "uint16")):
        with T.Kernel(8, threads=32) as i:
            h = T.reinterpret(T.cast(A[i], T.float16), T.uint16)
            H[i] = T.if_then_else(A[i] < 0, ~h & 0xFFFF, h | 0x8000) >> 8

    k = tegula.compile(f, target="sm_90a")
    a = torch.tensor([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0, -7.0, 100.0])
    h = torch.zeros(8, dtype=torch.uint16)
    run(k, a, h)
    bits = a.half().view(torch.int16).int() & 0xFFFF
    want = torch.where(a < 0, ~bits & 0xFFFF, bits | 0x8000) >> 8
    assert torch.equal(h.int(), want)
