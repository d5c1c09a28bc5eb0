"""TileLang's Python API around the language, on the GPU: a dict target, T.dynamic of
several names, astype, autotune over an eager @jit function (the call returns the chosen
kernel's outputs), set_autotune_inputs, and tegula.carver's device properties."""
import pytest
import torch

import tegula
import tegula.language as T
from tegula import autotuner, env
from tegula.carver.arch import CUDA, driver

pytestmark = pytest.mark.gpu


def arch():
    return env.detect_arch()


def test_dict_target_runs():
    M, N = T.dynamic("M, N")

    @T.prim_func
    def shift(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 4), threads=128) as (bx, by):
            for i, j in T.Parallel(4, 32):
                B[by * 4 + i, bx * 32 + j] = (A[by * 4 + i, bx * 32 + j] + 1.0).astype(T.float16)

    kernel = tegula.compile(shift, out_idx=[-1], target={"kind": "cuda", "arch": arch()})
    assert kernel.target == arch()
    for m, n in ((8, 64), (13, 100)):
        a = torch.randn(m, n, device="cuda")
        torch.testing.assert_close(kernel(a), (a + 1).half())


def eager_add():
    @tegula.jit
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


CONFIGS = [{"block": 128, "threads": 128}, {"block": 256, "threads": 128}, {"block": 512, "threads": 256}]


def test_autotune_eager_call_returns_outputs(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    autotuner.clear_memory_cache()
    tuned = tegula.autotune(configs=CONFIGS, warmup=1, rep=2)(eager_add())
    a, b = torch.randn(1 << 16, device="cuda"), torch.randn(1 << 16, device="cuda")
    torch.testing.assert_close(tuned(a, b), a + b)
    kernel = tuned.compile(a, b)
    assert kernel.config in CONFIGS and kernel.latency > 0
    torch.testing.assert_close(kernel(a, b), a + b)
    torch.testing.assert_close(tuned(a, b, block=64, threads=64), a + b)  # every tunable given: not tuned


def test_set_autotune_inputs_times_on_given_inputs(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    autotuner.clear_memory_cache()
    tuned = tegula.autotune(configs=CONFIGS, warmup=1, rep=2)(eager_add())
    a, b = torch.ones(4096, device="cuda"), torch.full((4096,), 2.0, device="cuda")
    with autotuner.set_autotune_inputs(a, b):
        kernel = tuned.compile(N=4096)
    assert kernel.config in CONFIGS
    torch.testing.assert_close(kernel(a, b), a + b)


def test_autotune_disable_cache_tunes_again(monkeypatch, tmp_path):
    monkeypatch.setenv("TEGULA_CACHE_DIR", str(tmp_path))
    autotuner.clear_memory_cache()
    tuned = tegula.autotune(configs=CONFIGS, warmup=1, rep=2)(eager_add())
    tuned.compile(N=8192)
    timed = []
    real = autotuner._bench.time
    monkeypatch.setattr(autotuner._bench, "time", lambda *a: timed.append(1) or real(*a))
    tuned.compile(N=8192)
    assert timed == []  # remembered
    tegula.disable_cache()
    try:
        tuned.compile(N=8192)
    finally:
        tegula.enable_cache()
    assert len(timed) == len(CONFIGS)


def test_carver_reads_the_device():
    props = torch.cuda.get_device_properties(0)
    assert driver.get_num_sms() == props.multi_processor_count
    assert driver.get_max_dynamic_shared_size_bytes() >= driver.get_shared_memory_per_block() > 0
    device = CUDA("cuda")
    assert device.compute_max_core == props.multi_processor_count
    assert device.compute_capability == f"{props.major}{props.minor}"


def test_matmul_template_hints_run():
    from tegula.carver.template import MatmulTemplate

    template = MatmulTemplate(M=1024, N=512, K=256, in_dtype="float16", out_dtype="float16",
                              accum_dtype="float32").with_arch(CUDA("cuda"))
    assert template.recommend_hints(topk=4)
    kernel = tegula.compile(template.equivalent_function(), out_idx=[-1])
    a = torch.randn(1024, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), (a.float() @ b.float().T).half(), rtol=1e-2, atol=1e-2)
