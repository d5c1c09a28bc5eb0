"""tegula.autotune without a GPU: a real DSL kernel compiled for sm_90a, timed by a fake
bench (the module's `_bench` hook) whose latencies the tests choose. Covers the choice,
the explicit-config path, the memory and disk caches, and failing configurations."""
import json

import pytest
import torch

import tegula
import tegula.language as T
from tegula import autotuner
from tegula.profiler import Profiler

try:
    import tegula._C  # noqa: F401
except ImportError:
    pytest.skip("tegula._C is not built", allow_module_level=True)


def add_kernel(N, block=128, threads=128):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                C[bx * block + i] = A[bx * block + i] + B[bx * block + i]

    return main


CONFIGS = [{"block": 128, "threads": 128}, {"block": 256, "threads": 128}, {"block": 512, "threads": 256}]


def tuned(configs=CONFIGS, **options):
    """A fresh decorated function each time, as a new process would have."""
    return tegula.autotune(configs=configs, warmup=1, rep=1, **options)(
        tegula.jit(out_idx=[-1], target="sm_90a")(add_kernel))


class FakeBench(autotuner.CudaBench):
    """Latencies from a list, in the order configurations are timed; never runs a kernel."""

    def __init__(self, latencies=(), failing_check=()):
        self.latencies = list(latencies)
        self.failing_check = set(failing_check)  # indices (in timing order) whose check fails
        self.timed, self.checked, self.input_sets = [], [], 0

    def require_device(self):
        pass

    def device_name(self):
        return "Fake GPU"

    def make_inputs(self, kernel, supply_type):
        self.input_sets += 1
        return Profiler(kernel, supply_type, device="cpu").get_inputs()

    def check(self, kernel, supply_type, ref_prog, atol, rtol, max_mismatched_ratio):
        self.checked.append(kernel)
        if len(self.checked) - 1 in self.failing_check:
            raise AssertionError("output 'C': 7 of 4096 elements differ")

    def time(self, kernel, inputs, warmup, rep):
        assert [tuple(x.shape) for x in inputs] == [tuple(p.shape) for p in kernel.params if not p.is_output]
        self.timed.append(kernel)
        return self.latencies[len(self.timed) - 1]


@pytest.fixture
def bench(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TEGULA_DISABLE_CACHE", raising=False)
    autotuner.clear_memory_cache()
    fake = FakeBench([0.5, 0.2, 0.9])
    monkeypatch.setattr(autotuner, "_bench", fake)
    yield fake
    autotuner.clear_memory_cache()


def cache_files(tmp_path):
    return sorted((tmp_path / "autotune").glob("*.json")) if (tmp_path / "autotune").exists() else []


def test_fastest_config_is_chosen_and_reported(bench, capsys):
    fn = tuned()
    kernel = fn(4096)
    assert kernel.config == CONFIGS[1] and kernel.latency == 0.2
    assert kernel is fn._jit()(4096, **CONFIGS[1])
    assert len(bench.timed) == 3 and bench.input_sets == 1  # inputs made once per session
    assert [r[1] for r in kernel.autotune_results] == [0.5, 0.2, 0.9]
    err = capsys.readouterr().err
    assert "autotune add_kernel: 2/3 block=256 threads=128 0.200 ms (best 0.200 ms)" in err
    assert "autotune add_kernel: 3/3 block=512 threads=256 0.900 ms (best 0.200 ms)" in err
    assert "best block=256 threads=128 0.200 ms; 3/3 ran" in err


def test_explicit_config_compiles_without_tuning_or_a_gpu(monkeypatch, tmp_path):
    # The real bench stays in place: this path must not need the device at all.
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotuner.CudaBench, "time", lambda *a: pytest.fail("timed an explicit call"))
    kernel = tuned()(4096, block=64, threads=64)
    assert isinstance(kernel, tegula.JITKernel)
    assert "64" in kernel.get_kernel_source() and not cache_files(tmp_path)
    assert not hasattr(kernel, "latency")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_tuning_without_a_gpu_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    autotuner.clear_memory_cache()
    with pytest.raises(RuntimeError, match="autotuning needs a CUDA device"):
        tuned()(4096)


def test_partly_explicit_call_tunes_the_rest(bench):
    kernel = tuned()(4096, threads=128)
    # threads is fixed, so the configs collapse to three distinct blocks, all timed.
    assert len(bench.timed) == 3
    assert kernel.config == {"block": 256, "threads": 128}


