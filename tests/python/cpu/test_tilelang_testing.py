"""The names TileLang's tests and examples import from `tilelang.testing`,
`tilelang.utils.tensor` and `tilelang` (cache switches, get_kernel_source), each with
TileLang's meaning, on the CPU."""
import os
import random
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt
from tegula.testing import markers
from tegula.utils.tensor import get_tensor_supply, map_torch_type, torch_assert_close

# Every name of tilelang.testing that TileLang's language tests and examples use.
USED_NAMES = [
    "requires_cuda", "requires_cuda_compute_version", "requires_cuda_compute_version_ge",
    "requires_cuda_compute_version_gt", "requires_cuda_compute_version_eq", "requires_cuda_compute_version_lt",
    "requires_cuda_compute_version_le", "requires_package", "requires_metal", "requires_rocm", "requires_llvm",
    "requires_cdna", "requires_cuda_or_cdna", "requires_gfx950", "set_random_seed", "torch_assert_close", "main",
    "process_func", "regression",
]


def _fresh():
    # A named function: pytest's marks do not attach to lambdas.
    def target():
        pass

    return target


def _skip_condition(func) -> bool:
    """True when the marks on func skip it."""
    return any(m.name == "skipif" and m.args[0] for m in getattr(func, "pytestmark", []))


def test_every_name_the_tests_use_is_there():
    assert [n for n in USED_NAMES if not hasattr(tt, n)] == []
    assert [n for n in USED_NAMES if n not in tt.__all__] == []


def test_requires_cuda_skips_without_a_gpu_and_runs_with_one(monkeypatch):
    monkeypatch.setattr(markers, "cuda_compute_version", lambda: None)
    assert _skip_condition(tt.requires_cuda(_fresh()))
    assert _skip_condition(tt.requires_cuda()(_fresh()))  # also usable called
    monkeypatch.setattr(markers, "cuda_compute_version", lambda: (9, 0))
    assert not _skip_condition(tt.requires_cuda(_fresh()))


@pytest.mark.parametrize("decorator, runs", [
    (lambda: tt.requires_cuda_compute_version(9, 0), True),
    (lambda: tt.requires_cuda_compute_version(9), True),
    (lambda: tt.requires_cuda_compute_version(10, 0), False),
    (lambda: tt.requires_cuda_compute_version_ge(8, 9), True),
    (lambda: tt.requires_cuda_compute_version_gt(9, 0), False),
    (lambda: tt.requires_cuda_compute_version_eq(9, 0), True),
    (lambda: tt.requires_cuda_compute_version_eq(8, 0), False),
    (lambda: tt.requires_cuda_compute_version_lt(10), True),
    (lambda: tt.requires_cuda_compute_version_le(8, 9), False),
    (lambda: tt.requires_cuda_compute_version(9, 0, mode="le"), True),
])
def test_compute_version_compares_as_tilelang_does(monkeypatch, decorator, runs):
    monkeypatch.setattr(markers, "cuda_compute_version", lambda: (9, 0))
    assert _skip_condition(decorator()(_fresh())) is not runs


def test_compute_version_without_a_gpu_skips_and_says_why(monkeypatch):
    monkeypatch.setattr(markers, "cuda_compute_version", lambda: None)
    func = tt.requires_cuda_compute_version_lt(10)(_fresh())
    reasons = [m.kwargs["reason"] for m in func.pytestmark if m.args[0]]
    assert "needs a CUDA GPU, and none is visible" in reasons  # (0, 0) < (10, 0), but there is no GPU
    with pytest.raises(ValueError, match="Invalid mode: between"):
        tt.requires_cuda_compute_version(9, 0, mode="between")


def test_other_backends_always_skip_and_packages_are_looked_for():
    for name in ("requires_metal", "requires_rocm", "requires_llvm", "requires_cdna", "requires_gfx950"):
        assert _skip_condition(getattr(tt, name)(_fresh())), name
    assert not _skip_condition(tt.requires_package("json", "os")(_fresh()))
    assert _skip_condition(tt.requires_package("json", "no_such_package_here")(_fresh()))


def test_decorators_mark_classes_too(monkeypatch):
    monkeypatch.setattr(markers, "cuda_compute_version", lambda: None)

    @tt.requires_cuda
    class TestSomething:
        pass

    assert _skip_condition(TestSomething)


def test_set_random_seed_is_reproducible():
    def draw():
        return random.random(), float(np.random.rand()), torch.rand(3).tolist()

    tt.set_random_seed(7)
    first = draw()
    tt.set_random_seed(7)
    assert draw() == first
    tt.set_random_seed()  # TileLang's default seed, 42
    default = draw()
    tt.set_random_seed(42)
    assert draw() == default != first


