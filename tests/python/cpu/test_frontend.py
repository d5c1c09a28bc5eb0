"""The frontend without a GPU: kernels parsed to IR text, folding of Python values,
dynamic shapes, and compile errors that point at the user's line and column.

Parsing builds real IR through `tegula._C.ir`, so those tests skip (saying why) until the
extension is built; the pure-Python pieces (pass configs, dtypes, targets) always run.
"""
import importlib.util
import re
import textwrap

import pytest
import torch

import tegula
import tegula.language as T
from tegula import env, transform
from tegula.frontend.dtypes import normalize_dtype

try:
    import tegula._C  # noqa: F401

    _NO_C = None
except ImportError as err:
    _NO_C = f"tegula._C is not built ({err}); run `pip install --no-build-isolation -e .` first"

needs_c = pytest.mark.skipif(_NO_C is not None, reason=_NO_C or "")

with open(__file__, encoding="utf-8") as _f:
    _LINES = _f.read().splitlines()


def flat(text: str) -> str:
    """IR text without spaces, so checks do not depend on the printer's spacing."""
    return text.replace(" ", "")


def where(marker: str) -> tuple[int, int]:
    """(line, 1-based column) of the one line of this file that contains `marker`
    (the assertion naming the marker aside)."""
    hits = [(n, line.index(marker) + 1) for n, line in enumerate(_LINES, 1)
            if marker in line and "assert_points_at(" not in line]
    assert len(hits) == 1, f"marker {marker!r} must occur once in this file, found {len(hits)}"
    return hits[0]


def assert_points_at(err: tegula.TegulaCompileError, marker: str, message: str) -> None:
    line, col = where(marker)
    text = str(err)
    assert err.file == __file__
    assert (err.line, err.col) == (line, col), text
    head, source, caret = text.splitlines()[:3]
    assert head.startswith(f"{__file__}:{line}:{col}: ") and message in head, text
    assert source == _LINES[line - 1]
    assert caret == " " * (col - 1) + "^", text


# ---- pure Python: always run ----

def test_import_as_tilelang_exposes_the_language():
    import tegula as tilelang

    assert tilelang.language is T
    for name in ("prim_func", "Kernel", "Tensor", "copy", "gemm", "Parallel", "Pipelined", "reduce_sum",
                 "alloc_shared", "alloc_fragment", "ceildiv", "dynamic", "symbolic", "GemmWarpPolicy"):
        assert hasattr(T, name), name
    assert T.layout.make_swizzled_layout is tilelang.layout.make_swizzled_layout
    assert tilelang.transform.PassConfigKey is tilelang.PassConfigKey


@pytest.mark.parametrize("spelling, canonical", [
    (T.float16, "float16"), ("half", "float16"), (torch.bfloat16, "bfloat16"), ("float", "float32"),
    (T.float, "float32"), (torch.int8, "int8"), (T.uint32, "uint32"), (bool, "bool")])
def test_dtype_spellings_normalize(spelling, canonical):
    assert normalize_dtype(spelling) == canonical


def test_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="'floaty'"):
        normalize_dtype("floaty")


def test_pass_configs_translate_and_unknown_keys_are_named():
    key = tegula.PassConfigKey
    assert transform.to_options({key.TL_ENABLE_FAST_MATH: True, "tir.disable_vectorize": 1}) == {
        "fast_math": True, "disable_vectorize": True}
    assert transform.to_options({"tl.disable_fast_math": True}) == {"fast_math": False}
    assert transform.to_options({key.TL_DISABLE_TMA_LOWER: True}) == {"disable_tma": True}
    assert transform.to_options({"tl.disable_warp_specialized": 1}) == {"disable_warp_specialized": True}
    assert transform.to_options({key.TL_DISABLE_VECTORIZE_256: True}) == {}  # accepted, no effect
    assert "no-op" in transform.describe(key.TL_DISABLE_VECTORIZE_256)
    with pytest.raises(ValueError, match=r"'tl\.no_such_key'.*tl\.enable_fast_math"):
        transform.to_options({"tl.no_such_key": True})
    with pytest.raises(ValueError, match="32-bit"):
        transform.to_options({key.TL_CONFIG_INDEX_BITWIDTH: 64})


