"""The porting surface without a GPU: T.Serial and the other loop aliases, tegula.cdiv and
tegula.next_power_of_2, T.atomic_add's memory_order (the generated source and the PTX it
becomes), T.Fragment user layouts through T.annotate_layout, T.alloc_local with TileLang's
meaning, and the argument checks of the profiler's do_bench. Numbers come from the CPU
reference (`tegula.testing.reference`) and the SIMT simulator (`tegula.testing.simulate`)
against torch."""
import ctypes
import ctypes.util
import glob
import os
import re
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula import profiler
from tegula.env import device_include_dir

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import port_kernels as pk  # noqa: E402

TARGETS = ["sm_90a", "sm_80"]

with open(__file__, encoding="utf-8") as _f:
    _LINES = _f.read().splitlines()


def line_of(marker: str) -> int:
    """The line of this file holding `marker` (once, outside the assertion naming it)."""
    hits = [n for n, text in enumerate(_LINES, 1) if marker in text and "raises_at(" not in text]
    assert len(hits) == 1, f"marker {marker!r} must occur once in this file, found {len(hits)}"
    return hits[0]


def raises_at(marker: str, message: str, build):
    """build() fails to compile, at the line of `marker`, with `message` in the error."""
    with pytest.raises(tegula.TegulaCompileError) as info:
        build()
    err = info.value
    assert err.file == __file__ and err.line == line_of(marker), str(err)
    assert message in str(err), str(err)
    return err


def near(out, ref, tol=2e-5) -> bool:
    """Same shape, and every element within tol (relative and absolute); NaN matches nothing."""
    return out.shape == ref.shape and torch.allclose(out.double(), ref.double(), rtol=tol, atol=tol)


# ---------------------------------------------------------------- loops, cdiv, next_power_of_2

def test_loop_aliases_are_tilelangs():
    assert T.Serial is T.serial and T.Unroll is T.unroll and T.Vectorized is T.vectorized


@pytest.mark.parametrize("target", TARGETS)
def test_serial_alias_kernel_computes(target):
    x = torch.randn(5, 70)
    y = tt.simulate(pk.serial_alias_scale(5, 70, target=target), x)
    ref = x.double() * 2
    ref[:, 0] += torch.arange(5, dtype=torch.float64)
    assert near(y, ref)


def test_cdiv_and_next_power_of_2_on_ints():
    assert tegula.cdiv(1000, 128) == 8 and tegula.cdiv(1024, 128) == 8 and tegula.cdiv(0, 7) == 0
    assert [tegula.next_power_of_2(n) for n in (1, 2, 3, 64, 65, 1000)] == [1, 2, 4, 64, 128, 1024]
    assert "cdiv" in tegula.__all__ and "next_power_of_2" in tegula.__all__
    with pytest.raises(ValueError, match="b must be a positive int"):
        tegula.cdiv(5, 0)
    with pytest.raises(ValueError, match="n must be >= 1"):
        tegula.next_power_of_2(0)
    with pytest.raises(TypeError, match="takes a Python int"):
        tegula.next_power_of_2(2.5)


def test_cdiv_of_a_dynamic_size_builds_the_expression():
    m = T.dynamic("m")

    @T.prim_func
    def f(X: T.Tensor((m,), "float32"), Y: T.Tensor((m,), "float32")):
        with T.Kernel(tegula.cdiv(m, 64), threads=64) as bx:
            for i in T.Parallel(64):
                Y[bx * 64 + i] = X[bx * 64 + i] + 1.0

    k = tegula.compile(f, out_idx=[-1], target="sm_90a")
    for n in (1, 64, 130):
        x = torch.randn(n)
        assert near(tt.simulate(k, x), x.double() + 1)


# ---------------------------------------------------------------- atomic_add(memory_order=...)

ORDERS = [None, "relaxed", "consume", "acquire", "release", "acq_rel", "seq_cst"]
# The semantics qualifier of the `atom` each order becomes (kernels/include/tegula/atomic.h);
# seq_cst is also a `fence.sc.gpu` before it.
SEM = {"relaxed": "relaxed", "consume": "acquire", "acquire": "acquire", "release": "release",
       "acq_rel": "acq_rel", "seq_cst": "acquire"}


