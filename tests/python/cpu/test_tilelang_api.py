"""TileLang's Python API around the language, without a GPU: targets as dicts, the
`tilelang.env` settings, T.dynamic of several names, dtype helpers, every PassConfigKey
of TileLang, the autotuner's cache switch and run() options, and `tegula.carver`."""
import os
import subprocess

import pytest
import torch

import tegula
import tegula.language as T
from tegula import autotuner, env, testing
from tegula.transform import PassConfigKey, describe, to_options

try:
    import tegula._C  # noqa: F401
except ImportError:
    pytest.skip("tegula._C is not built", allow_module_level=True)

# A git checkout of TileLang, when one is at hand: its PassConfigKey list is compared with ours.
TILELANG_REPO = os.environ.get("TILELANG_CHECKOUT", "")


def scale_kernel(N, dtype="float32"):
    @T.prim_func
    def scale(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                B[bx * 128 + i] = A[bx * 128 + i] * 2.0

    return scale


# ---- 1. targets ----

@pytest.mark.parametrize("target, expected", [
    ({"kind": "cuda", "arch": "sm_90a"}, "sm_90a"), ({"kind": "cuda", "arch": "sm_80"}, "sm_80"),
    ("cuda -arch=sm_80", "sm_80"), ("sm_90a", "sm_90a")])
def test_target_forms_compile(target, expected):
    kernel = tegula.compile(scale_kernel(256), out_idx=[-1], target=target)
    assert kernel.target == expected
    assert "__global__" in kernel.get_kernel_source()


def test_target_dict_without_arch_is_cuda():
    assert env.target_text({"kind": "cuda"}) == "cuda"
    assert env.target_text({"kind": "cuda", "arch": "sm_90"}) == "cuda -arch=sm_90"
    assert env.parse_target({"kind": "cuda", "arch": "sm_90"}) == "sm_90"


def test_target_object_like_tvm():
    class Kind:
        name = "cuda"

    class Target:
        kind = Kind()
        attrs = {"arch": "sm_80"}

    assert env.resolve_target(Target()) == ("sm_80", False)


def test_target_other_kind_is_refused():
    with pytest.raises(ValueError, match="kind 'cuda' only, got kind 'hip'"):
        tegula.compile(scale_kernel(256), target={"kind": "hip", "mcpu": "gfx942"})


def test_jit_with_dict_target():
    kernel = tegula.jit(out_idx=[-1], target={"kind": "cuda", "arch": "sm_80"})(scale_kernel)(512)
    assert kernel.target == "sm_80"


# ---- 2. tilelang.env ----

def test_env_cache_dir_and_tmp_dir():
    assert tegula.env.TILELANG_CACHE_DIR == tegula.cache_dir()
    assert tegula.env.TILELANG_TMP_DIR.endswith("tmp")
    assert env.env.TILELANG_CACHE_DIR == tegula.cache_dir()
    assert env.env.get_default_target() == "auto"


def test_env_setting_is_forced(monkeypatch):
    settings = env.Environment()
    monkeypatch.setenv("TILELANG_PRINT_ON_COMPILATION", "0")
    assert settings.TILELANG_PRINT_ON_COMPILATION == "0"
    settings.TILELANG_PRINT_ON_COMPILATION = "1"
    assert settings.TILELANG_PRINT_ON_COMPILATION == "1"
    with pytest.raises(AttributeError):
        settings.NOT_A_SETTING  # noqa: B018


def test_autotuner_honours_disable_cache():
    assert autotuner._cache_enabled()
    tegula.disable_cache()
    try:
        assert not autotuner._cache_enabled() and autotuner._cache_dir() is None
        assert not env.env.is_cache_enabled()
    finally:
        tegula.enable_cache()
    assert autotuner._cache_enabled()


class TimesInOrder(autotuner.CudaBench):
    """Never runs a kernel: each configuration's latency is the next of `latencies`."""

    def __init__(self, latencies):
        self.latencies = list(latencies)

    def require_device(self):
        pass

    def device_name(self):
        return "Fake GPU"

    def make_inputs(self, kernel, supply_type):
        return []

    def time(self, kernel, inputs, warmup, rep):
        return self.latencies.pop(0)


def test_autotuner_run_takes_tilelang_options(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotuner, "_bench", TimesInOrder([2.0, 1.0]))
    autotuner.clear_memory_cache()
    tuner = autotuner.AutoTuner(tegula.jit(out_idx=[-1], target="sm_90a")(scale_kernel),
                                configs=[{"N": 256}, {"N": 512}])
    result = tuner.run(warmup=1, rep=1, enable_grouped_compile=True, group_compile_size=4, use_pipeline=True,
                       early_stop=True, early_stop_factor=1.5)
    assert result.config == {"N": 512} and result.latency == 1.0
    with pytest.raises(ValueError, match="early_stop_factor"):
        tuner.run(early_stop=True, early_stop_factor=0.5)


# ---- 4. T.dynamic of several names ----

def test_dynamic_several_names():
    batch, seq_len, seq_len_kv = T.dynamic("batch, seq_len, seq_len_kv")
    assert [v.name for v in (batch, seq_len, seq_len_kv)] == ["batch", "seq_len", "seq_len_kv"]
    assert len(T.symbolic("m n")) == 2 and T.dynamic("m").name == "m"
    with pytest.raises(ValueError, match="identifier"):
        T.dynamic("a, 1b")


def test_dynamic_tuple_in_a_kernel():
    M, N = T.dynamic("M, N")

    @T.prim_func
    def copy2d(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 4), threads=128) as (bx, by):
            for i, j in T.Parallel(4, 32):
                B[by * 4 + i, bx * 32 + j] = A[by * 4 + i, bx * 32 + j] + 1.0

    kernel = tegula.compile(copy2d, out_idx=[-1], target="sm_80")
    a = torch.randn(8, 64)
    torch.testing.assert_close(testing.reference(kernel, a), a + 1)