def test_targets_parse(monkeypatch):
    assert env.parse_target("sm_80") == "sm_80"
    assert env.parse_target("cuda -arch=sm_90") == "sm_90"
    assert env.parse_target("cuda -arch=sm_90a") == "sm_90a"
    with pytest.raises(ValueError, match="unknown target 'rocm'"):
        env.parse_target("rocm")
    monkeypatch.setenv("TEGULA_TARGET", "sm_100a")
    assert env.resolve_target("auto") == ("sm_100a", False)


def test_python_math_folds():
    assert T.ceildiv(1000, 128) == 8
    assert T.max(2, 3) == 3 and T.min(2.5, 1) == 1
    assert T.if_then_else(True, 1, 2) == 1


# ---- parsing: needs tegula._C ----

def elementwise(M, N, flag, block=128):
    @T.prim_func
    def add_one(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), T.float16)):
        with T.Kernel(T.ceildiv(N, block), M, threads=block) as (bx, by):
            for i in T.Parallel(block):
                if flag:
                    B[by, bx * block + i] = A[by, bx * block + i] + 777
                else:
                    # Never parsed when flag is True: the name does not exist.
                    B[by, bx * block + i] = A[by, bx * block + i] * not_defined_anywhere + 999

    return add_one


@needs_c
def test_elementwise_ir_has_loop_and_store():
    func = elementwise(256, 512, True)
    text = flat(func.script())
    assert "foriinparallel(0,128):" in text, text
    store = re.search(r"^B\[by,bx\*128\+i\]=(.*)$", text, re.M)
    assert store and "A[by,bx*128+i]+" in store.group(1) and "777" in store.group(1), text
    assert [p.name for p in func.params] == ["A", "B"]
    assert func.params[0].shape == (256, 512) and func.params[1].dtype == "float16"


@needs_c
def test_if_on_python_value_keeps_one_branch():
    kept = elementwise(64, 128, True).script()
    assert "777" in kept and "999" not in kept
    with pytest.raises(tegula.TegulaCompileError, match="not_defined_anywhere"):
        elementwise(64, 128, False)


@needs_c
def test_dynamic_shapes_become_kernel_vars():
    m = T.dynamic("m")

    @T.prim_func
    def scale(A: T.Tensor((m, 64), "float32"), B: T.Tensor((m, 64), "float32"), s: T.float32):
        with T.Kernel(T.ceildiv(m, 4), threads=128) as bx:
            for i, j in T.Parallel(4, 64):
                if bx * 4 + i < m:
                    B[bx * 4 + i, j] = A[bx * 4 + i, j] * s

    assert [str(v) for v in scale.dynamic_vars] == ["m"]
    assert scale.params[0].shape[0] is m and scale.params[2].is_scalar
    text = flat(scale.script())
    assert "dynamicm:int32" in text and "s:float32" in text, text


