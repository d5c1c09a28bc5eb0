"""profiler.roofline() on the GPU: shipped kernels timed and placed on this GPU's roofline.
Their fractions of peak lie in (0, 1.2] (a little past 1 allows the copy bandwidth
measurement's own noise), the row kernels at large shapes are memory bound and the GEMM and
attention compute bound; `python -m tegula bench --quick` prints its table."""
import argparse
import importlib

import pytest
import torch

from tegula.cli import bench as bench_cli
from tegula.tools.hardware import DEVICES, device_spec

pytestmark = pytest.mark.gpu

rmsnorm = importlib.import_module("tegula.kernels.rmsnorm")
softmax = importlib.import_module("tegula.kernels.row_softmax")
gemm = importlib.import_module("tegula.kernels.gemm")
fa = importlib.import_module("tegula.kernels.flash_attention")


def _known_gpu():
    try:
        return device_spec(torch.cuda.get_device_name()) in DEVICES.values()
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _peaks_for_this_gpu():
    if not _known_gpu():
        pytest.skip(f"no peak numbers for {torch.cuda.get_device_name()}")


def _in_range(x):
    return 0 < x <= 1.2


@pytest.mark.parametrize("name", ["rms_norm", "softmax"])
def test_row_kernels_at_large_shapes_are_memory_bound(name):
    m, n = 32768, 4096
    x = torch.randn(m, n, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    if name == "rms_norm":
        kernel = rmsnorm.kernel_for(n, torch.float16, 1e-6)
        inputs = [x, torch.ones(n, device="cuda", dtype=torch.float16), y]
    else:
        kernel = softmax.kernel_for(n, torch.float16)
        inputs = [x, y]
    r = kernel.get_profiler().roofline(input_tensors=inputs)
    assert r.bound == "memory"
    assert r.copy_source == "measured" and r.time_ms > 0
    assert _in_range(r.bandwidth_fraction) and _in_range(r.peak_fraction)
    assert r.peak_fraction == pytest.approx(r.bandwidth_fraction)
    assert 0 < r.compute_fraction < r.bandwidth_fraction
    # The DRAM bytes of one pass: x read, y written (and a weight row).
    assert 4 * m * n <= r.dram_bytes <= 4 * m * n + 2 * n


def test_matmul_is_compute_bound():
    M = N = K = 4096
    kernel = gemm.kernel_for(M, N, K, torch.float16)
    r = kernel.get_profiler().roofline()
    assert r.tensor_flops == pytest.approx(2 * M * N * K, rel=0.07)  # whole tiles at ragged edges only
    assert r.bound == "compute"
    assert _in_range(r.tensor_fraction) and _in_range(r.compute_fraction) and _in_range(r.peak_fraction)
    assert _in_range(r.bandwidth_fraction)
    print(r)


def test_causal_attention_is_compute_bound():
    B, H, S, D = 2, 16, 2048, 128
    kernel = fa.kernel_for(B, H, H, S, S, D, True, 0, "bhsd", "float16", None)
    r = kernel.get_profiler().roofline()
    full = 4 * B * H * S * S * D
    assert full / 2 < r.tensor_flops < full * 0.6  # causal: the tiles at or below the diagonal
    assert r.bound == "compute"
    assert _in_range(r.tensor_fraction) and _in_range(r.peak_fraction)
    print(r)


def test_bench_quick_prints_the_table(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    out = tmp_path / "roofline.png"
    args = parser.parse_args(["--quick", "--kernel", "rms_norm", "--kernel", "matmul", "--kernel", "flash_decode",
                              "--out", str(out)])
    assert bench_cli.run(args) == 0
    text = capsys.readouterr().out
    lines = {line.split()[0]: line for line in text.splitlines() if line.split()}
    assert lines["rms_norm"].rstrip().endswith("memory")
    assert lines["matmul"].rstrip().endswith("compute")
    assert lines["flash_decode"].rstrip().endswith("memory")
    assert out.stat().st_size > 10_000


def test_analysis_takes_this_gpus_device_model_positionally():
    # TileLang's examples/analyze: Analyzer.analysis(program, CUDA("cuda")), the device a
    # carver.arch model of this GPU, its counts those of the program.
    from tegula.carver.arch import CUDA
    from tegula.tools import Analyzer

    program = gemm.matmul_program(1024, 1024, 1024, block_M=128, block_N=128, block_K=32, num_stages=3, threads=128)
    dev = CUDA("cuda")
    r = Analyzer.analysis(program, dev)
    assert r.total_flops == 2 * 1024 ** 3
    assert r.device == device_spec(torch.cuda.get_device_name()) and r.target == dev.target
