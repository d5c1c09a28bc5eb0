"""T.CUDASourceCodeKernel without a GPU: the kernel's source is the user's CUDA as given
(inline or from a file), NVRTC compiles it for the target, the launch passes the prim_func's
arguments in Tegula's order, and mistakes (no such entry, a missing file, an entry C++
would mangle, use inside a T.Kernel) are errors at the DSL line naming the argument. The
interpreters cannot run CUDA: they refuse such a kernel by name."""
import pytest
import torch

import source_kernel_programs as sp
import tegula
import tegula.language as T
import tegula.testing as tt


def test_the_source_is_the_kernel():
    artifact = tegula.lower(sp.axpby(), target="sm_90a")
    names = [f.name_hint for f in artifact.device_mod.functions]
    assert names == ["axpby"]
    assert artifact.kernel_source == sp.AXPBY
    kernel = tegula.compile(sp.axpby(), target="sm_90a")
    assert kernel.cubin()[:4] == b"\x7fELF"
    assert "void* args[] = {&x, &y, &a, &n};" in kernel.get_host_source()
    assert "cuLaunchKernelEx(&config, axpby, args, nullptr);" in kernel.get_host_source()


def test_source_from_a_file(tmp_path):
    path = tmp_path / "axpby.cu"
    path.write_text(sp.AXPBY)
    for given in (path, str(path)):
        assert tegula.lower(sp.axpby(source=given), target="sm_90a").kernel_source == sp.AXPBY
    with pytest.raises(tegula.TegulaCompileError, match="CUDA source file not found"):
        sp.axpby(source=str(tmp_path / "missing.cu"))


def test_a_source_file_is_a_dependency_of_the_jit_index(tmp_path):
    from tegula import jit_index

    path = tmp_path / "axpby.cu"
    path.write_text(sp.AXPBY)
    with jit_index.Tracker() as tracker:
        sp.axpby(source=path)
    assert str(path) in tracker.files  # an edit of the file is a new kernel, not a stale one


def test_a_language_kernel_then_a_source_kernel():
    kernel = tegula.compile(sp.scaled_row_sum(), target="sm_90a")
    assert kernel.num_kernels == 2
    assert [f.name_hint for f in tegula.lower(sp.scaled_row_sum(), target="sm_90a").device_mod.functions] == [
        "main_kernel0_kernel", "row_sum"]
    assert kernel.cubin(1)[:4] == b"\x7fELF"
    assert sp.ROW_SUM in kernel.get_kernel_source()


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
def test_the_interpreters_refuse_cuda_source(run):
    kernel = tegula.compile(sp.axpby(), target="sm_90a")
    with pytest.raises(ValueError, match="T.CUDASourceCodeKernel, whose body is CUDA source"):
        run(kernel, torch.zeros(4), torch.zeros(4), 1.0)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(entry="main_kernel"), r"entry_name 'main_kernel' is not a __global__ kernel of the source\. "
                                r"Available entries: axpby"),
    (dict(entry=""), "entry_name must be a non-empty str"),
    (dict(source="__device__ int f() { return 1; }\n"), "declares no __global__ kernel"),
    (dict(source="__global__ void axpby(float* x) {}\n"), 'declare the entry `extern "C"'),
    (dict(source=""), "source_code_or_path must be CUDA source"),
])
def test_mistakes_are_named_at_the_line(kwargs, pattern):
    with pytest.raises(tegula.TegulaCompileError, match=pattern) as err:
        sp.axpby(**kwargs)
    assert "source_kernel_programs.py" in err.value.args[0] or "T.CUDASourceCodeKernel" in str(err.value)


def test_inside_a_kernel_and_cluster_dims_are_refused():
    with pytest.raises(tegula.TegulaCompileError, match="is a kernel of its own"):
        @T.prim_func
        def nested(x: T.Tensor((8,), T.float32)):
            with T.Kernel(1, threads=32):
                T.CUDASourceCodeKernel(1, threads=32, source_code_or_path=sp.AXPBY, entry_name="axpby")

    with pytest.raises(tegula.TegulaCompileError, match="__cluster_dims__"):
        @T.prim_func
        def clustered(x: T.Tensor((8,), T.float32)):
            T.CUDASourceCodeKernel(2, threads=32, source_code_or_path=sp.AXPBY, entry_name="axpby", cluster_dims=2)


def test_a_source_that_does_not_compile_reports_nvrtc():
    broken = sp.AXPBY.replace("a * x[i]", "a * undefined_name[i]")
    kernel = tegula.compile(sp.axpby(source=broken), target="sm_90a")
    with pytest.raises(Exception, match="undefined_name"):
        kernel.cubin()