@needs_c
def test_value_read_from_a_buffer_is_a_let_and_index_math_inlines():
    @T.prim_func
    def swap(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.serial(64):
                j = 127 - i
                old = A[i]
                A[i] = A[j]
                A[j] = old

    text = flat(swap.script())
    assert re.search(r"letold\w*=A\[i\]", text), text
    assert "letj" not in text and "A[i]=A[127-i]" in text, text


@needs_c
def test_alloc_var_reads_and_writes_element_zero():
    @T.prim_func
    def count(A: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            n = T.alloc_var("int32", init=0)
            for i in range(128):
                n += A[i]
            A[0] = n

    text = flat(count.script())
    assert "n[0]=n[0]+A[i]" in text and "A[0]=n[0]" in text, text


# ---- errors point at the line and column ----

@needs_c
def test_unknown_name_error_points_at_it():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.Parallel(128):
                    A[i] = A[i] + undefined_scale_factor

    assert_points_at(info.value, "undefined_scale_factor", "name 'undefined_scale_factor' is not defined")


@needs_c
def test_bad_keyword_to_copy_points_at_the_keyword():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.copy(A, B, bogus_kwarg=3)

    assert_points_at(info.value, "bogus_kwarg=3", "T.copy() got an unexpected keyword argument 'bogus_kwarg'")


@needs_c
def test_while_loop_on_a_python_value_is_rejected_at_its_test():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                n = 3
                while n > 0:  # rejected
                    A[0] = 0

    assert_points_at(info.value, "n > 0", "a while loop in a kernel tests a kernel value")


@needs_c
def test_float_fragment_shape_points_at_the_shape():
    block_M = 64
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                acc = T.alloc_fragment((block_M / 2, 4), "float32")

    # The caret is under the offending entry of the shape tuple.
    assert_points_at(info.value, "block_M / 2, 4)", "T.alloc_fragment: shape entries must be ints")
    assert "32.0" in str(info.value)


@needs_c
def test_python_exception_points_at_the_expression():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A[0] = 1 // 0 + 2

    assert_points_at(info.value, "1 // 0", "ZeroDivisionError")


# ---- a TileLang kernel, ported by changing only the imports ----

TILELANG_RMSNORM = '''
import tegula as tilelang
import tegula.language as T


def rms_norm_splitk(M, N, blk_m, blk_k):
    dtype = "float"

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
            A_shared = T.alloc_shared((blk_m, blk_k), dtype)
            A_local = T.alloc_fragment((blk_m, blk_k), dtype)
            A_powsum = T.alloc_fragment((blk_m,), dtype)

            num_k_step = T.ceildiv(N, blk_k)
            T.clear(A_local)
            for k in range(num_k_step):
                T.copy(A[bx * blk_m, k * blk_k], A_shared)
                for i, j in T.Parallel(blk_m, blk_k):
                    A_local[i, j] += A_shared[i, j] * A_shared[i, j]
            T.reduce_sum(A_local, A_powsum, dim=1)
            for i in T.Parallel(blk_m):
                A_powsum[i] = T.rsqrt(A_powsum[i] / N) + 1e-12

            for k in range(num_k_step):
                # reverse, better cache hit rate
                T.copy(A[bx * blk_m, (num_k_step - 1 - k) * blk_k], A_shared)
                for i, j in T.Parallel(blk_m, blk_k):
                    B[bx * blk_m + i, (num_k_step - 1 - k) * blk_k + j] = A_shared[i, j] * A_powsum[i]

    return main


def rms_norm(M, N, blk_m):
    dtype = "float"

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, blk_m), threads=128) as bx:
            A_shared = T.alloc_shared((blk_m, N), dtype)
            A_pow_local = T.alloc_fragment((blk_m, N), dtype)
            A_local = T.alloc_fragment((blk_m, N), dtype)
            A_powsum = T.alloc_fragment((blk_m,), dtype)

            T.copy(A[bx * blk_m:(bx + 1) * blk_m, :], A_shared)
            T.copy(A_shared, A_local)
            for i, j in T.Parallel(blk_m, N):
                A_pow_local[i, j] = A_local[i, j] * A_local[i, j]
            T.reduce_sum(A_pow_local, A_powsum, dim=1)
            for i in T.Parallel(blk_m):
                A_powsum[i] = T.rsqrt(A_powsum[i] / N) + 1e-12
            for i, j in T.Parallel(blk_m, N):
                A_local[i, j] *= A_powsum[i]
            T.copy(A_local, B[bx * blk_m:(bx + 1) * blk_m, :])

    return main
'''


@needs_c
def test_tilelang_rmsnorm_ports_unchanged(tmp_path):
    path = tmp_path / "tilelang_rmsnorm.py"
    path.write_text(textwrap.dedent(TILELANG_RMSNORM))
    spec = importlib.util.spec_from_file_location("tilelang_rmsnorm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    split = flat(module.rms_norm_splitk(1024, 1024, 1, 128).script())
    assert "forkinserial(0,8):" in split and "T.reduce(" in split and "rsqrt(" in split, split
    whole = flat(module.rms_norm(1024, 1024, 1).script())
    # The slice bx*1:(bx+1)*1 has the constant extent 1, folded while parsing.
    assert "T.copy(A[bx:+1,0:+1024]->A_shared[0:+1,0:+1024])" in whole, whole


@needs_c
def test_jit_memoises_on_arguments_and_compiles_for_an_explicit_target():
    calls = []

    @tegula.jit(out_idx=[-1], target="sm_80")
    def add(N, block=128):
        calls.append(N)
        return elementwise(4, N, True, block)

    kernel = add(256)
    assert add(256) is kernel and add(N=256, block=128) is kernel and calls == [256]
    assert kernel.target == "sm_80" and kernel.out_idx == [1]
    assert [(p.name, p.is_output, p.dtype) for p in kernel.params] == [
        ("A", False, torch.float16), ("B", True, torch.float16)]
    assert "__global__" in kernel.get_kernel_source()


# ---- T.macro ----

@T.macro
def _scale_rows(buf, rows, cols, factor):
    for i, j in T.Parallel(rows, cols):
        buf[i, j] = buf[i, j] * factor


@T.macro
def _row_sums(buf, out, rows):
    T.reduce_sum(buf, out, dim=1)
    return rows * 2


@T.macro
def _scale_then_sum(buf, out, rows, cols):
    _scale_rows(buf, rows, cols, 3.0)  # macros may call macros
    return _row_sums(buf, out, rows)


@T.macro
def _bad_macro(buf):
    buf[0] = buf[0] + macro_only_undefined_name


def _rows_kernel(style, M=64, N=128):
    @T.prim_func
    def rows(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((M, N), "float32")
            s = T.alloc_fragment((M,), "float32")
            T.copy(X, x)
            if style == "inline":
                for i, j in T.Parallel(M, N):
                    x[i, j] = x[i, j] * 3.0
                T.reduce_sum(x, s, dim=1)
                twice = M * 2
            elif style == "macros":
                _scale_rows(x, M, N, factor=3.0)
                twice = _row_sums(x, s, M)
            else:
                twice = _scale_then_sum(x, s, M, N)
            for i in T.Parallel(M):
                Y[i] = s[i] + twice

    return rows


@needs_c
@pytest.mark.parametrize("style", ["macros", "nested"])
def test_macro_expands_to_the_same_code_as_writing_it_inline(style):
    inline = tegula.compile(_rows_kernel("inline"), out_idx=[1], target="sm_90a").get_kernel_source()
    expanded = tegula.compile(_rows_kernel(style), out_idx=[1], target="sm_90a").get_kernel_source()
    assert expanded == inline


@needs_c
def test_error_inside_a_macro_points_at_the_macro_line():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def uses_bad(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                _bad_macro(A)

    assert_points_at(info.value, "macro_only_undefined_name", "name 'macro_only_undefined_name' is not defined")


@needs_c
def test_macro_call_with_wrong_arguments_points_at_the_call():
    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def wrong_args(A: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                _bad_macro(A, 1)

    assert "T.macro _bad_macro: too many positional arguments" in str(info.value)

    with pytest.raises(tegula.TegulaCompileError) as info:
        @T.prim_func
        def missing_arg(A: T.Tensor((64, 128), "float32")):
            with T.Kernel(1, threads=128) as bx:
                _scale_rows(A, 64, 128)

    assert_points_at(info.value, "_scale_rows(A, 64, 128)", "missing a required argument: 'factor'")


def test_macro_outside_a_kernel_is_a_type_error():
    with pytest.raises(TypeError, match="only be called inside a T.prim_func"):
        _scale_rows(None, 1, 1, 1.0)
