"""Integer constants over the whole range of their dtype: int8 .. int64, uint8 .. uint64 (up to
2**64 - 1) and bool, as T.alloc_var initial values, stores, T.cast and operands, printed as
literals of exactly their type, compiled by NVRTC, and evaluated by tegula.testing.reference
and .simulate as far as their float64 values can hold them. A value past the dtype's range is
the user's error at its line, naming the value and the dtype; no pybind11 text reaches the user.
tests/python/gpu/test_int_constants_gpu.py runs the extremes on a GPU.
"""
import inspect

import pytest
import torch

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402
import tegula.testing as tt  # noqa: E402
from int_constant_programs import RANGES, extremes_program  # noqa: E402

# The literal each extreme prints as: no literal past its type, unsigned ones suffixed.
LITERALS = {
    "int8": ("-128", "127"), "int16": ("-32768", "32767"),
    "int32": ("(-2147483647 - 1)", "2147483647"), "int64": ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
    "uint8": ("0", "255"), "uint16": ("0", "65535"), "uint32": ("0u", "4294967295u"),
    "uint64": ("0ull", "18446744073709551615ull"), "bool": ("false", "true"),
}
# Extremes a float64 holds exactly; the others (2**63 - 1, 2**64 - 1) are checked as float64.
EXACT = {dt: [v for v in RANGES[dt] if float(v) == v] for dt in RANGES}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", sorted(RANGES))
def test_extremes_compile_and_evaluate(dtype, target):
    lo, hi = RANGES[dtype]
    kernel = tegula.compile(extremes_program(dtype), target=target)
    src = kernel.get_kernel_source()
    for literal in LITERALS[dtype]:
        assert f"= {literal};" in src, (literal, src)
    assert kernel.cubin()[:4] == b"\x7fELF"
    torch_dtype = getattr(torch, dtype)
    for run in (tt.reference, tt.simulate):
        a = torch.zeros(6, dtype=torch_dtype)
        f = torch.zeros(2, dtype=torch.float64)
        run(kernel, a, f)
        got = a.tolist()
        want = [lo, hi, hi, lo, lo, hi]
        for i, w in enumerate(want):
            if w in EXACT[dtype]:
                assert got[i] == w, (run.__name__, i, got)
        assert f.tolist() == [float(hi), float(lo)], (run.__name__, f)


def test_uint64_constant_keeps_its_value_in_the_ir():
    @T.prim_func
    def k(A: T.Tensor((1,), "uint64")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = T.uint64(2**64 - 1) // T.uint64(3)

    kernel = tegula.compile(k, target="sm_90a")
    # Folded as unsigned: (2**64 - 1) // 3, not -1 // 3.
    assert f"= {(2**64 - 1) // 3}ull;" in kernel.get_kernel_source()
    assert "A[0] = uint64(18446744073709551615)//uint64(3)" in kernel.get_ir("input")


# ---------------------------------------------------------------- out of range


def out_of_range_program(form, dtype, value):
    @T.prim_func
    def bad(A: T.Tensor((2,), dtype)):
        with T.Kernel(1, threads=32) as bx:
            v = T.alloc_var(dtype)
            v = 1
            if form == "init":
                w = T.alloc_var(dtype, init=value)  # MARK-init
                A[1] = w
            elif form == "store":
                A[0] = value  # MARK-store
            elif form == "cast":
                A[0] = T.cast(value, dtype)  # MARK-cast
            elif form == "call":
                A[0] = getattr(T, dtype)(value)  # MARK-call
            else:
                A[0] = v + value  # MARK-operand

    return bad


def _mark_line(form):
    lines, first = inspect.getsourcelines(out_of_range_program)
    return first + next(i for i, line in enumerate(lines) if f"# MARK-{form}" in line)


CASES = [(dt, v) for dt, (lo, hi) in sorted(RANGES.items()) if dt != "bool" for v in (lo - 1, hi + 1)]


@pytest.mark.parametrize("form", ["init", "store", "cast", "call", "operand"])
@pytest.mark.parametrize("dtype,value", CASES)
def test_a_constant_past_its_range_is_an_error_at_its_line(form, dtype, value):
    if form == "operand" and dtype in ("int32", "int64") and -(2**63) <= value < 2**63:
        # A number meeting an index type keeps its value (a size past 2**31 meets int32
        # indices, cuda_printer.h's kIndex32Limit); it is the int64 range that is checked.
        tegula.compile(out_of_range_program(form, dtype, value), target="sm_90a")
        return
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(out_of_range_program(form, dtype, value), target="sm_90a")
    err = info.value
    assert err.line == _mark_line(form), str(err)
    assert f"the constant {value} is out of the range of {dtype}" in err.message, err.message
    assert "incompatible function arguments" not in str(err)


@pytest.mark.parametrize("value", [float("inf"), float("nan")])
def test_a_float_that_is_no_integer_is_an_error_for_an_integer_dtype(value):
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(out_of_range_program("cast", "int32", value), target="sm_90a")
    assert info.value.line == _mark_line("cast")
    assert f"{value} cannot be converted to int32" in info.value.message


def huge_operand_program():
    @T.prim_func
    def huge(A: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            A[0] = T.cast(T.max(bx, 2**64 - 1), "float32")  # MARK-huge

    return huge


def test_a_number_past_int64_meeting_an_index_is_an_error_at_its_line():
    with pytest.raises(tegula.TegulaCompileError) as info:
        huge_operand_program()
    lines, first = inspect.getsourcelines(huge_operand_program)
    assert info.value.line == first + next(i for i, line in enumerate(lines) if "# MARK-huge" in line)
    assert f"the constant {2**64 - 1} is out of the range of int32" in info.value.message


def test_the_ir_builder_checks_its_constants():
    from tegula import env

    C = env.native()
    assert C.ir.int_imm(2**64 - 1, "uint64").const == 2**64 - 1
    assert C.ir.int_imm(-(2**63), "int64").const == -(2**63)
    for value, dtype in [(2**64, "uint64"), (-1, "uint64"), (2**63, "int64"), (256, "uint8"), (-129, "int8"),
                         (2**32, "uint32")]:
        with pytest.raises(C.CompileError) as info:
            C.ir.int_imm(value, dtype)
        assert f"the constant {value} is out of the range of {dtype}" in str(info.value)
    with pytest.raises(C.CompileError) as info:
        C.ir.int_imm("3", "int32")
    assert "must be a Python int, got str" in str(info.value)


def test_a_misused_ir_builder_is_reported_as_ours_without_its_signatures():
    from tegula import env
    from tegula.frontend.evaluator import _binding_misuse

    try:
        env.native().ir.var(3, ["int32"])
    except TypeError as err:
        message = _binding_misuse(err)
    assert message.startswith("internal error: Tegula's frontend called var() of its IR builder"), message
    assert "(3, ['int32'])" in message and "supported" not in message and "->" not in message, message
    assert _binding_misuse(TypeError("something else")) is None
