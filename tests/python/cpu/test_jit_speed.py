"""The fast JIT paths that need no GPU: the persistent index (a @jit call in a new process
skips parsing and lowering, and any edit to a file the kernel was built from is a miss),
the compile log, saved programs, and the launcher's argument handling (DLPack and
__cuda_array_interface__ arguments, keywords refused)."""
import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import tegula
import tegula.language as T
from tegula import env, interop

HELPERS = '''
import tegula.language as T

SCALE = {scale}


@T.macro
def scale_into(x, y, block):
    for i in T.Parallel(block):
        y[i] = x[i] * SCALE
'''

KERNEL = '''
import tegula
import tegula.language as T

from helpers_{tag} import scale_into

OFFSET = {offset}


@tegula.jit(out_idx=[-1])
def scaled(N, dtype="float32", block=128):
    @T.prim_func
    def main(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            x = T.alloc_fragment((block,), dtype)
            y = T.alloc_fragment((block,), dtype)
            for i in T.Parallel(block):
                x[i] = X[bx * block + i] + OFFSET
            scale_into(x, y, block)
            for i in T.Parallel(block):
                Y[bx * block + i] = y[i]

    return main
'''

CHILD = '''
import hashlib, sys
sys.path.insert(0, sys.argv[1])
import kernel_{tag} as m
k = m.scaled(1024)
if "--cubin" in sys.argv:
    k.cubin()
print("SOURCE", hashlib.sha256(k.get_kernel_source().encode()).hexdigest())
print("FAST", "_rebuild" in k.__dict__)
if "--inspect" in sys.argv:
    assert "main" in k.get_ir() and k.stages, "inspection of an index kernel"
    print("PARAMS", [p.name for p in k.params], k.prim_func.name)
'''


def _write(path, text):
    path.write_text(textwrap.dedent(text))
    # A new mtime even on file systems with coarse timestamps: the check must not rely on it.
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _run(tmp_path, tag, *flags, extra_env=None):
    environ = dict(os.environ, TEGULA_CACHE_DIR=str(tmp_path / "cache"), TEGULA_TARGET="sm_80",
                   TEGULA_LOG="compile")
    environ.pop("TEGULA_DISABLE_CACHE", None)
    environ.pop("TEGULA_JIT_INDEX", None)
    environ.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-c", CHILD.format(tag=tag), str(tmp_path / "src"), *flags],
                          env=environ, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    return out, proc.stderr


@pytest.fixture
def kernel_dir(tmp_path, request):
    tag = hashlib.sha1(request.node.name.encode()).hexdigest()[:8]
    src = tmp_path / "src"
    src.mkdir()
    _write(src / f"helpers_{tag}.py", HELPERS.format(scale=2.0))
    _write(src / f"kernel_{tag}.py", KERNEL.format(tag=tag, offset=1.0))
    return tmp_path, tag


def test_index_hit_in_a_new_process_skips_parsing_and_lowering(kernel_dir):
    tmp_path, tag = kernel_dir
    first, log1 = _run(tmp_path, tag, "--cubin")
    assert first["FAST"] == "False"
    assert "python parse" in log1 and "passes" in log1 and "index store" in log1, log1
    second, log2 = _run(tmp_path, tag)
    assert second["FAST"] == "True", log2
    assert "index lookup" in log2 and "hit" in log2, log2
    assert "python parse" not in log2 and "passes" not in log2 and "nvrtc" not in log2, log2
    assert second["SOURCE"] == first["SOURCE"]  # byte-identical CUDA source


def test_index_kernel_inspection_rebuilds_lazily(kernel_dir):
    tmp_path, tag = kernel_dir
    _run(tmp_path, tag, "--cubin")
    out, log = _run(tmp_path, tag, "--inspect")
    assert out["FAST"] == "True"
    assert out["PARAMS"].startswith("['X', 'Y'] main"), out
    assert "passes" in log  # get_ir lowered it again, on demand


def test_editing_a_macro_constant_in_another_module_is_a_miss(kernel_dir):
    tmp_path, tag = kernel_dir
    first, _ = _run(tmp_path, tag, "--cubin")
    _write(tmp_path / "src" / f"helpers_{tag}.py", HELPERS.format(scale=3.0))
    second, log = _run(tmp_path, tag)
    assert second["FAST"] == "False" and "miss" in log, log
    assert second["SOURCE"] != first["SOURCE"]  # the new constant is in the kernel


def test_editing_the_kernel_file_is_a_miss(kernel_dir):
    tmp_path, tag = kernel_dir
    first, _ = _run(tmp_path, tag, "--cubin")
    _write(tmp_path / "src" / f"kernel_{tag}.py", KERNEL.format(tag=tag, offset=5.0))
    second, log = _run(tmp_path, tag)
    assert second["FAST"] == "False" and "miss" in log, log
    assert second["SOURCE"] != first["SOURCE"]


