"""`T.CUDASourceCodeKernel`: a kernel of the prim_func whose body is the user's own CUDA.

    CUDA = '''
    extern "C" __global__ void scale(float* A, float* B, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) B[i] = 2.0f * A[i];
    }'''

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
        T.CUDASourceCodeKernel(T.ceildiv(N, 128), threads=128, source_code_or_path=CUDA, entry_name="scale")

The entry is launched over the grid and threads given, with the prim_func's arguments in
the order every Tegula kernel takes them: a pointer per tensor parameter and a value per
scalar parameter, in declaration order, then each T.dynamic size (int, or int64_t for a
T.dynamic of int64), in order of first appearance. The source is compiled by NVRTC as
given (Tegula's device headers are on its include path); no pass touches it.
"""
from __future__ import annotations

import os
import re

from ..frontend import builder
from ..frontend.builder import KernelFrame, intrinsic
from ..frontend.errors import ArgError
from ..frontend.prim_func import SOURCE_OBSERVERS
from ..frontend.values import PrimExpr, ir
from .kernel import kernel_spec

# A __global__ function's declaration: optional extern "C", attributes, then its name.
_GLOBAL_KERNEL = re.compile(r'(extern\s+"C"\s+)?__global__\s+void\s+((?:__\w+__\s*\([^)]*\)\s+)*)(\w+)\s*\(')
_SOURCE_MARKERS = ("\n", "__global__", 'extern "C"', "#include")
_SOURCE_SUFFIXES = (".cu", ".cuh", ".cuda", ".cpp", ".cc", ".c")


def load_cuda_source(source_code_or_path) -> str:
    """The CUDA text: the file's when the argument names an existing file, else the
    argument itself when it looks like source; a path that does not exist is an error."""
    if isinstance(source_code_or_path, os.PathLike):
        source_code_or_path = os.fspath(source_code_or_path)
    if not isinstance(source_code_or_path, str) or not source_code_or_path.strip():
        raise ArgError("source_code_or_path", "T.CUDASourceCodeKernel: source_code_or_path must be CUDA source or "
                       f"the path of a file of it (a non-empty str or os.PathLike), got {source_code_or_path!r}")
    text = source_code_or_path
    expanded = os.path.expanduser(text)
    if os.path.isfile(expanded):
        for observe in SOURCE_OBSERVERS:  # the JIT's persistent index then depends on the file
            observe(expanded)
        with open(expanded, encoding="utf-8") as f:
            return f.read()
    if any(marker in text for marker in _SOURCE_MARKERS):
        return text
    if os.sep in text or (os.altsep and os.altsep in text) or text.endswith(_SOURCE_SUFFIXES):
        raise ArgError("source_code_or_path", f"T.CUDASourceCodeKernel: CUDA source file not found: {text}")
    return text


def global_kernels(source: str) -> dict:
    """name -> (declared extern "C", its attribute text) of each __global__ function."""
    found = {}
    for match in _GLOBAL_KERNEL.finditer(source):
        found.setdefault(match.group(3), (match.group(1) is not None, match.group(2)))
    return found


@intrinsic("T.CUDASourceCodeKernel")
def CUDASourceCodeKernel(*blocks, threads=None, source_code_or_path=None, entry_name="main_kernel",  # noqa: N802
                         cluster_dims=None, prelude=None):
    """A kernel of the prim_func written in CUDA: `entry_name`, a `__global__` function of
    `source_code_or_path` (inline source, or the path of a file), launched over the grid
    `blocks` with `threads` threads a block, taking the prim_func's arguments (tensor
    pointers and scalars in order, then the T.dynamic sizes). `prelude` is source put
    before it."""
    fn = "T.CUDASourceCodeKernel"
    frame_builder = builder.current(fn)
    if frame_builder.blocks:
        raise ArgError(None, f"{fn} is a kernel of its own: write it in the prim_func body, not inside "
                       "`with T.Kernel(...)`")
    if source_code_or_path is None:
        raise ArgError("source_code_or_path", f"{fn} needs source_code_or_path= (CUDA source or a file of it)")
    source = load_cuda_source(source_code_or_path)
    if prelude is not None:
        if not isinstance(prelude, str):
            raise ArgError("prelude", f"{fn}: prelude must be a str of CUDA source, got {type(prelude).__name__}")
        source = prelude + "\n" + source
    if not isinstance(entry_name, str) or not entry_name.strip():
        raise ArgError("entry_name", f"{fn}: entry_name must be a non-empty str, got {entry_name!r}")
    kernels = global_kernels(source)
    if not kernels:
        raise ArgError("source_code_or_path", f"{fn}: the source declares no __global__ kernel")
    if entry_name not in kernels:
        raise ArgError("entry_name", f"{fn}: entry_name {entry_name!r} is not a __global__ kernel of the source. "
                       f"Available entries: {', '.join(kernels)}")
    extern_c, _ = kernels[entry_name]
    if not extern_c:
        raise ArgError("entry_name", f"{fn}: declare the entry `extern \"C\" __global__ void {entry_name}(...)`, "
                       "so that it is found by that name once compiled (C++ would mangle it)")
    if cluster_dims is not None:
        raise ArgError("cluster_dims", f"{fn}: the launch takes its cluster shape from the kernel itself: write "
                       f"__cluster_dims__(x, y, z) on {entry_name} in the source instead of cluster_dims=")
    spec = kernel_spec(fn, blocks, threads, False, None, None)
    names = ["bx", "by", "bz"][: len(spec.grid)]
    frame = KernelFrame(spec.grid, [PrimExpr.var(n) for n in names], PrimExpr.var("tx"), spec.threads, None)
    frame.user_source = (source, entry_name)
    frame_builder.kernel = frame
    frame_builder.finish_kernel(frame, ir().seq([]))