def _nvrtc():
    """libnvrtc through ctypes, or None: the PTX checks need NVRTC to stop at PTX, which
    the engine never does."""
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", ctypes.util.find_library("nvrtc")]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libnvrtc.so*")))
    names += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def ptx_of(source: str, arch: str) -> str:
    lib = _nvrtc()
    if lib is None:
        pytest.skip("libnvrtc cannot be loaded with ctypes here")
    includes = [device_include_dir()]
    for root in ("/usr/local/cuda/include", os.environ.get("CUDA_HOME", "") + "/include"):
        includes += [root, root + "/cccl"]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    includes += glob.glob(os.path.join(site, "nvidia", "*", "include"))
    flags = ["-std=c++17", f"--gpu-architecture={arch}"] + [f"-I{d}" for d in includes if d and os.path.isdir(d)]
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0, None, None) == 0
    argv = (ctypes.c_char_p * len(flags))(*[f.encode() for f in flags])
    status = lib.nvrtcCompileProgram(prog, len(flags), argv)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if status != 0:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        if b"cannot open source file" in log.value:
            pytest.skip(f"NVRTC finds no CUDA headers here: {log.value.decode()[:200]}")
        raise AssertionError(log.value.decode())
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


@pytest.mark.parametrize("target", TARGETS)
def test_memory_order_changes_the_generated_code(target):
    sources = {}
    for order in ORDERS:
        k = pk.column_sums(40, 24, memory_order=order, target=target)
        src = k.get_kernel_source()
        if order is None:
            assert re.search(r"atomic_add(_x[24])?\(&", src) and "memory_order" not in src
        else:
            assert f"atomic_add<tegula::memory_order_{order}>(&" in src, src
        assert k.cubin()  # NVRTC (and its assembler) accept what the order becomes
        sources[order] = src
    assert len(set(sources.values())) == len(ORDERS)


@pytest.mark.parametrize("order", ORDERS[1:])
def test_memory_order_reaches_the_ptx(order):
    src = pk.column_sums(40, 24, memory_order=order, target="sm_90a").get_kernel_source()
    ptx = ptx_of(src, "compute_90")
    for sem in set(SEM.values()):
        assert (f"atom.{sem}.gpu.add.f32" in ptx) == (sem == SEM[order]), f"atom.{sem}: memory_order={order!r}"
    assert ("fence.sc.gpu" in ptx) == (order == "seq_cst")
    default = ptx_of(pk.column_sums(40, 24, target="sm_90a").get_kernel_source(), "compute_90")
    assert not any(f"atom.{sem}." in default for sem in SEM.values()) and "fence.sc" not in default


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "float64"])
@pytest.mark.parametrize("target", TARGETS)
def test_memory_order_compiles_for_every_atomic_type(dtype, target):
    assert pk.column_sums(16, 8, memory_order="release", dtype=dtype, target=target).cubin()


@pytest.mark.parametrize("order", ORDERS)
def test_memory_order_keeps_the_meaning(order):
    # A memory order changes nothing a single thread sees: the reference and the
    # simulator give the sums.
    x = torch.randn(37, 24)
    k = pk.column_sums(37, 24, memory_order=order, target="sm_90a")
    for run in (tt.reference, tt.simulate):
        s = torch.zeros(24)
        run(k, x, s)
        assert near(s, x.double().sum(0), 1e-4)


