"""`JITKernel.adapter`: TileLang's view of how a compiled kernel is called.

TileLang hands a kernel to one of several execution backends (cython, tvm_ffi, nvrtc)
through an adapter object; programs read it to see the function as compiled and the
module that runs it:

    kernel = tegula.compile(func, out_idx=[1, 2])
    kernel.adapter.prim_func.attrs["tilelang_out_idx"]   # [1, 2]: the outputs it allocates
    kernel.adapter.dynamic_symbolic_map                  # None: sizes are bound at the call
    module = kernel.adapter.get_exportable_executable().jit()
    module.get_function(kernel.adapter.prim_func.name)   # the launcher, as kernel(...) is

Tegula has one backend: a C++ launcher that checks the arguments, reads every dynamic
size off the tensors and allocates the outputs (see JITKernel.__call__). So there is no
map from dynamic sizes to argument positions kept in Python, and the module holds
exactly one function, the kernel itself.
"""
from __future__ import annotations

import copy


class RuntimeModule:
    """A loaded executable: its one function, by the prim_func's name."""

    def __init__(self, name: str, launcher):
        self.name = name
        self._launcher = launcher

    def get_function(self, name: str, query_imports: bool = False):  # noqa: ARG002 - TileLang's signature
        """The launcher for `name`; an AttributeError for any other name (TileLang's
        modules raise the same for a function they do not hold)."""
        if not isinstance(name, str):
            raise TypeError(f"get_function: name must be a str, got {type(name).__name__}")
        if name != self.name:
            raise AttributeError(f"module of kernel {self.name!r} has no function {name!r} (it holds only {self.name!r})")
        return self._launcher

    def __getitem__(self, name: str):
        return self.get_function(name)


class Executable:
    """The built program as it can be saved (`.bytes`, for `tegula._C.load_program`) and
    loaded again (`.jit()`)."""

    def __init__(self, name: str, program):
        self.name = name
        self.program = program

    @property
    def bytes(self) -> bytes:
        return self.program.save()

    def jit(self) -> RuntimeModule:
        return RuntimeModule(self.name, self.program.launcher)


class KernelAdapter:
    """What `kernel.adapter` gives (see the module docstring)."""

    dynamic_symbolic_map = None  # the C++ launcher binds dynamic sizes itself

    def __init__(self, kernel):
        self._kernel = kernel

    @property
    def prim_func(self):
        """The function as compiled: the prim_func, with attrs["tilelang_out_idx"] the
        outputs the call allocates (from T.empty or from out_idx)."""
        kernel = self._kernel
        func = kernel.prim_func
        if not kernel.out_idx or func.attrs.get("tilelang_out_idx") is not None:
            return func
        shown = copy.copy(func)
        shown.attrs = {**func.attrs, "tilelang_out_idx": list(kernel.out_idx)}
        return shown

    @property
    def params(self) -> list:
        return self._kernel.params

    @property
    def kernels(self) -> list:
        """The lowered kernels, one per `with T.Kernel` block, in launch order."""
        return self._kernel._lowered_all

    def get_kernel_source(self, kernel_only: bool = True) -> str:
        return self._kernel.get_kernel_source(kernel_only)

    def get_host_source(self) -> str:
        return self._kernel.get_host_source()

    def get_exportable_executable(self) -> Executable:
        """The built program (NVRTC through the cache; built on first need)."""
        kernel = self._kernel
        program = kernel._program or kernel._build()
        return Executable(kernel.__dict__.get("_name") or kernel.prim_func.name, program)

    def __repr__(self):
        return f"<KernelAdapter of {self._kernel!r}>"
