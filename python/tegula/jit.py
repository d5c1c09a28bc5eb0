"""`tegula.jit` / `tegula.compile` and the `JITKernel` they return.

    @tegula.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=128):
        @T.prim_func
        def main(A: T.Tensor((M, K), "float16"), ...): ...
        return main

    kernel = matmul(1024, 1024, 1024)     # parsed, lowered, cached per argument tuple
    C = kernel(A, B)                      # out_idx: outputs are allocated and returned

The eager form (tegula/jit_eager.py) writes the kernel body as the decorated function itself:
`C = matmul(A, B, block_M=128)` compiles on first use and launches. A @jit call that a
process compiled before is answered from the persistent index (tegula/jit_index.py): the
built program comes off the disk without parsing or lowering, and the prim_func and IR are
rebuilt only if something asks for them (get_ir, stages...). Calling a JITKernel is the launch hot path: it is one call into C++, which checks the
arguments, allocates the outputs and launches (see JITKernel.__call__). Under torch's
tracers (torch.compile, FakeTensorMode, torch.export) the call goes through a torch.library
operator made for the kernel instead (tegula/traced.py).
"""
from __future__ import annotations

import functools
import inspect
import os
import time
import warnings

import torch

from . import env, jit_index, registers, traced
from .buffer_layout import BufferLayout
from .frontend.dtypes import is_packed, to_torch
from .frontend.parse_eager import is_eager
from .frontend.errors import from_native
from .frontend.prim_func import PrimFunc, parse_context
from .parallel_compile import build_in_parallel, check_workers, guarded, in_threads, par_compile_configs
from .transform import PYTHON_SIDE, to_options

_BACKENDS = (None, "auto", "cython", "ctypes", "nvrtc", "tvm_ffi", "dlpack", "torch")


class KernelParam:
    """A parameter as callers and the profiler see it."""

    __slots__ = ("name", "shape", "dtype", "dtype_name", "is_output", "is_scalar")

    def __init__(self, name, shape, dtype, dtype_name, is_output, is_scalar):
        self.name = name
        self.shape = shape  # ints; None where the dimension is T.dynamic
        self.dtype = dtype  # torch dtype
        self.dtype_name = dtype_name
        self.is_output = is_output
        self.is_scalar = is_scalar

    def __repr__(self):
        role = "output" if self.is_output else "input"
        return f"KernelParam({self.name}: {self.dtype_name}{list(self.shape)} {role})"


def _torch_dtype(name: str):
    """A parameter's torch dtype; None for a T.ptr parameter (an address, of no dtype)."""
    return None if name == "handle" else to_torch(name)


def _normalize_out_idx(out_idx, params) -> list[int]:
    if out_idx is None:
        return []
    items = [out_idx] if isinstance(out_idx, int) else list(out_idx)
    count = len(params)
    result = []
    for item in items:
        if not isinstance(item, int) or not -count <= item < count:
            raise ValueError(f"out_idx {out_idx!r}: {item!r} is not a parameter index of a kernel with {count} parameters")
        index = item % count
        if params[index].is_scalar:
            raise ValueError(f"out_idx {out_idx!r}: parameter '{params[index].name}' is a scalar, not a tensor")
        if index not in result:
            result.append(index)
    return sorted(result)