def test_results_are_cached_in_memory_and_on_disk(bench, monkeypatch, tmp_path):
    first = tuned()(4096)
    files = cache_files(tmp_path)
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert entry["config"] == CONFIGS[1] and entry["latency"] == 0.2 and entry["device"] == "Fake GPU"
    assert not list((tmp_path / "autotune").glob("*.tmp"))

    again = tuned()(4096)  # same process: the memo
    assert len(bench.timed) == 3 and again.config == first.config

    autotuner.clear_memory_cache()  # as a new process: only the JSON is left
    fresh = FakeBench([])
    monkeypatch.setattr(autotuner, "_bench", fresh)
    kernel = tuned()(4096)
    assert fresh.timed == [] and fresh.input_sets == 0
    assert kernel.config == CONFIGS[1] and kernel.latency == 0.2
    assert len(kernel.autotune_results) == 3


def test_other_arguments_or_configs_tune_again(bench):
    bench.latencies = [0.5, 0.2, 0.9, 0.3, 0.1, 0.4, 0.7, 0.6]
    tuned()(4096)
    assert tuned()(2048).config == CONFIGS[1]  # 0.1: a new key for N=2048...
    assert len(bench.timed) == 6
    assert tuned(CONFIGS[:2])(4096).config == CONFIGS[1]  # ...and for another config list
    assert len(bench.timed) == 8