def test_touching_a_file_without_changing_it_still_hits(kernel_dir):
    tmp_path, tag = kernel_dir
    first, _ = _run(tmp_path, tag, "--cubin")
    path = tmp_path / "src" / f"kernel_{tag}.py"
    _write(path, path.read_text())  # same content, new mtime: the content hash decides
    second, log = _run(tmp_path, tag)
    assert second["FAST"] == "True", log
    assert second["SOURCE"] == first["SOURCE"]


def test_index_off_without_the_disk_cache(kernel_dir):
    tmp_path, tag = kernel_dir
    _run(tmp_path, tag, "--cubin")
    out, log = _run(tmp_path, tag, extra_env={"TEGULA_DISABLE_CACHE": "1"})
    assert out["FAST"] == "False" and "index lookup" not in log, log
    out, log = _run(tmp_path, tag, extra_env={"TEGULA_JIT_INDEX": "0"})
    assert out["FAST"] == "False" and "index lookup" not in log, log


# ---- in this process ----

@tegula.jit(out_idx=[-1], target="sm_80")
def _add(N, dtype="float32"):
    @T.prim_func
    def add(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype), Z: T.Tensor((N,), dtype)):
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Z[bx * 128 + i] = X[bx * 128 + i] + Y[bx * 128 + i]

    return add


@pytest.fixture(scope="module")
def program():
    kernel = tegula.compile(_add.fn(256), out_idx=[-1], target="sm_80")
    return kernel._build()


def test_saved_program_loads_with_the_same_checks(program):
    C = env.native()
    data = program.save()
    assert data.startswith(b"TGLPROG")
    loaded = C.load_program(data)
    assert loaded.alignment == program.alignment and loaded.num_outputs == 1
    x = torch.zeros(256)
    for p in (program, loaded):
        with pytest.raises(ValueError, match="argument 'X' must be on a CUDA device"):
            p.launcher(x, x)
    with pytest.raises(RuntimeError):
        C.load_program(data[:-3])  # truncated: refused, never half-read


def test_launcher_refuses_keywords(program):
    with pytest.raises(TypeError, match="by position only"):
        program.launcher(X=torch.zeros(256), Y=torch.zeros(256))


def test_dlpack_argument_is_converted_then_checked(program):
    x = np.zeros(256, dtype=np.float32)  # has __dlpack__: becomes a CPU tensor, then the device check
    with pytest.raises(ValueError, match="argument 'X' must be on a CUDA device, got a numpy.ndarray on cpu"):
        program.launcher(x, torch.zeros(256))
    with pytest.raises(ValueError, match="argument 'X' must have dtype float32"):
        program.launcher(np.zeros(256, dtype=np.float64), torch.zeros(256))


class _FakeCudaArray:
    __cuda_array_interface__ = {"shape": (256,), "typestr": "<f4", "data": (0, False), "version": 3}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_cuda_array_interface_argument_reaches_the_device_check(program):
    with pytest.raises(ValueError, match="argument 'X' is a CUDA array .* no CUDA device"):
        program.launcher(_FakeCudaArray(), torch.zeros(256))


def test_other_objects_are_refused_by_name(program):
    with pytest.raises(ValueError, match="argument 'X' must be a torch.Tensor .*got list"):
        program.launcher([0.0] * 256, torch.zeros(256))
    with pytest.raises(TypeError, match="argument 'q' must be a torch.Tensor or an array"):
        interop.as_torch([1, 2], "q")
    t = torch.zeros(3)
    assert interop.as_torch(t, "t") is t
    assert interop.as_torch(np.ones(3, dtype=np.float32), "a").sum().item() == 3.0


def test_compile_log_names_each_stage(tmp_path):
    script = textwrap.dedent('''
        import tegula, tegula.language as T
        tegula.set_cache_enabled(False)
        @tegula.jit(out_idx=[-1], target="sm_80")
        def f(N):
            @T.prim_func
            def k(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    for i in T.Parallel(N):
                        Y[i] = X[i] * 2.0
            return k
        f(128).cubin()
    ''')
    (tmp_path / "logged.py").write_text(script)
    environ = dict(os.environ, TEGULA_LOG="compile", TEGULA_CACHE_DIR=str(tmp_path))
    proc = subprocess.run([sys.executable, str(tmp_path / "logged.py")], env=environ, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    stages = [line.split(":", 1)[1].split()[0] for line in proc.stderr.splitlines()
              if line.startswith("tegula[compile]")]
    for stage in ("python", "passes", "print", "cache", "nvrtc"):
        assert stage in stages, proc.stderr
    assert "front end" in proc.stderr and "ptxas" in proc.stderr, proc.stderr