class JITKernel:
    def __init__(self, func: PrimFunc, out_idx=None, target="auto", pass_configs=None, verbose=False,
                 debug_root_path=None, execution_backend=None, compile_flags=None):
        if not isinstance(func, PrimFunc):
            raise TypeError(f"tegula.compile expects a T.prim_func, got {type(func).__name__}")
        if execution_backend not in _BACKENDS:
            raise ValueError(f"execution_backend {execution_backend!r}: expected one of {_BACKENDS}")
        self.prim_func = func
        out_idx, pass_configs, compile_flags = _with_function_attrs(func, out_idx, pass_configs, compile_flags)
        self.out_idx = _normalize_out_idx(out_idx, func.params)
        self.target, self._target_guessed = env.resolve_target(target)
        options = to_options(pass_configs)
        flags = [f for f in compile_flags or () if f not in _FAST_MATH_FLAGS]
        if len(flags) < len(compile_flags or ()):
            options.setdefault("fast_math", True)
        if flags:
            warnings.warn(f"tegula: compile_flags {flags} are ignored (NVRTC flags are fixed by the target; "
                          "--use_fast_math turns on fast math)", stacklevel=3)
        python_side = {k: options.pop(k) for k in list(options) if k in PYTHON_SIDE}
        self.options = options  # what _C.lower was given
        C = env.native()
        try:
            # One lowered kernel per `with T.Kernel` block, launched in order by one call.
            self._lowered_all = [lower_kernel(C, k, self.target, options) for k in func.kernels]
        except C.CompileError as err:
            raise from_native(err, func.source) from None
        self._lowered = self._lowered_all[0]
        self._program = None
        self._index_entry = None  # (key, deps, fn name) to record once built; see JITFunction
        self._call = self._first_call
        self._trace_key = traced.register(self)
        C.install_fast_call(JITKernel, "_call")  # once per class: C++ keeps it
        self._setup_params()
        self._report(verbose, python_side.get("dump_ir", False),
                     debug_root_path or python_side.get("kernels_output_dir"))
        registers.warn_if_over_budget(self)  # RegisterPressureWarning: once per lowering

    @classmethod
    def _from_index(cls, meta: dict, program, rebuild):
        """A kernel from a persistent-index entry: launchable at once; the prim_func and
        the lowered kernels (IR, simulation, registers) come from `rebuild()` on first use."""
        self = cls.__new__(cls)
        self.out_idx = list(meta["out_idx"])
        self.target, self._target_guessed = meta["target"], meta["guessed"]
        self.params = [KernelParam(name, tuple(shape), _torch_dtype(dtype), dtype, index in self.out_idx, is_scalar)
                       for index, (name, shape, dtype, is_scalar) in enumerate(meta["params"])]
        self.num_inputs = len(self.params) - len(self.out_idx)
        self._name = meta["name"]
        self._sources = list(meta["sources"])
        self._program = program
        self._index_entry = None
        self._rebuild = rebuild
        self._call = self._first_call
        self._trace_key = traced.register(self)
        env.native().install_fast_call(JITKernel, "_call")
        return self

    def __getattr__(self, name):
        # Only attributes a kernel from the persistent index lacks reach here.
        rebuild = self.__dict__.get("_rebuild")
        if rebuild is None or name not in ("prim_func", "_lowered_all", "_lowered", "options"):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        full = rebuild()
        for attr in ("prim_func", "_lowered_all", "_lowered", "options"):
            setattr(self, attr, getattr(full, attr))
        del self._rebuild
        return getattr(self, name)

    # ---- construction ----
    def _setup_params(self) -> None:
        func, outputs = self.prim_func, set(self.out_idx)
        self.params = [
            KernelParam(info.name, tuple(d if isinstance(d, int) else None for d in info.shape),
                        _torch_dtype(info.dtype), info.dtype, index in outputs, info.is_scalar)
            for index, info in enumerate(func.params)
        ]
        # Found now rather than at the first launch: with out_idx, every dynamic size
        # must be readable off an input tensor.
        def determines(d, var) -> bool:  # the size itself, or a * var + b (checked by the launcher's build)
            return d is var or any(x is var for x in getattr(d, "dyn", ()))

        for var in func.dynamic_vars:
            if not any(determines(d, var) for i, p in enumerate(func.params) if i not in outputs
                       for d in (*p.shape, *getattr(p.value, "strides", ()))):
                raise ValueError(f"kernel {func.name}: dynamic dimension '{var}' is not a whole dimension of "
                                 "any input tensor, so its value cannot be known at launch")
        self.num_inputs = len(func.params) - len(outputs)

    def _report(self, verbose: bool, dump: bool, out_dir: str | None) -> None:
        # TEGULA_DUMP_IR itself is honoured by _C.lower (each stage to stderr); this is
        # the pass-config spelling of the same request.
        if dump:
            for stage in self.stages:
                print(f"==== {self.prim_func.name}: {stage} ====\n{self.get_ir(stage)}")
        if verbose:
            print(f"==== {self.prim_func.name} for {self.target} ====\n{self.get_kernel_source()}")
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, f"{self.prim_func.name}.cu"), "w") as f:
                f.write(self.get_kernel_source())

    # ---- launch ----
    def _build(self):
        if self._target_guessed:
            raise RuntimeError(
                f"kernel {self.prim_func.name} was compiled for {self.target} only because no GPU was found "
                "(target='auto'); it cannot be launched. Set TEGULA_TARGET or compile where a GPU is visible.")
        C = env.native()
        self._program = C.build_program(self._lowered_all, self.out_idx, len(self.prim_func.workspaces))
        self._record()
        return self._program

    def _record(self) -> None:
        """Writes this kernel's persistent-index entry, once its program is built."""
        entry, self._index_entry = self._index_entry, None
        if entry is None:
            return
        key, deps = entry
        start = time.perf_counter()
        meta = {"name": self.prim_func.name, "out_idx": self.out_idx, "target": self.target,
                "guessed": self._target_guessed,
                "params": [[p.name, list(p.shape), p.dtype_name, p.is_scalar] for p in self.params],
                "sources": [lowered.source for lowered in self._lowered_all]}
        stored = jit_index.store(key, deps, meta, self._program)
        if env.log_enabled():
            env.log_compile(self.prim_func.name, "index store", 1e3 * (time.perf_counter() - start),
                            "stored" if stored else "not stored: a grid the index cannot save")

    def _first_call(self, *args):
        if env.native().needs_tracing(*args):  # nothing to launch on: no need to build
            return traced.call(self, args)
        self._call = self._launcher(traced.traced_launcher(self))
        return self._call(*args)

    def _launcher(self, tracing):
        """The launch callable: a call that needs tracing goes to `tracing` (None: such a
        call is an error; the kernel's operator launches through that one)."""
        program = self._program or self._build()
        # An input tensor, or a T.ptr parameter (given a tensor or an address), sets the device.
        if any(not p.is_output and (not p.is_scalar or p.dtype_name == "handle") for p in self.params):
            launch = program.launcher if tracing is None else program.launcher_with(tracing)
        else:
            launch = functools.partial(_launch_outputs_only, self, program, tracing)
        return self._hooked(program, launch)

    def _launch_direct(self, *args):
        """The launch of the kernel's torch operator (traced.py): no detour."""
        direct = self.__dict__.get("_direct")
        if direct is None:
            direct = self._direct = self._launcher(None)
        return direct(*args)

    def _hooked(self, program, launch, stream: int = 0):
        """`launch` wrapped by the tools that instrumented the kernel (tools/cuda/iket);
        a kernel from the persistent index has no prim_func, so no tool."""
        for hook in getattr(self.__dict__.get("prim_func"), "launch_hooks", ()):
            launch = hook.wrap_launch(self, program, launch, stream)
        return launch

    # TileLang semantics: with out_idx, pass the inputs and get the outputs back (one
    # tensor, or a list); without, pass every tensor and get None. The launch is one C++
    # call (the launcher, `self._call`): it checks each argument (an error is a ValueError
    # naming it), allocates the outputs on the inputs' device and launches on torch's
    # current stream. A kernel with no input tensor runs on torch's current device instead
    # (`_launch_outputs_only`).
    def __call__(self, *args):
        # CPython does not run this: _C.install_fast_call points the class's call slot at
        # `self._call(*args)`, so a launch runs no Python frame of ours. torch.compile's
        # Dynamo reads it, and traces the call through the kernel's operator.
        if torch.compiler.is_dynamo_compiling():
            return traced.call(self, args)
        return self._call(*args)

    def launch(self, *args, stream: int = 0) -> None:
        """Every parameter given (outputs included), on an explicit CUDA stream handle."""
        program = self._program or self._build()
        self._hooked(program, lambda *a: program.launch(list(a), stream), stream)(*args)

    def cubin(self, index: int = 0) -> bytes:
        """The compiled binary of kernel `index` (through the cache), without loading it:
        works with no GPU."""
        image = self._lowered_all[index].compile()
        if self._index_entry is not None and self._program is None:
            # Compiled without a launch (no GPU): the program costs cache hits now.
            self._program = env.native().build_program(self._lowered_all, self.out_idx,
                                                       len(self.prim_func.workspaces))
            self._record()
        return image

    def register_usage(self, index: int = 0) -> registers.RegisterUsage | None:
        """Registers per thread of kernel `index`'s fragments (`.fragments`, name ->
        registers) and the most live at once (`.peak`, against `.budget`); see
        tegula/registers.py."""
        return registers.kernel_usage(self, index)

    @property
    def num_kernels(self) -> int:
        """How many `with T.Kernel` blocks one call launches."""
        sources = self.__dict__.get("_sources")
        return len(sources) if sources else len(self._lowered_all)

    # ---- inspection ----
    def get_kernel_source(self, kernel_only: bool = True) -> str:
        """The CUDA source: for a prim_func of several `with T.Kernel` blocks, each
        kernel's source in launch order. `kernel_only` is TileLang's switch for adding
        the host code; Tegula launches from its C++ runtime, so there is none to add."""
        sources = self.__dict__.get("_sources") or [lowered.source for lowered in self._lowered_all]
        if len(sources) == 1:
            return sources[0]
        return "\n".join(f"// ---- kernel {i} of {len(sources)} (launched in this order) ----\n{source}"
                         for i, source in enumerate(sources))

    def get_host_source(self) -> str:
        """How the launcher calls each kernel (argument order, grid, block, shared memory,
        cluster), written as C++ for a reader: Tegula has no generated host code, one
        C++ launcher runs every kernel (tegula/host_source.py)."""
        from . import host_source

        return host_source.render(self)

    @property
    def adapter(self):
        """TileLang's execution-backend object: the prim_func as compiled, and the module
        that runs it (tegula/adapter.py)."""
        from .adapter import KernelAdapter

        return KernelAdapter(self)

    def get_ir(self, stage: str = "final") -> str:
        if len(self._lowered_all) == 1:
            return self._lowered.ir(stage)
        return "\n".join(f"# ==== kernel {i} ====\n{l.ir(stage)}" for i, l in enumerate(self._lowered_all))

    @property
    def stages(self) -> list[str]:
        stages = getattr(self._lowered, "stages", None)
        if stages is not None:
            return list(stages() if callable(stages) else stages)
        return list(self.prim_func.kernel.stages())

    def layouts(self, index: int = 0) -> dict:
        """name -> BufferLayout (tegula/buffer_layout.py) for every fragment and shared
        buffer kernel `index` declares: the layout the passes chose (a fragment's (thread,
        register) per element; a shared buffer's swizzled offsets)."""
        return {entry["name"]: BufferLayout.from_native(entry) for entry in self._lowered_all[index].layouts()}

    def layout_of(self, name: str, index: int | None = None):
        """The BufferLayout of buffer `name` in kernel `index` (default: the first kernel
        that declares it); a ValueError listing the buffers when there is none."""
        indices = range(len(self._lowered_all)) if index is None else [index]
        known = []
        for i in indices:
            found = self.layouts(i)
            if name in found:
                return found[name]
            known += [f"{n} ({b.scope})" for n, b in found.items()]
        raise ValueError(f"kernel {self.prim_func.name} has no fragment or shared buffer named {name!r}; "
                         f"its buffers: {', '.join(known) or 'none'}")

    def plot_layout(self, buffer_name: str, path: str | None = None, **options):
        """Draws buffer `buffer_name`'s layout (to a PNG at `path` when given) and returns
        the data drawn; options as tegula.tools.plot_layout takes them."""
        return _LAYOUT_PLOT[0](self.layout_of(buffer_name, options.pop("kernel_index", None)), path, **options)

    def get_profiler(self, tensor_supply_type=None):
        """TileLang's `kernel.get_profiler()`: a tegula.profiler.Profiler of this kernel
        (inputs supplied as `tensor_supply_type` says; default Auto)."""
        if tensor_supply_type is None:
            return _PROFILER[0](self)
        return _PROFILER[0](self, tensor_supply_type)

    def run_once(self, func=None):
        """TileLang's `kernel.run_once()`: one run on generated inputs (the profiler's
        run_once; `func` runs instead of the kernel when given)."""
        return self.get_profiler().run_once(func)

    def __repr__(self):
        name = self.__dict__.get("_name") or self.prim_func.name
        return f"<JITKernel {name} target={self.target} out_idx={self.out_idx}>"