def test_disable_cache_writes_no_file(bench, monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_DISABLE_CACHE", "1")
    tuned()(4096)
    assert cache_files(tmp_path) == []


def test_config_that_fails_to_compile_is_skipped(bench, capsys):
    configs = [{"block": 128, "threads": 2048}, {"block": 256, "threads": 128}, {"block": 512, "threads": 256}]
    bench.latencies = [0.7, 0.3]
    kernel = tuned(configs)(4096)
    assert kernel.config == configs[2] and len(bench.timed) == 2
    config, latency, error = kernel.autotune_results[0]
    assert config == configs[0] and latency is None and "threads must be an int in 1..1024" in error
    assert "1/3 block=128 threads=2048 failed (compile: TegulaCompileError" in capsys.readouterr().err


def test_every_config_failing_names_the_function(bench):
    configs = [{"block": 128, "threads": 2048}, {"block": 256, "threads": 4096}]
    with pytest.raises(RuntimeError, match=r"every configuration of add_kernel failed \(2\)") as info:
        tuned(configs)(4096)
    assert "threads=4096: compile:" in str(info.value)
    assert bench.timed == []


def test_every_config_failing_shows_the_first_error_on_the_first_line(bench):
    # A runner that keeps one line of the message (a conformance table) still shows why.
    configs = [{"block": 128, "threads": 2048}, {"block": 256, "threads": 4096}]
    with pytest.raises(RuntimeError) as info:
        tuned(configs)(4096)
    first, *rest = str(info.value).splitlines()
    assert "the first, block=128 threads=2048: compile: TegulaCompileError" in first
    assert "threads must be an int in 1..1024" in first and "2048" in first
    full = str(info.value).split("The first configuration's error in full:\n", 1)[1]
    assert full.startswith("compile: TegulaCompileError") and len(full.splitlines()) > 1  # the caret lines too


def test_failed_check_skips_the_config_unless_skipped(bench, tmp_path):
    reference = lambda a, b: a + b  # noqa: E731 - the fake bench never calls it
    bench.failing_check, bench.latencies = {1}, [0.5, 0.9]  # the failed config is never timed
    kernel = tuned(ref_prog=reference)(4096)
    assert kernel.config == CONFIGS[0] and len(bench.checked) == 3
    assert kernel.autotune_results[1][2].startswith("check: AssertionError")

    autotuner.clear_memory_cache()  # and the disk: the check settings are not part of the key
    for path in cache_files(tmp_path):
        path.unlink()
    bench.latencies, bench.timed, bench.checked = [0.5, 0.2, 0.9], [], []
    assert tuned(ref_prog=reference, skip_check=True)(4096).config == CONFIGS[1]
    assert bench.checked == []


def test_callable_configs_get_the_call_arguments(bench):
    seen = []

    def configs(N):
        seen.append(N)
        return [{"block": b, "threads": 128} for b in (128, 256) if b <= N]

    bench.latencies = [0.4, 0.3]
    assert tuned(configs)(4096).config == {"block": 256, "threads": 128}
    assert seen == [4096]


def test_config_naming_an_unknown_argument_is_an_error(bench):
    with pytest.raises(TypeError, match=r"names \['num_stages'\]"):
        tuned([{"block": 128, "num_stages": 3}])(4096)


def test_autotuner_from_kernel_in_tilelang_style(bench):
    def add_4096(block=128, threads=128):
        return add_kernel(4096, block, threads)

    tuner = autotuner.AutoTuner.from_kernel(add_4096, configs=CONFIGS)
    tuner.set_compile_args(out_idx=[-1], target="sm_90a").set_profile_args(atol=1e-3)
    result = tuner.run(warmup=1, rep=1)
    assert result.config == CONFIGS[1] and result.latency == 0.2
    assert result.kernel.config == CONFIGS[1] and result.kernel.out_idx == [2]


def test_package_exposes_autotune():
    assert tegula.autotune is autotuner.autotune



# ---- a configuration's pass_configs (TileLang's reserved key) ----

VECTORIZE = [{"block": 256, "threads": 128, "pass_configs": {tegula.PassConfigKey.TIR_DISABLE_VECTORIZE: off}}
             for off in (True, False)]


@pytest.mark.parametrize("latencies,vectorized", [([0.1, 0.5], False), ([0.5, 0.1], True)])
def test_pass_configs_of_a_config_compile_it_and_are_reported(bench, latencies, vectorized):
    bench.latencies = latencies
    kernel = tuned(VECTORIZE)(4096)
    chosen = VECTORIZE[vectorized]
    assert kernel.config == chosen and kernel.latency == 0.1
    assert ("float4" in kernel.get_kernel_source()) == vectorized
    # Each configuration was built with its own pass configurations.
    assert ["float4" in k.get_kernel_source() for k in bench.timed] == [False, True]


def test_pass_configs_go_over_the_functions_own(bench):
    # The function disables vectorisation; a configuration's False turns it back on.
    fn = tegula.autotune(configs=VECTORIZE[1:] + [{"block": 256, "threads": 128}], warmup=1, rep=1)(
        tegula.jit(out_idx=[-1], target="sm_90a", pass_configs={"tir.disable_vectorize": True})(add_kernel))
    bench.latencies = [0.5, 0.1]
    fn(4096)
    assert ["float4" in k.get_kernel_source() for k in bench.timed] == [True, False]


def test_pass_configs_alone_are_a_choice(bench):
    bench.latencies = [0.5, 0.1]
    configs = [{"pass_configs": c["pass_configs"]} for c in VECTORIZE]
    kernel = tuned(configs)(4096)
    assert len(bench.timed) == 2 and kernel.config == configs[1]


def test_a_call_giving_every_tunable_compiles_without_the_pass_configs(bench):
    kernel = tuned(VECTORIZE)(4096, block=256, threads=128)
    assert bench.timed == [] and "float4" in kernel.get_kernel_source()


def test_pass_configs_choice_is_cached_on_disk(bench, monkeypatch, tmp_path):
    bench.latencies = [0.1, 0.5]
    tuned(VECTORIZE)(4096)
    autotuner.clear_memory_cache()  # as a new process: the JSON holds the keys as strings
    fresh = FakeBench([])
    monkeypatch.setattr(autotuner, "_bench", fresh)
    kernel = tuned(VECTORIZE)(4096)
    assert fresh.timed == [] and kernel.config == VECTORIZE[0]
    assert "float4" not in kernel.get_kernel_source()


def test_autotuner_from_kernel_with_pass_configs(bench):
    def add_4096(block=128, threads=128):
        return add_kernel(4096, block, threads)

    bench.latencies = [0.5, 0.1]
    tuner = autotuner.AutoTuner.from_kernel(add_4096, configs=VECTORIZE)
    result = tuner.set_compile_args(out_idx=[-1], target="sm_90a").run(warmup=1, rep=1, enable_grouped_compile=True)
    assert result.config == VECTORIZE[1] and result.ref_latency is None
    assert "float4" in result.kernel.get_kernel_source()


@pytest.mark.parametrize("pass_configs,error,match", [
    ({"tl.no_such_key": True}, ValueError, r"'pass_configs': unknown pass config key 'tl.no_such_key'"),
    ({"tl.config_index_bitwidth": 64}, ValueError, r"'pass_configs': .*tl.config_index_bitwidth"),
    ([("tir.disable_vectorize", True)], TypeError, r"'pass_configs' must be a dict"),
])
def test_bad_pass_configs_name_the_configuration(bench, pass_configs, error, match):
    with pytest.raises(error, match=match) as info:
        tuned([{"block": 128, "threads": 128, "pass_configs": pass_configs}])(4096)
    assert "tegula.autotune(add_kernel): configuration" in str(info.value)
