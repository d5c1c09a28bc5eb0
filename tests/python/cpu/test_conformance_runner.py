"""scripts/port_examples.py, the conformance runner, on the CPU: a small fake TileLang
checkout (programs and language tests that need no GPU) is run and each result classified;
the classifier itself on tracebacks of each kind; the side-by-side comparison."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "port_examples.py"


def _load_runner():
    spec = importlib.util.spec_from_file_location("port_examples", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


runner = _load_runner()

PROGRAMS = {
    "examples/gemm/example_pass.py": """
        import torch
        import tilelang
        import tilelang.language as T
        from tilelang.utils.tensor import torch_assert_close

        if __name__ == "__main__":
            torch_assert_close(torch.ones(8), torch.ones(8))
            print("TileLang: 0.25 ms")
    """,
    "examples/gemm/example_wrong.py": """
        import torch
        import tilelang.testing

        if __name__ == "__main__":
            tilelang.testing.torch_assert_close(torch.zeros(100), torch.ones(100), max_mismatched_ratio=0.5)
    """,
    "examples/gemm/example_missing_t.py": """
        import tilelang
        import tilelang.language as T

        def build():
            @T.prim_func
            def f(A: T.Tensor((128,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    bar = T.alloc_quantum_barrier(1)
            return f

        if __name__ == "__main__":
            build()
    """,
    "examples/gemm/example_tvm.py": """
        import tilelang
        from tilelang import tvm

        if __name__ == "__main__":
            pass
    """,
    "examples/gemm/example_compile_error.py": """
        import tilelang
        import tilelang.language as T

        def build():
            @T.prim_func
            def f(A: T.Tensor((128,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    x = 0
                    while x < 3:
                        x += 1
            return f

        if __name__ == "__main__":
            tilelang.compile(build())
    """,
    "examples/gemm/helper_without_main.py": "X = 1\n",
    "examples/gemm/test_example_gemm.py": "if __name__ == '__main__':\n    raise SystemExit(3)\n",
    "examples/amd/example_amd.py": "if __name__ == '__main__':\n    raise SystemExit(3)\n",
    "testing/python/language/test_fake_language.py": """
        import torch
        import tilelang
        import tilelang.testing
        import tilelang.language as T


        def test_pass():
            tilelang.testing.set_random_seed(0)
            assert torch.rand(1).item() >= 0


        def test_wrong():
            tilelang.testing.torch_assert_close(torch.zeros(10), torch.ones(10))


        @tilelang.testing.requires_cuda_compute_version_ge(99, 0)
        def test_future_gpu():
            pass


        def test_missing_module():
            import tilelang.metal  # noqa: F401


        if __name__ == "__main__":
            tilelang.testing.main()
    """,
    "testing/python/language/test_fake_import.py": """
        import tilelang.testing
        import some_package_that_is_not_installed  # noqa: F401


        def test_never_collected():
            pass
    """,
}


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    root = tmp_path_factory.mktemp("tilelang-checkout")
    for rel, text in PROGRAMS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.fixture(scope="module")
def run(checkout, tmp_path_factory):
    out = tmp_path_factory.mktemp("results") / "tegula.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(checkout), "--jobs", "2", "--timeout", "100",
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out) as f:
        return proc.stdout, json.load(f)


def test_discovery_leaves_out_tests_helpers_and_other_backends(checkout):
    examples, tests, other = runner.discover(str(checkout), {"examples", "language"}, None)
    names = sorted(os.path.basename(p) for p in examples)
    assert names == ["example_compile_error.py", "example_missing_t.py", "example_pass.py", "example_tvm.py",
                     "example_wrong.py"]
    assert [os.path.basename(p) for p in other] == ["example_amd.py"]
    assert sorted(os.path.basename(p) for p in tests) == ["test_fake_import.py", "test_fake_language.py"]


def test_every_result_is_classified(run):
    _, data = run
    got = {r["id"]: (r["status"], r["detail"]) for r in data["results"]}
    assert data["engine"] == "tegula"
    assert got["examples/gemm/example_pass.py"] == ("pass", "")
    assert got["examples/gemm/example_wrong.py"][0] == "wrong"
    assert "Too many mismatched elements" in got["examples/gemm/example_wrong.py"][1]
    assert got["examples/gemm/example_missing_t.py"] == ("missing", "T.alloc_quantum_barrier (at example_missing_t.py:9)")
    assert got["examples/gemm/example_tvm.py"] == ("dependency", "tvm")
    status, detail = got["examples/gemm/example_compile_error.py"]
    assert status == "compile" and detail.startswith("example_compile_error.py:10: a while loop in a kernel tests a kernel value")
    lang = "testing/python/language/test_fake_language.py::"
    assert got[lang + "test_pass"] == ("pass", "")
    assert got[lang + "test_wrong"][0] == "wrong"
    assert got[lang + "test_future_gpu"][0] == "skip"
    assert got[lang + "test_missing_module"] == ("missing", "tilelang.metal")
    assert got["testing/python/language/test_fake_import.py"] == ("dependency", "some_package_that_is_not_installed")
    latency = [r.get("latency_ms") for r in data["results"] if r["id"] == "examples/gemm/example_pass.py"]
    assert latency == [0.25]


def test_the_table_has_a_summary_line_per_suite(run):
    stdout, _ = run
    assert "examples: 1 pass, 1 wrong, 1 compile, 1 missing, 1 dependency (of 5)" in stdout
    assert "language tests: 1 pass of 5" in stdout
    assert "not run: 1 examples of other backends" in stdout


def test_compare_shows_what_tegula_does_on_what_tilelang_passes(run, tmp_path):
    _, data = run
    theirs = dict(data, engine="tilelang", results=[dict(r, status="pass") for r in data["results"]])
    a, b = tmp_path / "tilelang.json", tmp_path / "tegula.json"
    a.write_text(json.dumps(theirs))
    b.write_text(json.dumps(data))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(a), str(b)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "examples: tilelang passes 5; tegula on those: 1 pass, 1 wrong, 1 compile, 1 missing, 1 dependency" \
        in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if "example_missing_t.py" in line)
    assert row.split()[0] == "missing" and "T.alloc_quantum_barrier" in row


def test_compare_counts_the_language_tests_that_do_not_import_tvm(tmp_path):
    def rec(rid, status, detail=""):
        return {"suite": "language", "id": rid, "file": rid.split("::")[0], "status": status, "detail": detail}
    ids = [f"testing/python/language/test_x.py::t{i}" for i in range(5)]
    theirs = {"engine": "tilelang", "results": [rec(i, "pass") for i in ids]}
    ours = {"engine": "tegula", "results": [rec(ids[0], "pass"), rec(ids[1], "pass"), rec(ids[2], "missing", "T.x"),
                                            rec(ids[3], "dependency", "tvm"), rec(ids[4], "dependency", "numba")]}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(theirs))
    b.write_text(json.dumps(ours))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--compare", str(a), str(b)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "language tests that do not import tvm: tegula passes 2 of the 4 tilelang passes (50 %)" in proc.stdout


def test_an_example_out_of_memory_beside_others_runs_again_alone(tmp_path):
    class Again:
        def __init__(self):
            self.ran = []

        def example(self, path):
            self.ran.append(path)
            return [runner.result("examples", "examples/a.py", "examples/a.py", "pass")]

    results = [runner.result("examples", "examples/a.py", "examples/a.py", "error",
                             "OutOfMemoryError: CUDA out of memory. Tried to allocate 16.00 GiB"),
               runner.result("examples", "examples/b.py", "examples/b.py", "error", "ValueError: x"),
               runner.result("language", "t.py::t", "t.py", "error", "OutOfMemoryError: CUDA out of memory")]
    again = Again()
    out = runner.rerun_out_of_memory(again, str(tmp_path), results)
    assert again.ran == [os.path.join(str(tmp_path), "examples/a.py")]
    assert out[0]["status"] == "pass" and "run again alone" in out[0]["detail"]
    assert out[1]["status"] == "error" and out[2]["status"] == "error"


def _exc(kind, message, frames=()):
    return {"type": kind, "message": f"{kind}: {message}", "frames": [list(f) for f in frames]}


@pytest.mark.parametrize("exc, rc, expected", [
    (None, 0, ("pass", "")),
    (None, None, ("timeout", "after 120 s")),
    (None, -11, ("crash", "killed by SIGSEGV")),
    (_exc("ModuleNotFoundError", "No module named 'tvm'"), 1, ("dependency", "tvm")),
    (_exc("ModuleNotFoundError", "No module named 'tilelang.carver'"), 1, ("missing", "tilelang.carver")),
    (_exc("ModuleNotFoundError", "No module named 'tilelang'"), 1, ("dependency", "tilelang")),
    (_exc("ImportError", "cannot import name 'tvm' from 'tegula' (/x/tegula/__init__.py)"), 1, ("dependency", "tvm")),
    (_exc("ImportError", "cannot import name 'Fragment' from 'tegula.layout' (/x)"), 1,
     ("missing", "tilelang.layout.Fragment")),
    (_exc("AttributeError", "module 'tegula.language' has no attribute 'reshape'"), 1, ("missing", "T.reshape")),
    (_exc("AttributeError", "'JITKernel' object has no attribute 'get_host_source'"), 1,
     ("missing", "JITKernel.get_host_source")),
    (_exc("AttributeError", "TL_REDUCER_FORCE_BASELINE"), 1, ("missing", "TL_REDUCER_FORCE_BASELINE")),
    (_exc("TypeError", "compile() got an unexpected keyword argument 'foo'"), 1, ("missing", "compile(foo=)")),
    (_exc("tegula.TegulaCompileError", "/ck/examples/a.py:12:8: T.Parallel extents must be constants\n  src\n  ^"), 1,
     ("compile", "a.py:12: T.Parallel extents must be constants")),
    (_exc("RuntimeError", "CUDA error: an illegal memory access was encountered"), 1,
     ("crash", "RuntimeError: CUDA error: an illegal memory access was encountered")),
    (_exc("AssertionError", "mismatch", [("/ck/examples/a.py", 3, "main")]), 1, ("wrong", "mismatch")),
    (_exc("AssertionError", "", [("/site/tegula/profiler.py", 9, "assert_allclose")]), 1, ("wrong", "AssertionError")),
    (_exc("AssertionError", "assert 'tl::MaxOpNan' in '// Generated by Tegula for sm_90a.'",
          [("/ck/testing/t.py", 5, "test_x")]), 1, ("text", "assert 'tl::MaxOpNan' in '// Generated by Tegula for sm_90a.'")),
    (_exc("AssertionError", "Regex pattern did not match.", [("/ck/testing/t.py", 5, "test_x")]), 1,
     ("text", "Regex pattern did not match.")),
    # TileLang's tests that read its host code (TVM FFI calls) or its printed IR.
    (_exc("AssertionError", "assert '(((TVMFFIAny*)stack_ffi_any)[3].type_index) = 1;' in '// Generated by x'",
          [("/ck/testing/t.py", 5, "test_x")]), 1,
     ("text", "assert '(((TVMFFIAny*)stack_ffi_any)[3].type_index) = 1;' in '// Generated by x'")),
    (_exc("AssertionError", "assert 'A[bx_1] = by' in 'kernel stateless(A: int32[8]):'",
          [("/ck/testing/t.py", 5, "test_x")]), 1, ("text", "assert 'A[bx_1] = by' in 'kernel stateless(A: int32[8]):'")),
    (_exc("AssertionError", "assert 3.0 == 4.0", [("/ck/testing/t.py", 5, "test_x")]), 1, ("wrong", "assert 3.0 == 4.0")),
    (_exc("AssertionError", "bad layout", [("/site/tilelang/layout/x.py", 9, "infer")]), 1,
     ("error", "AssertionError in x.py:9 (infer): bad layout")),
    (_exc("ValueError", "shapes differ"), 1, ("error", "ValueError: shapes differ")),
    # TileLang's minference example builds its own CUDA ops with nvcc before any kernel runs.
    (_exc("IndexError", "list index out of range",
          [("/ck/examples/m/x.py", 58, "_load_ops"), ("/site/torch/utils/cpp_extension.py", 2600, "_get_cuda_arch_flags")]),
     1, ("dependency", "torch.utils.cpp_extension: the program builds its own CUDA extension with nvcc "
                       "(IndexError: list index out of range)")),
])
def test_classify(exc, rc, expected):
    assert runner.classify(rc, exc, "", "/ck", 120) == expected


def test_a_pytest_collection_error_is_read_through():
    message = ("_pytest.nodes.Collector.CollectError: ImportError while importing test module 'x.py'.\n"
               "Traceback:\n...\nE   ModuleNotFoundError: No module named 'tvm'")
    exc = {"type": "_pytest.nodes.Collector.CollectError", "message": message, "frames": []}
    assert runner.classify(1, exc, "", "/ck") == ("dependency", "tvm")


def test_parse_traceback_takes_the_last_exception_and_its_frames():
    stderr = textwrap.dedent("""\
        Traceback (most recent call last):
          File "/a.py", line 1, in <module>
        KeyError: 'first'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/ck/examples/b.py", line 7, in main
            T.copy(A, B)
            ^^^^^^^^^^^^
          File "/site/tegula/frontend/x.py", line 3, in parse
        tegula.TegulaCompileError: /ck/examples/b.py:7:4: T.copy: shapes differ
                T.copy(A, B)
                ^
    """)
    exc = runner.parse_traceback(stderr)
    assert exc["type"] == "tegula.TegulaCompileError"
    assert exc["frames"] == [["/ck/examples/b.py", 7, "main"], ["/site/tegula/frontend/x.py", 3, "parse"]]
    assert runner.classify(1, exc, stderr, "/ck") == ("compile", "b.py:7: T.copy: shapes differ")
    assert runner.parse_traceback("no traceback here") is None


def test_a_caret_line_at_column_0_is_part_of_the_frames():
    stderr = 'Traceback (most recent call last):\n  File "/ck/x.py", line 9, in f\n    while x < 3:\n' \
             '^^^^^^^^^^^^\nRuntimeError: Infinite while loop detected\n'
    exc = runner.parse_traceback(stderr)
    assert (exc["type"], exc["frames"]) == ("RuntimeError", [["/ck/x.py", 9, "f"]])
    tvm = {"type": "tvm.error.InternalError", "message": "tvm.error.InternalError: Check failed: x", "frames": []}
    assert runner.classify(1, tvm, "", "/ck") == ("compile", "InternalError: Check failed: x")
