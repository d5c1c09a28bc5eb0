"""The doors of a raw kernel call that need no GPU.

Compile-time refusals (a shared-memory plan past the target's per-block limit, at the
kernel's line), the generated code for sizes past 32 bits (64-bit index arithmetic, grids
folded past 65535 blocks in y), what the launcher will demand of each tensor (alignment,
from vector and cp.async accesses), the argument checks that run before any tensor is
touched (arity, scalars: type and range), and the disk cache facing entries it cannot use.
tests/python/gpu/test_doors_gpu.py launches the same doors.
"""
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

tegula = pytest.importorskip("tegula")
import tegula.language as T  # noqa: E402

# The kernel modules.
elementwise, flash_attention, flash_decoding, gemm, transpose = (
    importlib.import_module(f"tegula.kernels.{m}")
    for m in ("elementwise", "flash_attention", "flash_decoding", "gemm", "matrix_transpose"))

KIB = 1024
# The CUDA programming guide's per-block shared memory (opt-in), written out here rather
# than read from the engine.
SMEM_LIMIT = {"sm_80": 163 * KIB, "sm_86": 99 * KIB, "sm_89": 99 * KIB, "sm_90a": 227 * KIB, "sm_100a": 227 * KIB}


def compiled(jit_function, *args, **kwargs):
    """A fresh kernel of a @tegula.jit function, compiled for sm_90a (its own cache would
    hand back one compiled for a guessed target, which cannot be built into a Program)."""
    s = jit_function.settings
    return tegula.compile(jit_function.fn(*args, **kwargs), out_idx=s["out_idx"], target="sm_90a",
                          pass_configs=s["pass_configs"])


def argument_error():
    from tegula import env
    return env.native().ArgumentError


# ---------------------------------------------------------------- shared memory