def test_unknown_memory_order_is_an_error_at_the_call():
    def build():
        @T.prim_func
        def f(X: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.atomic_add(X[0], 1.0, memory_order="strong")  # MARK-order

        return tegula.compile(f, target="sm_90a")

    err = raises_at("MARK-order", "memory_order must be one of 'relaxed', 'consume', 'acquire', 'release', "
                    "'acq_rel', 'seq_cst' (or None), got 'strong'", build)
    assert err.col == _LINES[err.line - 1].index('"strong"') + 1  # the caret under the value


def test_return_prev_on_a_region_is_refused_by_name():
    # The element form is an expression (cpu/test_atomic_prev.py); a region has no one
    # previous value.
    def build():
        @T.prim_func
        def f(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                T.atomic_add(X[0:8], Y[0:8], return_prev=True)  # MARK-prev

        return tegula.compile(f, target="sm_90a")

    raises_at("MARK-prev", "return_prev=True, dst must be one element", build)


# ---------------------------------------------------------------- T.Fragment user layouts

def test_fragment_tables():
    f = T.Fragment((4, 8), forward_fn=lambda i, j: (j, i))
    assert f.threads == 8 and f.slots == 4 and f.table[8 * 2 + 5] == [(5, 2)]
    g = T.Fragment((32, 4), forward_thread_fn=lambda i, j, rep: i * 4 + rep, replicate=4)
    assert g.table[1] == [(0, 1), (1, 1), (2, 1), (3, 1)]  # every copy of (0, 1), register 1
    h = T.Fragment((2, 6), forward_thread_fn=lambda i, j: j // 3)  # derived registers, row-major per thread
    assert [holders[0] for holders in h.table[:6]] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    with pytest.raises(ValueError, match=r"elements \(0,\) and \(1,\) both land in thread 0, register 0"):
        T.Fragment((4,), forward_thread_fn=lambda i: 0, forward_index_fn=lambda i: 0)
    with pytest.raises(ValueError, match="exactly one of forward_fn"):
        T.Fragment((4,))
    with pytest.raises(TypeError, match="must give an int"):
        T.Fragment((4,), forward_thread_fn=lambda i: i / 2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("K,N,threads", [(4, 128, 128), (3, 64, 128)])
def test_fragment_columns_in_threads(target, K, N, threads):
    k = pk.column_fragment(K, N, target=target, threads=threads)
    x = torch.randn(K, N)
    for run in (tt.reference, tt.simulate):
        y, s = run(k, x)
        assert near(y, x.double() * 2 + 1)
        assert near(s, (x.double() * 2 + 1).sum(0))


@pytest.mark.parametrize("target", TARGETS)
def test_fragment_bit_linear_layout_with_a_row_reduction(target):
    k = pk.mma_like_fragment(target=target)
    x = torch.randn(16, 16)
    want = (x.double() ** 2).amax(1, keepdim=True).expand(16, 16)
    assert near(tt.simulate(k, x), want)
    assert near(tt.reference(k, x), want)


@pytest.mark.parametrize("target", TARGETS)
def test_fragment_on_part_of_the_threads_and_replicated(target):
    k = pk.partial_fragment(target=target)
    x = torch.randn(64)
    y, z = tt.simulate(k, x)
    assert near(y, x.double() + 1)
    assert near(z, x.double()[0::2] * 3)


@pytest.mark.parametrize("target", TARGETS)
def test_mla_combine_with_an_annotated_local_buffer(target):
    k = pk.mla_combine(2, 3, 5, 64, target=target)
    glse = torch.randn(2, 3, 5) * 4
    partial = torch.randn(2, 3, 5, 64)
    want = pk.mla_combine_reference(glse, partial)
    assert near(tt.reference(k, glse, partial), want, 1e-4)
    assert near(tt.simulate(k, glse, partial), want, 1e-4)


def test_fragment_of_contiguous_runs_gets_vector_accesses():
    @T.prim_func
    def f(X: T.Tensor((8, 64), "float32"), Y: T.Tensor((8, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((8, 64), "float32")
            T.annotate_layout({x: T.Fragment(x.shape, forward_thread_fn=lambda i, j: i * 16 + j // 4)})
            T.copy(X, x)
            for i, j in T.Parallel(8, 64):
                x[i, j] = x[i, j] + 1.0
            T.copy(x, Y)

    k = tegula.compile(f, out_idx=[1], target="sm_90a")
    src = k.get_kernel_source()
    # One 16-byte load and one 16-byte store a thread.
    assert src.count("float4*>(&X[") == 1 and src.count("float4*>(&Y[") == 1, src
    x = torch.randn(8, 64)
    assert near(tt.simulate(k, x), x.double() + 1)


def test_fragment_with_registers_no_element_uses():
    @T.prim_func
    def f(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((8,), "float32")
            T.annotate_layout({x: T.Fragment(x.shape, forward_thread_fn=lambda i: i % 4,
                                              forward_index_fn=lambda i: (i // 4) * 2)})
            T.copy(X, x)
            for i in T.Parallel(8):
                x[i] = x[i] * 3.0
            T.copy(x, Y)

    x = torch.randn(8)
    for target in TARGETS:
        assert near(tt.simulate(tegula.compile(f, out_idx=[1], target=target), x), x.double() * 3)


def test_fragment_layout_not_a_formula_of_the_thread_is_an_error():
    def build():
        @T.prim_func
        def f(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((128,), "float32")
                T.annotate_layout({x: T.Fragment((128,), forward_thread_fn=lambda i: (i * 7) % 128)})  # MARK-fn
                T.copy(X, x)
                T.copy(x, Y)

        return tegula.compile(f, target="sm_90a")

    raises_at("MARK-fn", "not an affine or bit-linear function of the thread index", build)


def test_fragment_with_too_many_threads_is_an_error():
    def build():
        @T.prim_func
        def f(X: T.Tensor((256,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((256,), "float32")
                T.annotate_layout({x: T.Fragment(x.shape, forward_thread_fn=lambda i: i)})  # MARK-threads
                T.copy(X, x)

        return tegula.compile(f, target="sm_90a")

    raises_at("MARK-threads", "puts element (128,) in thread 128, but the kernel has 128 threads", build)


def test_fragment_shape_and_scope_are_checked():
    def shape():
        @T.prim_func
        def f(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((64,), "float32")
                T.annotate_layout({x: T.Fragment((32,), forward_thread_fn=lambda i: i)})  # MARK-shape
                T.copy(X, x)

        return tegula.compile(f, target="sm_90a")

    def scope():
        @T.prim_func
        def f(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                s = T.alloc_shared((64,), "float32")
                T.annotate_layout({s: T.Fragment((64,), forward_thread_fn=lambda i: i)})  # MARK-scope
                T.copy(X, s)

        return tegula.compile(f, target="sm_90a")

    raises_at("MARK-shape", "has shape [32], the buffer [64]", shape)
    raises_at("MARK-scope", "'s' is in shared memory", scope)


def test_local_buffer_fragment_must_keep_elements_apart():
    def build():
        @T.prim_func
        def f(X: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                r = T.alloc_local((4,), "float32")
                T.annotate_layout({r: T.Fragment(r.shape, forward_thread_fn=lambda i: i)})  # MARK-regs
                T.clear(r)

        return tegula.compile(f, target="sm_90a")

    raises_at("MARK-regs", "maps its elements (0,) and (1,) to the same register 0", build)


def test_gemm_against_an_annotated_accumulator_is_a_layout_conflict():
    def build():
        @T.prim_func
        def f(A: T.Tensor((64, 32), "float16"), B: T.Tensor((32, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((64, 32), "float16")
                b = T.alloc_shared((32, 64), "float16")
                c = T.alloc_fragment((64, 64), "float32")
                T.annotate_layout({c: T.Fragment(c.shape, forward_fn=lambda i, j: (j + 64 * (i % 2), i // 2))})
                T.copy(A, a)
                T.copy(B, b)
                T.gemm(a, b, c, clear_accum=True)  # MARK-gemm
                T.copy(c, C)

        return tegula.compile(f, target="sm_80")

    raises_at("MARK-gemm", "layout conflict: T.gemm needs", build)


# ---------------------------------------------------------------- T.alloc_local

@pytest.mark.parametrize("target", TARGETS)
def test_local_accumulator_gemv(target):
    a, b = torch.randn(96), torch.randn(256, 96)
    assert near(tt.simulate(pk.gemv_local(256, 96, target=target), a, b), b.double() @ a.double(), 1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_local_arrays_split_k_gemv_with_shared_atomics(target):
    a, b = torch.randn(64), torch.randn(64, 64)
    assert near(tt.simulate(pk.splitk_gemv_local(64, 64, target=target), a, b), b.double() @ a.double(), 1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("M", [64, 100])
def test_local_rows_copies_parallel_loops_and_vars(target, M):
    x = torch.randn(M, 12)
    xd = x.double()
    want = xd.flip(1) * 2 + xd.sum(1, keepdim=True) + 1
    assert near(tt.simulate(pk.local_rows(M, 12, target=target), x), want, 1e-4)


def test_copy_between_local_and_fragment_is_refused():
    def build():
        @T.prim_func
        def f(X: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                r = T.alloc_local((64,), "float32")
                x = T.alloc_fragment((64,), "float32")
                T.copy(X, x)
                T.copy(x, r)  # MARK-localfrag

        return tegula.compile(f, target="sm_90a")

    raises_at("MARK-localfrag", "a copy between a local buffer and a fragment ('x') is not supported", build)


# ---------------------------------------------------------------- profiler.do_bench arguments

@pytest.mark.parametrize("kwargs,match", [
    ({"backend": "nsys"}, r"backend 'nsys': expected one of \('event', 'cupti', 'cudagraph'\)"),
    ({"return_mode": "p50"}, "return_mode"),
    ({"quantiles": [0.5, 2.0]}, "quantiles must be a non-empty list of numbers in"),
    ({"_n_repeat": -1}, "n_repeat must be a non-negative int"),
    ({"backend": "cupti", "return_mode": "median"}, "backend 'cupti' measures the kernels' total time"),
    ({"backend": "cupti", "quantiles": [0.5]}, "return_mode must be 'mean' and quantiles None"),
])
def test_do_bench_checks_its_arguments_before_the_device(kwargs, match):
    with pytest.raises(ValueError, match=match):
        profiler.do_bench(lambda: None, **kwargs)


def test_profiler_do_bench_takes_tilelangs_keywords():
    import inspect

    names = set(inspect.signature(profiler.Profiler.do_bench).parameters)
    assert {"func", "warmup", "rep", "n_warmup", "n_repeat", "input_tensors", "backend", "quantiles", "return_mode",
            "dynamic_symbolic_constraints", "device", "early_stop_baseline"} <= names
    names = set(inspect.signature(profiler.do_bench).parameters)
    assert {"fn", "warmup", "rep", "_n_warmup", "_n_repeat", "quantiles", "fast_flush", "backend", "return_mode",
            "device", "cache_size", "early_stop_baseline"} <= names
    assert inspect.signature(profiler.do_bench).parameters["return_mode"].default == "mean"
    with pytest.raises(ValueError, match="backend 'x'"):
        profiler.Profiler(pk_kernel_stub(), device="cpu").do_bench(backend="x")


def pk_kernel_stub():
    from types import SimpleNamespace

    return SimpleNamespace(params=[], __call__=lambda: None)