# ---- 5. dtypes ----

def test_dtype_as_torch_and_sizes():
    assert T.float16.as_torch() is torch.float16
    assert T.dtype("bfloat16").as_torch() is torch.bfloat16 and T.int8.as_torch() is torch.int8
    assert (T.float16.bits, T.float32.itemsize, T.int64.bytes) == (16, 4, 8)
    assert T.float32.is_floating_point() and not T.int32.is_float()


def test_dtype_called_without_value_is_a_variable():
    # TileLang's test_tilelang_intimm: a fresh variable of the type, usable in expressions.
    a = T.uint32()
    assert a.dtype == "uint32" and (a & 0xFFFFFFFF).dtype == "uint32"
    assert (T.uint64() & T.uint64(0xFFFFFFFFFFFFFFFF)).dtype == "uint64"
    assert T.int32(0x7FFFFFFF).dtype == "int32"


def test_dtype_called_without_value_in_a_kernel_is_bound_by_let():
    """TileLang's `x = T.int32()` then `T.let(x, value)`: x is value for the rest of the
    block (the reference runs it); a use before the T.let names x and what to write."""
    @T.prim_func
    def f(A: T.Tensor((128,), "int32"), B: T.Tensor((128,), "int32")):
        with T.Kernel(2, threads=64) as bx:
            x = T.int32()
            T.let(x, bx * 64 + 3)
            for i in T.Parallel(64):
                B[bx * 64 + i] = A[bx * 64 + i] + x

    a = torch.arange(128, dtype=torch.int32)
    out = testing.reference(tegula.compile(f, out_idx=[1], target="sm_90a"), a)
    assert torch.equal(out, a + torch.arange(128, dtype=torch.int32) // 64 * 64 + 3)
    with pytest.raises(tegula.TegulaCompileError, match=r"'x' is declared with T.int32\(\) and has no value yet"):
        @T.prim_func
        def g(A: T.Tensor((128,), "int32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.int32()
                for i in T.Parallel(128):
                    A[i] = x
    with pytest.raises(tegula.TegulaCompileError, match=r"T.let binds a variable declared"):
        @T.prim_func
        def h(A: T.Tensor((128,), "int32")):
            with T.Kernel(1, threads=128) as bx:
                T.let(bx, 3)


def test_astype_in_a_kernel():
    @T.prim_func
    def to_half(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float16"), C: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                B[i] = A[i].astype(T.float16)
                C[i] = (A[i] * 4.0).astype("int32")

    kernel = tegula.compile(to_half, out_idx=[1, 2], target="sm_80")
    a = torch.randn(128)
    b, c = testing.simulate(kernel, a)
    torch.testing.assert_close(b, a.half())
    torch.testing.assert_close(c, (a * 4).to(torch.int32))


# ---- 6. PassConfigKey ----

def _tilelang_keys():
    if not TILELANG_REPO:
        pytest.skip("TILELANG_CHECKOUT does not name a TileLang checkout")
    try:
        text = subprocess.run(["git", "-C", TILELANG_REPO, "show", "HEAD:tilelang/transform/pass_config.py"],
                              capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("TileLang's source is not here")
    import re
    return dict(re.findall(r"^    ([A-Z][A-Z0-9_]+) = \"([^\"]+)\"", text, re.M))


def test_every_tilelang_pass_config_key_is_known():
    for name, value in _tilelang_keys().items():
        key = getattr(PassConfigKey, name)
        assert PassConfigKey(value.replace("tirx.", "tir.", 1)) is key or key.value == value
        assert describe(key)


def test_result_neutral_keys_are_accepted():
    configs = {PassConfigKey.TL_REDUCER_FORCE_BASELINE: True, "tl.layout_cost_model": "io-aware",
               PassConfigKey.TL_ENABLE_LOWER_LDGSTG: True,
               PassConfigKey.TL_SIMPLIFY_APPLY_CONSTRAINTS_TO_BOOLEAN_BRANCHES: True}
    assert to_options(configs) == {}
    kernel = tegula.compile(scale_kernel(256), out_idx=[-1], target="sm_90a", pass_configs=configs)
    assert "__global__" in kernel.get_kernel_source()


def test_key_that_changes_results_is_refused():
    with pytest.raises(ValueError, match="32-bit indexing"):
        to_options({PassConfigKey.TL_CONFIG_INDEX_BITWIDTH: 64})


# ---- 7. carver ----

class FakeProps:
    name, major, minor, multi_processor_count = "NVIDIA H100", 9, 0, 132
    shared_memory_per_block, shared_memory_per_block_optin, warp_size, L2_cache_size = 49152, 232448, 32, 50 << 20


def test_carver_driver(monkeypatch):
    from tegula.carver.arch import CUDA, driver

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=0: FakeProps())
    assert driver.get_num_sms() == 132
    assert driver.get_max_dynamic_shared_size_bytes(format="kb") == 227
    arch = CUDA({"kind": "cuda", "arch": "sm_90a"})
    assert (arch.compute_max_core, arch.sm_version, arch.smem_cap, arch.compute_capability) == (132, 90, 49152, "90")


def test_carver_without_a_device(monkeypatch):
    from tegula.carver.arch import driver

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        driver.get_num_sms()


# ---- 3. autotune over an eager @jit function; set_autotune_inputs ----

def eager_add():
    @tegula.jit(target="sm_90a")
    def add(A, B, block=128, threads=128):
        N = T.const("N")
        A: T.Tensor((N,), "float32")
        B: T.Tensor((N,), "float32")
        C = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]
        return C

    return add


EAGER_CONFIGS = [{"block": 128, "threads": 128}, {"block": 256, "threads": 128}, {"block": 512, "threads": 256}]


@pytest.fixture
def fake_bench(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    autotuner.clear_memory_cache()

    def install(latencies):
        bench = TimesInOrder(latencies)
        monkeypatch.setattr(autotuner, "_bench", bench)
        return bench

    yield install
    autotuner.clear_memory_cache()


def test_autotune_eager_compile_by_sizes(fake_bench):
    fake_bench([3.0, 1.0, 2.0])
    tuned = tegula.autotune(configs=EAGER_CONFIGS, warmup=1, rep=1)(eager_add())
    kernel = tuned.compile(N=4096)
    assert kernel.config == {"block": 256, "threads": 128} and kernel.latency == 1.0
    assert [p.name for p in kernel.params] == ["A", "B", "C"] and kernel.params[0].shape == (4096,)
    # Tuned once: a second compile of the same sizes reads the result back, timing nothing.
    assert tuned.compile(N=4096).config == {"block": 256, "threads": 128}


def test_autotune_eager_compile_by_tensors_and_given_tunable(fake_bench):
    bench = fake_bench([2.0, 1.0, 3.0])
    tuned = tegula.autotune(configs=EAGER_CONFIGS, warmup=1, rep=1)(eager_add())
    a = torch.zeros(2048)
    kernel = tuned.compile(a, a, threads=128)  # threads given: the three blocks are tried with it
    assert kernel.config == {"block": 256, "threads": 128} and bench.latencies == []


def test_autotune_of_eager_function_body_is_no_longer_refused():
    tuned = tegula.autotune(configs=EAGER_CONFIGS)(eager_add())
    assert tuned._eager and tuned.__name__ == "add"


def test_set_autotune_inputs_gives_the_timed_inputs(fake_bench, monkeypatch):
    seen = []
    bench = fake_bench([1.0, 2.0])
    monkeypatch.setattr(bench, "time", lambda kernel, inputs, warmup, rep: seen.append(inputs) or 1.0, raising=False)
    a, b = torch.ones(256), torch.full((256,), 2.0)
    tuned = tegula.autotune(configs=EAGER_CONFIGS[:2], warmup=1, rep=1)(eager_add())
    with autotuner.set_autotune_inputs(a, b):
        assert autotuner.get_autotune_inputs() == [a, b]
        tuned.compile(N=256)
    assert autotuner.get_autotune_inputs() is None
    assert len(seen) == 2 and all(inputs[0] is a and inputs[1] is b for inputs in seen)
    with autotuner.set_autotune_inputs([a]):
        assert autotuner.get_autotune_inputs() == [a]


def test_autotune_decorator_takes_early_stop():
    tuned = tegula.autotune(configs=EAGER_CONFIGS, early_stop=True, early_stop_factor=1.5)(eager_add())
    assert tuned.early_stop and tuned.early_stop_factor == 1.5
    with pytest.raises(ValueError, match="early_stop_factor"):
        tegula.autotune(configs=EAGER_CONFIGS, early_stop_factor=0.5)(eager_add())


def test_carver_cdna_is_named_but_refused():
    from tegula.carver.arch import CDNA

    with pytest.raises(ValueError, match="AMD devices are not supported"):
        CDNA("hip")


class H100:
    compute_max_core, smem_cap, max_smem_usage = 132, 49152, 232448


def test_matmul_template_hints_as_the_gemm_examples_read_them():
    from tegula.carver.roller.rasterization import NoRasterization
    from tegula.carver.template import MatmulTemplate

    big = MatmulTemplate(M=8192, N=8192, K=8192, in_dtype=T.float16, out_dtype=T.float16,
                         accum_dtype=T.float32).with_arch(H100())
    hints = big.recommend_hints(topk=3)
    assert [h.block for h in hints] == [[256, 128], [128, 256], [128, 128]]
    assert all(h.rstep == [32] and h.pipeline_stage == 3 and h.rasterization_plan is not NoRasterization
               for h in hints)
    small = MatmulTemplate(M=1024, N=1024, K=1024, in_dtype="float16", out_dtype="float16",
                           accum_dtype="float32").with_arch(H100())
    first = small.recommend_hints(topk=1)[0]
    assert first.block == [128, 64] and first.rasterization_plan is NoRasterization  # 128 blocks fill 132 SMs
    assert first.thread == [4, 2]
    fp8 = MatmulTemplate(M=4096, N=4096, K=4096, in_dtype="int8", out_dtype="int32", accum_dtype="int32")
    assert fp8.with_arch(H100()).recommend_hints(topk=1)[0].rstep == [64]


def test_matmul_template_equivalent_function_compiles():
    from tegula.carver.template import MatmulTemplate

    func = MatmulTemplate(M=1024, N=1024, K=1024, in_dtype="float16", out_dtype="float16",
                          accum_dtype="float32").with_arch(H100()).equivalent_function()
    kernel = tegula.compile(func, out_idx=[-1], target="sm_80")
    assert "tegula::gemm_ss<128, 64, 32, 4, 2" in kernel.get_kernel_source()  # the first hint: 8 warps, 4 x 2
    assert kernel.params[2].shape == (1024, 1024)


def test_matmul_template_reads_the_device_when_given_no_arch(monkeypatch):
    from tegula.carver.template import MatmulTemplate

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=0: FakeProps())
    assert MatmulTemplate(M=8192, N=8192, K=8192).recommend_hints(topk=1)[0].block == [256, 128]


def test_autotune_eager_call_runs_the_choice_and_remembers_it(monkeypatch):
    tuned = tegula.autotune(configs=EAGER_CONFIGS)(eager_add())
    searches, runs = [], []
    monkeypatch.setattr(tuned, "_search", lambda args, kwargs: searches.append(1) or autotuner.AutotuneResult(
        {"block": 256, "threads": 128, **kwargs}, 1.0, None))

    class Runs:  # stands for the eager function: records what the call would launch with
        fn = staticmethod(tuned._jit_fn.fn)

        def __call__(self, *args, **kwargs):
            runs.append(kwargs)
            return "outputs"

    tuned._jit_fn = Runs()
    a = torch.zeros(512)
    assert tuned(a, a) == "outputs" and tuned(a, a) == "outputs"
    assert runs == [{"block": 256, "threads": 128}] * 2 and len(searches) == 1  # tuned once
    tuned(a, a, threads=64)  # a given tunable stays as given, the rest as chosen
    assert runs[-1] == {"threads": 64, "block": 256} and len(searches) == 2
    tuned(torch.zeros(1024), a)  # other sizes: chosen again
    assert len(searches) == 3