def smem_program(rows):
    """Two shared tiles: rows x 1024 float32 and 8 x 1024 float16 (16 KiB)."""

    @T.prim_func
    def big_smem(A: T.Tensor((rows, 1024), "float32"), B: T.Tensor((rows, 1024), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_shared((rows, 1024), "float32")
            t = T.alloc_shared((8, 1024), "float16")
            T.copy(A, s)
            T.clear(t)
            T.copy(s, B)

    return big_smem


def _kernel_line():
    lines, first = inspect.getsourcelines(smem_program)
    return first + next(i for i, line in enumerate(lines) if "with T.Kernel" in line)


@pytest.mark.parametrize("target", sorted(SMEM_LIMIT))
def test_shared_memory_past_the_target_limit_is_a_compile_error_at_the_kernel(target):
    limit = SMEM_LIMIT[target]
    rows_over = (limit - 16 * KIB) // (4 * KIB) + 1  # one row of float32 past the limit
    with pytest.raises(tegula.TegulaCompileError) as info:
        tegula.compile(smem_program(rows_over), target=target)
    err = info.value
    assert err.line == _kernel_line(), str(err)
    text = str(err)
    assert f"s: {rows_over * 4 * KIB} bytes" in text, text
    assert f"t: {16 * KIB} bytes" in text, text
    assert str(limit) in text and target in text, text
    # One row fewer fits: the limit is the target's, not a round number.
    kernel = tegula.compile(smem_program(rows_over - 1), target=target)
    assert kernel.cubin()[:4] == b"\x7fELF"


# ---------------------------------------------------------------- grid folding


def test_add_with_a_dynamic_row_count_reads_a_folded_grid():
    # (M, 4096) fp16 with M dynamic: ceil(M / block_m) blocks along y can pass 65535.
    kernel = compiled(elementwise._add_into, 4096, "float16", False, 8, 512, 256)
    src = kernel.get_kernel_source()
    assert "blockIdx.z * gridDim.y + blockIdx.y" in src, src[:1200]
    assert re.search(r"if \(tegula_by >= .*m.*\) return;", src), src[:1200]
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_transpose_with_65536_row_tiles_is_folded_and_small_one_is_not():
    pad = transpose.PAD_BYTES // 2
    # 65536 tiles of 64 rows along y
    big = compiled(transpose._transpose_into, 4194304, 8, "float16", transpose.TILE, transpose.THREADS, pad)
    small = compiled(transpose._transpose_into, 1024, 1024, "float16", transpose.TILE, transpose.THREADS, pad)
    assert "tegula_by" in big.get_kernel_source()
    assert big.cubin()[:4] == b"\x7fELF"
    src = small.get_kernel_source()
    assert "tegula_by" not in src and "blockIdx.z" not in src and "return;" not in src


def batched_rows(block):
    """A 3-D grid whose y and z both come from dynamic sizes."""
    b, m = T.dynamic("b"), T.dynamic("m")

    @T.prim_func
    def batched(X: T.Tensor((b, m, 64), "float32"), Y: T.Tensor((b, m, 64), "float32")):
        with T.Kernel(1, T.ceildiv(m, block), b, threads=64) as (bx, by, bz):
            for i, j in T.Parallel(block, 64):
                Y[bz, by * block + i, j] = X[bz, by * block + i, j] * 2.0

    return batched


def test_three_dimensional_grid_folds_y_and_z_together():
    src = tegula.compile(batched_rows(4), target="sm_90a")
    text = src.get_kernel_source()
    assert "tegula_yz" in text and "const int bz = tegula_bz;" in text, text[:1500]
    assert src.cubin()[:4] == b"\x7fELF"


# ---------------------------------------------------------------- 64-bit indexing


def increment_program(n):
    @T.prim_func
    def increment(A: T.Tensor((n,), "int8"), B: T.Tensor((n,), "int8")):
        with T.Kernel(T.ceildiv(n, 1024), threads=128) as bx:
            for i in T.Parallel(1024):
                B[bx * 1024 + i] = A[bx * 1024 + i] + T.cast(1, "int8")

    return increment


def test_a_static_dimension_past_2_31_is_indexed_in_64_bits():
    huge = tegula.compile(increment_program(2**31 + 64), target="sm_90a")
    src = huge.get_kernel_source()
    # The block index is widened before it is scaled, and the mask compares in 64 bits.
    assert "(long long)bx * 1024LL" in src, src
    assert re.search(r"< 2147483712LL", src), src
    assert huge.cubin()[:4] == b"\x7fELF"
    small = tegula.compile(increment_program(2**20), target="sm_90a").get_kernel_source()
    assert "long long" not in small, small


def test_dynamic_tensors_take_64_bit_row_offsets():
    src = compiled(elementwise._add_into, 4096, "float16", False, 8, 512, 256).get_kernel_source()
    assert "X[((long long)(" in src, src


# ---------------------------------------------------------------- alignment


CP_ASYNC_SOURCE = re.compile(r"cp_async_16_pred\(&\w+\[[^;]*?\], &(\w+)\[")


def _needs(kernel):
    program = kernel._build()
    return kernel.get_kernel_source(), program.alignment


def _async_kernels():
    return {
        "matmul": compiled(gemm.matmul_kernel, 1024, 1024, 1024, **gemm.default_config(1024, 1024, 1024, wgmma=True)),
        "flash_attention": compiled(flash_attention.flash_attention_kernel,
                                    1, 4, 4, 256, 256, 64, block_M=64, block_N=64, threads=128, num_stages=2),
        "flash_decode": compiled(flash_decoding.decode_split_kernel, 2, 8, 2, 256, 128, 2),
    }


def test_cp_async_sources_need_16_byte_alignment():
    for name, kernel in _async_kernels().items():
        src, needs = _needs(kernel)
        sources = set(CP_ASYNC_SOURCE.findall(src))
        if kernel._lowered.warp_specialized:
            # sm_90a's bulk tensor copies: a tensor map needs a 16-byte aligned address.
            assert "tma_load_" in src and not sources, name
            for buf in ("A", "B") if name == "matmul" else ("Q", "K", "V"):
                assert needs[buf] >= 16, f"{name}: {buf} has a tensor map but needs only {needs[buf]} bytes"
            continue
        assert sources, f"{name}: no cp.async in the generated code"
        for buf in sources:
            assert needs[buf] >= 16, f"{name}: {buf} is read by cp.async but needs only {needs[buf]} bytes"


def test_vector_accesses_set_the_alignment():
    src, needs = _needs(compiled(elementwise._add_into, 4096, "float16", False, 8, 512, 256))
    assert "Vec<half_t, 8>" in src
    assert needs == {"X": 16, "Y": 16, "Z": 16}
    # With no vector access a tensor needs only its element's alignment.
    src, needs = _needs(compiled(elementwise._add_into, 4097, "float16", False, 8, 512, 256))
    assert needs["X"] == 2 and "Vec<" not in src


# ---------------------------------------------------------------- arguments, no GPU needed


def scalars_first_program(int_dtype, float_dtype):
    """Scalars before the tensor: the launcher checks them before it looks at X."""

    @T.prim_func
    def scalars_first(alpha: float_dtype, n: int_dtype, X: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                X[i] = X[i] * T.cast(T.cast(alpha, float_dtype), "float32") + T.cast(T.cast(n, int_dtype), "float32")

    return scalars_first


@pytest.fixture(scope="module")
def scalars_kernel():
    return tegula.compile(scalars_first_program(T.int32, T.float32), target="sm_90a")


CPU_X = torch.zeros(128)  # passes every check a scalar is given, then fails on its device


def _raises_naming(kernel, args, *words):
    with pytest.raises(ValueError) as info:
        kernel(*args)
    assert type(info.value) is argument_error(), repr(info.value)
    text = str(info.value)
    assert "Unable to cast" not in text and "InternalError" not in text, text
    for w in words:
        assert w in text, text
    return text


@pytest.mark.parametrize("value", ["1.5", None, [1.0], 1j, torch.zeros(3)])
def test_float_scalar_given_a_non_number(scalars_kernel, value):
    _raises_naming(scalars_kernel, (value, 1, CPU_X), "'alpha'", "float32", "real number")


@pytest.mark.parametrize("value", [1e300, -1e39])
def test_float32_scalar_past_its_range(scalars_kernel, value):
    _raises_naming(scalars_kernel, (value, 1, CPU_X), "'alpha'", "float32")


@pytest.mark.parametrize("value", [2**33 + 5, 2**31, -2**31 - 1, 2**100, -2**100])
def test_int32_scalar_out_of_range(scalars_kernel, value):
    _raises_naming(scalars_kernel, (1.0, value, CPU_X), "'n'", "int32", "[-2147483648, 2147483647]", str(value))


@pytest.mark.parametrize("value", [1.5, 2.0, "3", None, torch.tensor(2.0), np.float32(1)])
def test_int_scalar_given_a_non_int(scalars_kernel, value):
    _raises_naming(scalars_kernel, (1.0, value, CPU_X), "'n'", "int32", "must be an int")


@pytest.mark.parametrize("alpha, n", [
    (2, 3), (True, False), (np.float32(0.5), np.int64(7)), (np.float64(2.0), np.int32(-5)),
    (torch.tensor(0.25), torch.tensor(9)), (2**62 * 1.0, 2**31 - 1), (-3.0, -2**31),
])
def test_numbers_of_every_kind_are_accepted(scalars_kernel, alpha, n):
    # Both scalars pass; the CPU tensor after them is what is refused.
    _raises_naming(scalars_kernel, (alpha, n, CPU_X), "'X'", "CUDA")


@pytest.mark.parametrize("int_dtype, lo, hi", [
    ("uint8", 0, 255), ("int16", -2**15, 2**15 - 1), ("uint32", 0, 2**32 - 1),
    ("int64", -2**63, 2**63 - 1), ("uint64", 0, 2**64 - 1),
])
def test_int_scalar_ranges_follow_the_dtype(int_dtype, lo, hi):
    kernel = tegula.compile(scalars_first_program(getattr(T, int_dtype), T.float32), target="sm_90a")
    for ok in (lo, hi, (lo + hi) // 2):
        _raises_naming(kernel, (1.0, ok, CPU_X), "'X'", "CUDA")
    for bad in (lo - 1, hi + 1):
        _raises_naming(kernel, (1.0, bad, CPU_X), "'n'", int_dtype, f"[{lo}, {hi}]")


@pytest.mark.parametrize("float_dtype, top", [("float16", 65504.0), ("float64", None)])
def test_float_scalar_ranges_follow_the_dtype(float_dtype, top):
    kernel = tegula.compile(scalars_first_program(T.int32, getattr(T, float_dtype)), target="sm_90a")
    _raises_naming(kernel, (1.5, 1, CPU_X), "'X'", "CUDA")
    if top is not None:
        _raises_naming(kernel, (top, 1, CPU_X), "'X'", "CUDA")
        _raises_naming(kernel, (top * 2, 1, CPU_X), "'alpha'", float_dtype)
    else:
        _raises_naming(kernel, (1e300, 1, CPU_X), "'X'", "CUDA")
        _raises_naming(kernel, (2**1100, 1, CPU_X), "'alpha'", float_dtype)


def test_arity_type_dtype_and_device_are_named(scalars_kernel):
    text = _raises_naming(scalars_kernel, (1.0, 2), "expected 3 argument(s)", "alpha, n, X", "got 2")
    assert "argument '" not in text
    _raises_naming(scalars_kernel, (1.0, 2, CPU_X, CPU_X), "expected 3", "got 4")
    _raises_naming(scalars_kernel, (1.0, 2, np.zeros(128, np.float32)), "'X'", "torch.Tensor", "ndarray")
    _raises_naming(scalars_kernel, (1.0, 2, torch.zeros(128, dtype=torch.float16)), "'X'", "float32", "Half")
    _raises_naming(scalars_kernel, (1.0, 2, torch.zeros(128)), "'X'", "CUDA device", "cpu")
    with pytest.raises(TypeError, match="by position"):
        scalars_kernel(1.0, 2, X=CPU_X)


# ---------------------------------------------------------------- the disk cache


CACHE_SCRIPT = textwrap.dedent("""
    import os, stat, sys
    import tegula, tegula.language as T
    from tegula import env
    C = env.native()

    @T.prim_func
    def cached(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(2, threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] + 1.0

    kernel = tegula.compile(cached, target="sm_90a")
    cache = sys.argv[1]
    good = kernel.cubin()
    entries = [f for f in os.listdir(cache) if f.endswith(".tgk")]
    assert len(entries) == 1, entries
    path = os.path.join(cache, entries[0])

    def make(kind):
        os.unlink(path)
        if kind == "directory":
            os.mkdir(path)
            open(os.path.join(path, "inside"), "w").close()
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "link to a fifo":
            os.mkfifo(path + ".fifo")
            os.symlink(path + ".fifo", path)
        elif kind == "link to a device":
            os.symlink("/dev/zero", path)
        elif kind == "dangling link":
            os.symlink(path + ".nowhere", path)
        elif kind == "unreadable":
            with open(path, "wb") as f:
                f.write(b"not an entry")
            os.chmod(path, 0)

    for kind in sys.argv[2:]:
        make(kind)
        C.clear_memory_cache()
        before = C.cache_stats()
        # A new kernel (one compiled keeps its image): it must neither block nor fail.
        again = tegula.compile(cached, target="sm_90a").cubin()
        after = C.cache_stats()
        assert again == good, kind
        assert after["misses"] == before["misses"] + 1 and after["stores"] == before["stores"] + 1, (kind, after)
        kind_now = os.lstat(path).st_mode
        if kind == "directory":
            assert stat.S_ISDIR(kind_now), kind  # left alone
            os.unlink(os.path.join(path, "inside"))
            os.rmdir(path)
            C.clear_memory_cache()
            tegula.compile(cached, target="sm_90a").cubin()  # a normal store puts the entry back for the next case
        else:
            assert stat.S_ISREG(kind_now), kind  # replaced by the rebuilt entry
        C.clear_memory_cache()
        assert tegula.compile(cached, target="sm_90a").cubin() == good and C.cache_stats()["disk_hits"] >= 1, kind
        print("ok", kind)
""")


def test_unusable_cache_entries_are_rebuilt_without_blocking(tmp_path):
    kinds = ["directory", "fifo", "link to a fifo", "link to a device", "dangling link", "unreadable"]
    cache = tmp_path / "cache"
    env = dict(os.environ, TEGULA_CACHE_DIR=str(cache))
    env.pop("TEGULA_DISABLE_CACHE", None)
    script = tmp_path / "cache_doors.py"
    script.write_text(CACHE_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(cache), *kinds], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split("\n")[:len(kinds)] == [f"ok {k}" for k in kinds], done.stdout


def test_panel_rasterised_gemm_with_a_dynamic_row_count_folds_too():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import lang_kernels

    program = lang_kernels.gemm_relu_program(T.dynamic("m"), 256, 128, 128, 128, 32)
    kernel = tegula.compile(program, target="sm_80")
    src = kernel.get_kernel_source()
    # The panel arithmetic reads the logical row-tile count, not the launch's gridDim.y.
    assert "const int tegula_lin = tegula_by * gridDim.x + blockIdx.x;" in src, src[:1500]
    assert "(int)gridDim.y" not in src and "(int)(" in src, src[:1500]
    assert kernel.cubin()[:4] == b"\x7fELF"
