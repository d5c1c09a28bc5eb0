"""Compiling a batch at once (par_compile, the autotuner): lowering in threads, the NVRTC
compiles in forked worker processes (tegula/parallel_compile.py, src/runtime/compile_pool.h).
What a batch gives must be what one compile at a time gives, byte for byte; a kernel that
does not compile raises the error its own compile raises; the workers leave no file behind."""
import glob
import os
import tempfile

import pytest

import source_kernel_programs as sp
import tegula
import tegula.language as T
from tegula import env


def scale(n: int, factor: float, dtype=T.float32):
    @T.prim_func
    def main(x: T.Tensor((n,), dtype), y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                y[bx * 128 + i] = x[bx * 128 + i] * factor
    return main


def funcs():
    # Distinct sources: the sizes and factors are constants of the generated code.
    return [scale(n, f) for n, f in ((100, 2.0), (256, 3.0), (1000, 0.5), (4096, -1.0), (77, 7.0), (513, 1.5))]


@pytest.fixture
def no_cache():
    """The disk cache off and the memory cache emptied: every compile is NVRTC's."""
    env.set_cache_enabled(False)
    env.native().clear_memory_cache()
    yield
    env.native().clear_memory_cache()
    env.set_cache_enabled(not os.environ.get("TEGULA_DISABLE_CACHE"))


def stats_since(before: dict) -> dict:
    return {k: v - before[k] for k, v in env.native().cache_stats().items()}


def pch_files():
    dirs = [os.path.join(env.cache_dir(), "pch"), os.path.join(tempfile.gettempdir(), "tegula-pch")]
    return {p for d in dirs for p in glob.glob(os.path.join(d, "*.pch"))}


def test_a_batch_in_processes_is_what_one_at_a_time_gives(no_cache):
    one_by_one = [tegula.compile(f, target="sm_90a") for f in funcs()]
    expected = [k.cubin() for k in one_by_one]
    assert len(set(expected)) == len(expected)
    before = pch_files()
    env.native().clear_memory_cache()
    stats = env.native().cache_stats()
    batch = tegula.par_compile(funcs(), target="sm_90a", num_workers=2)
    # Six misses, six images the workers sent back and this process stored.
    assert {k: v for k, v in stats_since(stats).items() if v} == {"misses": 6, "stores": 6}
    assert [k.cubin() for k in batch] == expected
    assert all(k._lowered.cache_hit for k in batch)  # each kernel kept its image
    assert not any(stats_since(stats)[k] for k in ("memory_hits", "disk_hits"))
    assert [k.get_kernel_source() for k in batch] == [k.get_kernel_source() for k in one_by_one]
    # Three compiles per worker: each made a precompiled header of its own and removed it.
    assert pch_files() - before <= {p for p in pch_files() if p.endswith(f"-{os.getpid()}.pch")}


def test_the_workers_answer_per_kernel(no_cache):
    good = [tegula.compile(f, target="sm_90a")._lowered for f in funcs()[:3]]
    stats = env.native().cache_stats()
    broken_source = sp.AXPBY.replace("a * x[i]", "a * undefined_name[i]")
    broken = tegula.compile(sp.axpby(source=broken_source), target="sm_90a")._lowered
    answers = env.native().compile_in_processes([good[0], broken, good[1], good[2]], 3)
    assert answers[0] is None and answers[2] is None and answers[3] is None
    assert "undefined_name" in answers[1]
    assert stats_since(stats)["stores"] == 3  # the broken one stored nothing
    # The good ones keep their image: no second compile.
    assert all(g.compile()[:4] == b"\x7fELF" and g.cache_hit for g in good)
    assert env.native().compile_in_processes([], 4) == []


def test_a_kernel_that_does_not_compile_raises_its_own_error():
    broken_source = sp.AXPBY.replace("a * x[i]", "a * undefined_name[i]")
    alone = tegula.compile(sp.axpby(source=broken_source), target="sm_90a")
    with pytest.raises(Exception) as one:
        alone.cubin()
    batch = [scale(300, 2.5), sp.axpby(source=broken_source), scale(301, 2.5)]
    with pytest.raises(type(one.value)) as many:
        tegula.par_compile(batch, target="sm_90a", num_workers=2)
    assert str(many.value) == str(one.value)
    with pytest.warns(UserWarning, match="kernel 1 failed to build and is None"):
        kernels = tegula.par_compile(batch, target="sm_90a", num_workers=2, ignore_error=True)
    assert kernels[1] is None and kernels[0].cubin()[:4] == b"\x7fELF" and kernels[2].cubin()[:4] == b"\x7fELF"


def test_threads_instead_of_processes(monkeypatch, no_cache):
    expected = [tegula.compile(f, target="sm_90a").cubin() for f in funcs()[:3]]
    monkeypatch.setenv("TEGULA_PARALLEL_COMPILE", "threads")
    assert [k.cubin() for k in tegula.par_compile(funcs()[:3], target="sm_90a", num_workers=3)] == expected
    monkeypatch.setenv("TEGULA_PARALLEL_COMPILE", "fibres")
    with pytest.raises(ValueError, match="TEGULA_PARALLEL_COMPILE must be one of processes, threads, got 'fibres'"):
        tegula.par_compile(funcs()[:2], target="sm_90a", num_workers=2)


def test_lowering_in_threads_gives_the_same_code():
    serial = [tegula.lower(f, target="sm_90a").kernel_source for f in funcs()]
    batch = tegula.par_compile(funcs(), target="sm_90a", num_workers=4)
    assert [k.get_kernel_source() for k in batch] == serial
    with pytest.raises(ValueError, match="num_workers must be a positive int"):
        tegula.par_compile(funcs(), target="sm_90a", num_workers=0)


INTERRUPTED = """
import os, signal, threading, time
import tegula, tegula.language as T


def scale(n, factor):
    @T.prim_func
    def main(x: T.Tensor((n,), T.float32), y: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                y[bx * 128 + i] = x[bx * 128 + i] * factor
    return main


tegula.set_cache_enabled(False)
funcs = [scale(100 + 7 * i, 1.0 + i) for i in range(24)]
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
start = time.time()
try:
    tegula.par_compile(funcs, target="sm_90a", num_workers=2)
    print("finished")
except KeyboardInterrupt:
    print("interrupted", round(time.time() - start, 1))
try:
    os.waitpid(-1, os.WNOHANG)
    print("a worker is left")
except ChildProcessError:
    print("no worker left")
"""


def test_ctrl_c_stops_the_workers(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = done.stdout.split()
    assert lines[0] == "interrupted" and float(lines[1]) < 5, done.stdout + done.stderr
    assert "no worker left" in done.stdout, done.stdout + done.stderr