def lower_kernel(C, kernel, target: str, options: dict):
    """One `with T.Kernel` block through the passes; a T.CUDASourceCodeKernel's CUDA as
    the user wrote it."""
    attrs = getattr(kernel, "attrs", None) or {}
    if "cuda_source" in attrs:
        return C.lower_source(kernel, target, attrs["cuda_source"], attrs["entry_name"], options)
    return C.lower(kernel, target, options)


def launch_device():
    """The device a kernel with no input tensor runs on: torch's current CUDA device (what
    `torch.cuda.set_device` and `with torch.cuda.device(i)` choose), as in TileLang."""
    import torch

    return torch.device("cuda", torch.cuda.current_device())


def storage_shape(shape, dtype_name: str, name: str = "output") -> tuple:
    """The torch shape holding a tensor of logical `shape`: a 4-bit type's last dimension
    holds two elements a byte (TileLang's packed storage: (3, 16) int4 is an int8 (3, 8))."""
    if not is_packed(dtype_name):
        return tuple(shape)
    if not shape or shape[-1] % 2:
        raise ValueError(f"'{name}' is {dtype_name}, packed two elements a byte, so its last dimension must be even, "
                         f"got shape {tuple(shape)}")
    return (*shape[:-1], shape[-1] // 2)


def allocate_outputs(params, device, func: PrimFunc | None = None, scalars: dict | None = None) -> list:
    """Fresh tensors for the output parameters of `params` on `device`, in torch's storage
    of their dtype (storage_shape). With no input tensor a dimension that is not constant
    is computed from the scalar arguments (`T.empty((3, n * 2), ...)` with `n: T.int32`):
    `scalars` maps their parameter indices to their values, read through `func`."""
    import torch

    values = [(func.params[i].value.expr, int(v)) for i, v in (scalars or {}).items()] if func else []
    out = []
    for index, p in enumerate(params):
        if not p.is_output:
            continue
        shape = list(p.shape)
        for d, size in enumerate(shape):
            if size is None:
                dim = func.params[index].shape[d] if func else None
                size = env.native().ir.eval_int(dim.expr, values) if hasattr(dim, "expr") else None
                if size is None or size < 0:
                    raise ValueError(f"output '{p.name}': dimension {d} ({dim}) cannot be computed from this call's "
                                     f"scalar arguments (got {size})")
                shape[d] = size
        out.append(torch.empty(storage_shape(shape, p.dtype_name, p.name), dtype=p.dtype, device=device))
    return out


def _launch_outputs_only(kernel: JITKernel, program, tracing, *args):
    """A call of a kernel whose tensors are all outputs (out_idx names every tensor
    parameter): no input tells the launcher the device, so the outputs are allocated on
    `launch_device()` here and the whole argument list goes through `Program.launch`,
    which checks it as a call does and launches on that device's current stream. Under a
    TorchDispatchMode the call goes to `tracing` (as the launcher's would)."""
    if tracing is not None and env.native().needs_tracing(*args):
        return tracing(*args)
    expected = [p for p in kernel.params if not p.is_output]
    if len(args) != len(expected):
        names = ", ".join(p.name for p in expected)
        name = kernel.__dict__.get("_name") or kernel.prim_func.name
        raise env.native().ArgumentError(f"{name}: expected {len(expected)} argument(s) ({names}), got {len(args)}")
    inputs = [i for i, p in enumerate(kernel.params) if not p.is_output]
    scalars = {i: a for i, a in zip(inputs, args) if kernel.params[i].is_scalar
               and isinstance(a, int) and not isinstance(a, bool)}
    outputs = allocate_outputs(kernel.params, launch_device(), kernel.prim_func, scalars)
    given, made = iter(args), iter(outputs)
    program.launch([next(made) if p.is_output else next(given) for p in kernel.params], 0)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs


_FAST_MATH_FLAGS = ("--use_fast_math", "-use_fast_math")


def _with_function_attrs(func: PrimFunc, out_idx, pass_configs, compile_flags):
    """The function's own attributes (T.empty outputs, T.annotate_pass_configs,
    T.annotate_compile_flags) under what the call gives: pass configs key by key, compile
    flags appended; outputs named both ways are a conflict."""
    attrs = getattr(func, "attrs", None) or {}
    own_out = attrs.get("tilelang_out_idx")
    if own_out is not None:
        if out_idx is not None:
            raise ValueError(f"Out index conflict: {func.name} returns its T.empty outputs (out_idx {list(own_out)}), "
                             f"and out_idx={out_idx!r} was given as well; drop one")
        out_idx = list(own_out)
    if attrs.get("tilelang_pass_configs"):
        pass_configs = {**attrs["tilelang_pass_configs"], **(pass_configs or {})}
    if attrs.get("tilelang_compile_flags"):
        compile_flags = list(attrs["tilelang_compile_flags"]) + list(compile_flags or [])
    return out_idx, pass_configs, compile_flags


def compile(func: PrimFunc, out_idx=None, target="auto", pass_configs=None, verbose=False,  # noqa: A001
            execution_backend=None, target_host=None, compile_flags=None, debug_root_path=None) -> JITKernel:
    """Lower a prim_func for `target`; the kernel is built by NVRTC on its first call.
    `target_host` is TileLang's host compiler target; Tegula has no host code to compile."""
    return JITKernel(func, out_idx=out_idx, target=target, pass_configs=pass_configs, verbose=verbose,
                     debug_root_path=debug_root_path, execution_backend=execution_backend,
                     compile_flags=compile_flags)


def par_compile(funcs, out_idx=None, execution_backend=None, target="auto", target_host=None,  # noqa: ARG001
                verbose=False, pass_configs=None, compile_flags=None, num_workers=None,
                ignore_error=False) -> list[JITKernel]:
    """TileLang's `tilelang.par_compile`: `compile` for each prim_func, the NVRTC builds
    run in `num_workers` threads (NVRTC releases the GIL). With `ignore_error`, a function
    that fails gives None in its place and a warning, instead of the exception."""
    funcs = list(funcs)
    check_workers(num_workers)
    for index, func in enumerate(funcs):
        if not isinstance(func, PrimFunc):
            raise TypeError(f"par_compile: funcs[{index}] must be a T.prim_func, got {type(func).__name__}")

    def lower_one(item):
        index, func = item
        return guarded(ignore_error, f"funcs[{index}]", compile, func, out_idx=out_idx, target=target,
                       pass_configs=pass_configs, verbose=verbose, execution_backend=execution_backend,
                       compile_flags=compile_flags)

    kernels = in_threads(lower_one, list(enumerate(funcs)), num_workers or min(len(funcs), os.cpu_count() or 1))
    return build_in_parallel(kernels, num_workers, ignore_error)


class DeviceFunction:
    """A kernel entry of a lowered artifact, by the name TVM's GlobalVar has (`name_hint`)."""

    __slots__ = ("name_hint",)

    def __init__(self, name_hint: str):
        self.name_hint = name_hint

    def __repr__(self):
        return f"I.GlobalVar({self.name_hint!r})"


class DeviceModule:
    """TileLang's `artifact.device_mod`: `functions` maps each kernel's entry (a
    DeviceFunction) to its lowered kernel, in launch order."""

    def __init__(self, lowered: list):
        self.functions = {DeviceFunction(l.entry): l for l in lowered}

    def __repr__(self):
        return f"<DeviceModule {[f.name_hint for f in self.functions]}>"


class LoweredArtifact:
    """What `tegula.lower` gives: the generated CUDA source (`kernel_source`), the kernel
    (`kernel`, a JITKernel; launched, it compiles with NVRTC) and `device_mod`, whose
    `functions` name the kernels' entries."""

    def __init__(self, kernel: JITKernel):
        self.kernel = kernel
        self.kernel_source = kernel.get_kernel_source()
        self.params = kernel.params
        self.device_mod = DeviceModule(kernel._lowered_all)

    def __repr__(self):
        return f"<LoweredArtifact of {self.kernel!r}>"


def lower(func: PrimFunc, target="auto", target_host=None, pass_configs=None) -> LoweredArtifact:  # noqa: ARG001
    """TileLang's `tilelang.lower(func, target=...)`: the prim_func lowered to CUDA source
    (`.kernel_source`), without NVRTC; `target_host` is TileLang's host target (none here)."""
    return LoweredArtifact(JITKernel(func, target=target, pass_configs=pass_configs))


def _python_side_outputs(pass_configs) -> bool:
    """Pass configs that print or write files while lowering: never skipped by the index."""
    options = to_options(pass_configs) if pass_configs else {}
    return bool(options.get("dump_ir") or options.get("kernels_output_dir"))


def _freeze(value, where: str):
    """A hashable key for one argument of a @jit function."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_freeze(v, where) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple(sorted((k, _freeze(v, where)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        raise TypeError(f"@tegula.jit: {where} of type {type(value).__name__} is not hashable, so the compiled "
                        "kernel cannot be cached; pass ints, floats, strings, dtypes or tuples") from None
    return (type(value).__name__, value)


class JITFunction:
    """A @tegula.jit function: call it with sizes to get a (cached) JITKernel."""

    def __init__(self, fn, settings: dict):
        self.fn = fn
        self.settings = settings
        self._kernels: dict = {}
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        functools.update_wrapper(self, fn)

    def _key(self, args, kwargs):
        # Bound with defaults applied, so f(1024), f(N=1024) and f(1024, dtype=<default>)
        # share one kernel.
        if self._signature is not None:
            try:
                bound = self._signature.bind(*args, **kwargs)
            except TypeError as err:
                raise TypeError(f"{self.fn.__name__}(): {err}") from None
            bound.apply_defaults()
            key = tuple((k, _freeze(v, f"argument '{k}'")) for k, v in bound.arguments.items())
        else:
            key = (tuple(_freeze(a, f"argument {i}") for i, a in enumerate(args)),
                   tuple(sorted((k, _freeze(v, f"argument '{k}'")) for k, v in kwargs.items())))
        context = parse_context()  # a call in an instrumentation session parses to another kernel
        return (key, context) if context else key

    def __call__(self, *args, **kwargs) -> JITKernel:
        key = self._key(args, kwargs)
        kernel = self._kernels.get(key)
        if kernel is None:
            kernel = self._compile(args, kwargs)
            self._kernels[key] = kernel
        return kernel

    def _bound(self, args, kwargs) -> list | None:
        """(name, value) of every argument, defaults applied; None without a signature."""
        if self._signature is None:
            return None
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return list(bound.arguments.items())

    def _construct(self, args, kwargs) -> PrimFunc:
        func = self.fn(*args, **kwargs)
        if not isinstance(func, PrimFunc):
            raise TypeError(f"@tegula.jit function {self.fn.__name__} must return a T.prim_func, "
                            f"got {type(func).__name__}")
        return func

    def _compile(self, args, kwargs) -> JITKernel:
        """A new kernel for this call: from the persistent index when it holds a current
        entry (no parsing, no lowering), else parsed and lowered here."""
        log = env.log_enabled()
        name = self.fn.__name__
        index_key = None
        if (jit_index.enabled() and not parse_context() and not self.settings.get("verbose")
                and not self.settings.get("debug_root_path")
                and not _python_side_outputs(self.settings.get("pass_configs"))):
            start = time.perf_counter()
            bound = self._bound(args, kwargs)
            target, guessed = env.resolve_target(self.settings.get("target"))
            index_key = None if bound is None else jit_index.key_for(self.fn, bound, self.settings, target, guessed)
            hit = jit_index.lookup(index_key) if index_key else None
            if log:
                env.log_compile(name, "index lookup", 1e3 * (time.perf_counter() - start),
                                "hit" if hit else "miss" if index_key else "not keyable")
            if hit is not None:
                meta, program = hit
                return JITKernel._from_index(meta, program, lambda: JITKernel(self._construct(args, kwargs),
                                                                              **self.settings))
        start = time.perf_counter()
        tracker = jit_index.Tracker() if index_key else None
        if tracker is None:
            func = self._construct(args, kwargs)
        else:
            with tracker:
                func = self._construct(args, kwargs)
        if log:
            env.log_compile(name, "python parse", 1e3 * (time.perf_counter() - start))
        kernel = JITKernel(func, **self.settings)
        if tracker is not None:
            deps = jit_index.dependencies(tracker, self.fn)
            if deps is not None:
                kernel._index_entry = (index_key, deps)
        return kernel

    def cache_clear(self) -> None:
        self._kernels.clear()

    def par_compile(self, configs, num_workers=None, ignore_error=False) -> list[JITKernel]:
        """The kernels of several argument sets (each a dict of keywords or a tuple),
        NVRTC building them in parallel; later calls with those arguments reuse them."""
        return par_compile_configs(self, configs, num_workers, ignore_error)

    def get_kernel_source(self, *args, **kwargs) -> str:
        """The CUDA source of the kernel these arguments give (compiled, or from the cache):
        TileLang's `fn.get_kernel_source(*args)` on a @jit function."""
        return self(*args, **kwargs).get_kernel_source()


# What the modules above the JIT hand it, each when imported (tegula/__init__.py imports
# them all), so that this module never imports them: the eager form's function class,
# EagerJITFunction (tegula/jit_eager.py), the Profiler class get_profiler returns
# (tegula/profiler.py), and the plot_layout that draws a layout (tegula/tools/layout_plot.py).
_EAGER_FUNCTION = []
_PROFILER = []
_LAYOUT_PLOT = []


def jit(func=None, *, out_idx=None, target="auto", pass_configs=None, verbose=False, debug_root_path=None,
        execution_backend=None, compile_flags=None):
    """`@tegula.jit` or `@tegula.jit(out_idx=[-1], ...)` on a function that returns a
    T.prim_func (or directly on a prim_func, which compiles it at once), or on a function
    that is itself the kernel body (the eager form, see tegula/jit_eager.py)."""
    settings = dict(out_idx=out_idx, target=target, pass_configs=pass_configs, verbose=verbose,
                    debug_root_path=debug_root_path, execution_backend=execution_backend,
                    compile_flags=compile_flags)

    def decorate(fn):
        if isinstance(fn, PrimFunc):
            return JITKernel(fn, **settings)
        if is_eager(fn):
            return _EAGER_FUNCTION[0](fn, settings)
        return JITFunction(fn, settings)

    return decorate if func is None else decorate(func)