def test_torch_assert_close_allows_the_mismatch_ratio():
    ref = torch.zeros(1000)
    out = ref.clone()
    out[0] = 1.0  # 1 of 1000 differs: int(1000 * 0.001) = 1 is allowed
    assert torch_assert_close(out, ref) is True
    out[1] = 1.0
    with pytest.raises(AssertionError, match=r"Too many mismatched elements: 2 > 1 \(0.10% allowed, but get 0.20%\)"):
        torch_assert_close(out, ref)
    assert torch_assert_close(out, ref, max_mismatched_ratio=0.002)
    assert torch_assert_close(out, ref, atol=1.0, rtol=0.0)
    with pytest.raises(AssertionError, match=r"First mismatch at index \[0\]: lhs=1.000000, rhs=0.000000"):
        torch_assert_close(out, ref, max_mismatched_ratio=0.0)


def test_torch_assert_close_checks_attributes_as_tilelang_does():
    a = torch.ones(4, 4)
    with pytest.raises(AssertionError, match="attribute 'shape'"):
        torch_assert_close(a, torch.ones(16))
    with pytest.raises(AssertionError, match="attribute 'dtype'"):
        torch_assert_close(a.half(), a)
    assert torch_assert_close(a.half(), a, check_dtype=False)
    with pytest.raises(AssertionError, match=r"attribute 'stride\(\)'"):
        torch_assert_close(a.t().contiguous().t(), a.contiguous(), check_stride=True)
    nan = torch.full((3,), float("nan"))
    assert torch_assert_close(nan, nan.clone())
    with pytest.raises(AssertionError, match="Too many mismatched"):
        torch_assert_close(nan, nan.clone(), equal_nan=False)
    assert torch_assert_close(torch.arange(5, dtype=torch.int32), torch.arange(5, dtype=torch.int64), check_dtype=False)
    assert tt.torch_assert_close is torch_assert_close


def test_map_torch_type_and_tensor_supply():
    assert map_torch_type("float16") is torch.float16
    assert map_torch_type(T.bfloat16) is torch.bfloat16
    assert map_torch_type("float8_e4m3") is torch.float8_e4m3fn
    assert map_torch_type("float8_e5m2") is torch.float8_e5m2
    assert map_torch_type(torch.int8) is torch.int8
    with pytest.raises(ValueError, match="names no torch dtype"):
        map_torch_type("float7")
    supply = get_tensor_supply(tegula.TensorSupplyType.Integer)
    t = supply(types.SimpleNamespace(shape=[3, 5], dtype=torch.float16, name="A"))
    assert t.shape == (3, 5) and t.dtype == torch.float16 and t.min() >= -2 and t.max() <= 2
    ones = get_tensor_supply(tegula.TensorSupplyType.One)(types.SimpleNamespace(shape=[2], dtype=torch.int32))
    assert ones.tolist() == [1, 1]
    with pytest.raises(ValueError, match="static shape"):
        supply(types.SimpleNamespace(shape=[None, 4], dtype=torch.float32, name="x"))


def regression_fake_case():
    tt.process_func(lambda size: 0.5 * size, "fake_kernel", size=3)


def test_process_func_and_regression_print_latencies(capsys):
    tt.regression()
    out = capsys.readouterr().out
    assert "fake_case" in out and "fake_kernel: 1.5" in out


def test_cache_switches():
    was = tegula.is_cache_enabled()
    try:
        tegula.disable_cache()
        assert tegula.is_cache_enabled() is False
        tegula.enable_cache()
        assert tegula.is_cache_enabled() is True
    finally:
        (tegula.enable_cache if was else tegula.disable_cache)()


def _python(code: str, env: dict, cwd=None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("TEGULA_CACHE_DIR", "TEGULA_DISABLE_CACHE"))}
    return subprocess.run([sys.executable, "-c", code], env=dict(full, **env), cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_tilelang_cache_variables_name_tegulas(tmp_path):
    code = "import tegula; print(tegula.cache_dir()); print(tegula.is_cache_enabled())"
    proc = _python(code, {"TILELANG_CACHE_DIR": str(tmp_path), "TILELANG_DISABLE_CACHE": "1"})
    assert proc.stdout.split() == [str(tmp_path), "False"], proc.stderr
    proc = _python(code, {"TILELANG_CACHE_DIR": str(tmp_path / "theirs"), "TEGULA_CACHE_DIR": str(tmp_path)})
    assert proc.stdout.split() == [str(tmp_path), "True"], proc.stderr  # Tegula's own variable wins


def test_main_runs_pytest_on_the_calling_file(tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent("""
        import tegula.testing

        def test_runs():
            assert True

        @tegula.testing.requires_cuda_compute_version_ge(99, 0)
        def test_needs_a_future_gpu():
            assert False

        if __name__ == "__main__":
            tegula.testing.main()
    """))
    proc = subprocess.run([sys.executable, "test_mine.py", "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout


def test_get_kernel_source_takes_kernel_only():
    @T.prim_func
    def copy(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                B[i] = A[i]

    kernel = tegula.compile(copy, target="sm_90a")
    assert kernel.get_kernel_source(kernel_only=True) == kernel.get_kernel_source() == \
        kernel.get_kernel_source(kernel_only=False)
