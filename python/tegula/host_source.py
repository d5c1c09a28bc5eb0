"""`JITKernel.get_host_source()`: what the launcher does for one call, written as C++.

TileLang generates a host wrapper per kernel and compiles it; Tegula launches every kernel
from one generic C++ launcher (src/bindings/launcher.cc) driven by data. This renders that
data for a reader, in the shape of the code it stands for:

    // kernel gemm: grid (8, 8, 1), 128 threads, 24576 bytes of dynamic shared memory
    void* args[] = {&A, &B, &C};
    CUlaunchConfig config = {};
    config.gridDimX = 8; ...
    CUlaunchAttribute cluster;
    cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster.value.clusterDim = {2, 1, 1};
    cuLaunchKernelEx(&config, gemm, args, nullptr);

Nothing here is compiled: it documents the argument order (tensor pointers, then the
dynamic sizes, then tensor maps, then an instrumented kernel's event log) and the launch (grid, block, shared memory, cluster,
cooperative).
"""
from __future__ import annotations


def _ctype(dtype: str) -> str:
    return {"float32": "float", "float16": "half_t", "bfloat16": "bfloat16_t", "float64": "double",
            "int32": "int", "int64": "int64_t", "bool": "bool", "uint32": "unsigned"}.get(dtype, dtype)


def _extent(value) -> str:
    """A grid extent in C: sizes are non-negative, so the IR's floor division is C's `/`."""
    const = getattr(value, "const", None)
    return str(const) if const is not None else str(value).replace("//", " / ")


def render_kernel(func, ir_kernel, lowered) -> str:
    """One kernel's launch: `func` the PrimFunc, `ir_kernel` its `_C.ir` Kernel (grid,
    cluster shape), `lowered` the `_C.Lowered` (entry name, threads, shared memory)."""
    grid = [_extent(g) for g in ir_kernel.grid] + ["1"] * (3 - len(ir_kernel.grid))
    cluster = list(ir_kernel.cluster_dims)
    entry, threads, smem = lowered.entry, lowered.threads, lowered.smem_bytes
    lines = [f"// kernel {entry}: grid ({', '.join(grid)}), {threads} threads, "
             f"{smem} bytes of dynamic shared memory"]
    args = []
    for p in list(func.params) + list(func.workspaces):
        if p.dtype == "handle":
            lines.append(f"void* {p.name};  // T.ptr: a CUDA tensor's data_ptr() or the int given; checked: device, "
                         "alignment")
        elif p.is_scalar:
            lines.append(f"{_ctype(p.dtype)} {p.name};  // scalar argument")
        else:
            shape = ", ".join(str(d) for d in p.shape)
            lines.append(f"{_ctype(p.dtype)}* {p.name} = ({_ctype(p.dtype)}*){p.name}_tensor.data_ptr();  "
                         f"// checked: shape ({shape}), dtype {p.dtype}, device, alignment")
        args.append(f"&{p.name}")
    for var in func.dynamic_vars:
        lines.append(f"{_ctype(str(var.dtype))} {var} = /* read off the tensor it sizes */;")
        args.append(f"&{var}")
    if getattr(lowered, "records_events", False):
        lines.append("tegula::IketLog* tegula_iket_log = /* this launch's event log (tegula.tools.cuda.iket), or null */;")
        args.append("&tegula_iket_log")
    lines.append(f"void* args[] = {{{', '.join(args)}}};")
    lines += ["CUlaunchConfig config = {};",
              f"config.gridDimX = {grid[0]}; config.gridDimY = {grid[1]}; config.gridDimZ = {grid[2]};",
              f"config.blockDimX = {threads}; config.blockDimY = 1; config.blockDimZ = 1;",
              f"config.sharedMemBytes = {smem};",
              "config.hStream = at::cuda::getCurrentCUDAStream();"]
    if cluster:
        lines += ["CUlaunchAttribute cluster;",
                  "cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;",
                  f"cluster.value.clusterDim = {{{', '.join(str(c) for c in cluster)}}};",
                  "config.attrs = &cluster; config.numAttrs = 1;"]
    lines.append(f"cuLaunchKernelEx(&config, {entry}, args, nullptr);")
    return "\n".join(lines)


def render(kernel) -> str:
    """Every kernel of a JITKernel, in launch order."""
    func = kernel.prim_func
    parts = [render_kernel(func, k, l) for k, l in zip(func.kernels, kernel._lowered_all)]
    return "\n\n".join(parts) + "\n"
