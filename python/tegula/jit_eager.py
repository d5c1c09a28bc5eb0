"""Eager `@tegula.jit`: the decorated function is the kernel body (TileLang's eager style).

    @tegula.jit
    def matmul(A, B, block_M=128, block_N=128, block_K=32, dtype="float16"):
        M, N, K = T.const("M, N, K")      # sizes, bound from the call's tensor shapes
        A: T.Tensor((M, K), dtype)        # A, B: the kernel's tensor parameters
        B: T.Tensor[[K, N], dtype]
        C = T.empty((M, N), dtype)        # an output, allocated on every call
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            ...
        return C

    c = matmul(a, b, block_M=64)          # compiled on first use, then cached
    kernel = matmul.compile(M=1024, N=1024, K=1024, block_M=64)   # a JITKernel: kernel(a, b) -> c

Parameters declared in the body (`A: T.Tensor(...)`, `n: T.int32`) or in the signature
with a T.Tensor or a dtype are the kernel's parameters; every other argument is a
compile-time constant. frontend/parse_eager.py parses the body for one set of constants and
sizes (T.dynamic sizes stay symbolic, so one kernel serves all their values).

A call that was seen before costs Python's own argument binding, one dict lookup keyed on
the constants and the tensors' static sizes, then the C++ launcher: the lookup runs in a
function generated for the decorated one's signature (`_dispatcher`), e.g. for matmul

    def matmul(A, B, block_M=128, block_N=128, block_K=32, dtype="float16", **sizes):
        entry = get((block_M, block_N, block_K, dtype, A.shape, B.shape))   # miss -> slow path
        return entry.kernel(A, B)

Anything else (a new shape, keywords naming T.const sizes, unhashable constants) takes
the slow path, `_call`, which parses and compiles where needed.
"""
from __future__ import annotations

import functools
import inspect

import torch

from . import env, traced
from .frontend.parse_eager import EagerArgumentError, _body_declarations, _signature_specs, is_eager, parse_eager
from .frontend.prim_func import PrimFunc, _source_and_tree
from .jit import _EAGER_FUNCTION, JITKernel, _freeze
from .parallel_compile import par_compile_configs

_MISSING = inspect.Parameter.empty
__all__ = ["EagerJITFunction", "EagerArgumentError", "is_eager"]

_PREFIX = "_tegula_"  # names of the generated dispatcher; a parameter may not start with it


class _Template:
    """What calls with one set of constants share: the call positions of the kernel's
    inputs, and which tensor sizes pick the kernel. `mask` lists (position, dimension):
    dimension None stands for the whole torch.Size when no size is T.dynamic."""

    __slots__ = ("input_pos", "mask", "several", "kernels")

    def __init__(self, func: PrimFunc, kernel_pos: tuple):
        inputs = list(zip(kernel_pos, func.params))
        tensors = [(pos, p.shape) for pos, p in inputs if not p.is_scalar]
        self.input_pos = list(kernel_pos)
        if all(isinstance(size, int) for _, shape in tensors for size in shape):
            self.mask = [(pos, None) for pos, _ in tensors]
        else:
            self.mask = [(pos, d) for pos, shape in tensors for d, size in enumerate(shape) if isinstance(size, int)]
        self.several = len(func.params) - len(kernel_pos) > 1
        self.kernels: dict = {}

    def key(self, values) -> tuple:
        return tuple([values[i].shape if d is None else values[i].shape[d] for i, d in self.mask])


class _Shaped:
    """Stands for a tensor of a compiled kernel's parameter shape when keying it."""

    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)


class _Entry:
    __slots__ = ("kernel", "several")

    def __init__(self, kernel, several: bool):
        self.kernel = kernel
        self.several = several


class EagerJITFunction:
    """An eager @tegula.jit function: calling it runs the kernel on the arguments and
    returns its T.empty outputs (one tensor, a list of several as in TileLang, or None)."""

    def __init__(self, fn, settings: dict):
        if settings.get("out_idx") is not None:
            raise ValueError(f"@tegula.jit(out_idx=...) on {fn.__name__}: out_idx is for functions that return a "
                             "T.prim_func; an eager function's outputs are the T.empty tensors it returns")
        self.fn = fn
        self.settings = {k: v for k, v in settings.items() if k != "out_idx"}
        self._signature = inspect.signature(fn)
        params = list(self._signature.parameters.values())
        for p in params:
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise TypeError(f"@tegula.jit eager function {fn.__name__}: parameter '{p.name}' must be a plain "
                                "parameter (no *args, **kwargs or positional-only parameters)")
        self._names = tuple(p.name for p in params)
        self._index = {name: i for i, name in enumerate(self._names)}
        self._positional = sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
        self._defaults = tuple(p.default for p in params)
        self._layout = None  # (kernel names, their positions, constant positions, signature specs)
        self._templates: dict = {}  # constants (and T.const keywords) -> _Template
        self._compiled: dict = {}  # .compile's arguments -> JITKernel
        self._fast: dict = {}  # the dispatcher's key -> _Entry
        self._mask = None  # the template mask the dispatcher was generated for
        self._dispatch = self._call_arguments
        self._trace_key = traced.register(self)
        env.native().install_fast_call(EagerJITFunction, "_dispatch")  # once per class: C++ keeps it
        functools.update_wrapper(self, fn)

    # A call goes straight to the generated dispatcher (as JITKernel's goes to C++):
    # CPython calls `self._dispatch` through the slot install_fast_call sets; Dynamo reads
    # this __call__ and traces the dispatcher.
    def __call__(self, *args, **kwargs):
        return self._dispatch(*args, **kwargs)

    # ---- arguments ----
    def _get_layout(self):
        # Made on first use: signature annotations may name what is defined after the def.
        if self._layout is None:
            _, fn_node = _source_and_tree(self.fn)
            specs = _signature_specs(self.fn)
            declared = _body_declarations(fn_node, set(self._names)) | set(specs)
            kernel = tuple(n for n in self._names if n in declared)
            self._layout = (kernel, tuple(self._index[n] for n in kernel),
                            tuple(i for i, n in enumerate(self._names) if n not in declared), specs)
        return self._layout

    def _bind(self, args, kwargs):
        """The arguments in signature order (defaults applied, _MISSING where absent), and
        the keywords that name no parameter (T.const sizes), or None."""
        if len(args) > self._positional:
            raise TypeError(f"{self.fn.__name__}() takes {self._positional} positional argument(s) but "
                            f"{len(args)} were given")
        values = list(args) + list(self._defaults[len(args):])
        sizes = None
        for key, value in kwargs.items():
            index = self._index.get(key)
            if index is None:
                sizes = sizes or {}
                sizes[key] = value
            elif index < len(args):
                raise TypeError(f"{self.fn.__name__}() got multiple values for argument '{key}'")
            else:
                values[index] = value
        return values, sizes

    def _constants(self, values, sizes) -> tuple:
        key = tuple([values[i] for i in self._get_layout()[2]])
        if sizes:
            key += (tuple(sorted(sizes.items())),)
        try:
            hash(key)
        except TypeError:
            key = _freeze(key, "a constant argument")
        return key

    # ---- calls ----
    def _call_arguments(self, *args, **kwargs):
        values, sizes = self._bind(args, kwargs)
        missing = [self._names[i] for i, v in enumerate(values) if v is _MISSING]
        if missing:
            raise TypeError(f"{self.fn.__name__}() missing required argument(s): {', '.join(map(repr, missing))}")
        return self._call(values, sizes)

    def _call(self, values: list, sizes):
        """The slow path: find or make the kernel for these arguments, index it for the
        dispatcher, launch. Traced by torch.compile's Dynamo, the kernel is found outside
        the trace and called through its operator (traced.py)."""
        if torch.compiler.is_dynamo_compiling():
            return traced.eager_call(self, values, sizes)
        kernel, template = self._find_or_make(values, sizes)
        if not sizes:
            self._index_fast(values, template, kernel)
        out = kernel(*[values[i] for i in template.input_pos])
        return list(out) if template.several else out

    def kernel_for(self, values: list, sizes):
        """The kernel a call with these arguments runs, found or compiled: a tensor may be
        a stand-in with a shape (None for a size the kernel is not compiled for) and a
        dtype, a scalar None (traced.py)."""
        return self._find_or_make(values, sizes)[0]

    def _find_or_make(self, values: list, sizes):
        """(kernel, template) of a call with these arguments: the template's kernel for
        their sizes, or one parsed and compiled now and filed under it."""
        kernel, template = self._found(values, sizes)
        if kernel is not None:
            return kernel, template
        kernel_names, kernel_pos = self._get_layout()[:2]
        func = self._parse(values, sizes, {n: values[i] for n, i in zip(kernel_names, kernel_pos)})
        kernel = self._kernel(func)
        template = self._template(values, sizes, func)
        template.kernels[template.key(values)] = kernel
        return kernel, template

    def template_mask(self, values: list, sizes) -> tuple | None:
        """The sizes kernels of these constants are compiled for, as _Template.mask; None
        before the first."""
        template = self._templates.get(self._constants(values, sizes))
        return None if template is None else tuple(template.mask)

    def _found(self, values: list, sizes):
        """(kernel or None, template or None) already made for these arguments."""
        template = self._templates.get(self._constants(values, sizes))
        if template is None:
            return None, None
        try:
            return template.kernels.get(template.key(values)), template
        except (AttributeError, IndexError, TypeError):  # not a tensor: the parse says which
            return None, template

    def _cached(self, values):
        return self._found(values, None)[0]

    def _parse(self, values, sizes, arguments) -> PrimFunc:
        kernel_names, _, const_pos, specs = self._get_layout()
        constants = {self._names[i]: values[i] for i in const_pos}
        return parse_eager(self.fn, kernel_names, specs, constants, arguments, sizes or {})

    def _kernel(self, func: PrimFunc) -> JITKernel:
        inputs = len(self._get_layout()[1])
        return JITKernel(func, out_idx=list(range(inputs, len(func.params))) or None, **self.settings)

    def _template(self, values, sizes, func) -> _Template:
        key = self._constants(values, sizes)
        template = self._templates.get(key)
        if template is None:
            template = self._templates[key] = _Template(func, self._get_layout()[1])
        return template

    def _index_fast(self, values, template: _Template, kernel) -> None:
        """Lets the dispatcher find `kernel` for calls like this one: the dispatcher reads
        the sizes of the first template's mask, so kernels of another mask (sizes made
        T.dynamic by some constants only) stay on the slow path."""
        if self._mask is None:
            self._mask = template.mask
            self._dispatch = _dispatcher(self) or self._dispatch
        if template.mask != self._mask:
            return
        key = tuple([values[i] for i in self._get_layout()[2]]) + template.key(values)
        try:
            self._fast[key] = _Entry(kernel, template.several)
        except TypeError:  # unhashable constants: the slow path's frozen key finds it
            pass

    # ---- ahead of a call ----
    def get_tir(self, *args, **kwargs) -> PrimFunc:
        """The prim_func for these constants; sizes come from keywords (`M=1024`) or from
        tensors (or T.Tensor specs) given for the kernel's parameters."""
        values, sizes = self._bind(args, kwargs)
        kernel_names, kernel_pos, const_pos, _ = self._get_layout()
        missing = [self._names[i] for i in const_pos if values[i] is _MISSING]
        if missing:
            raise TypeError(f"{self.fn.__name__}() missing constant argument(s): {', '.join(map(repr, missing))}")
        return self._parse(values, sizes, {n: (None if values[i] is _MISSING else values[i])
                                           for n, i in zip(kernel_names, kernel_pos)})

    def compile(self, *args, **kwargs) -> JITKernel:
        """The JITKernel for these constants and sizes (see get_tir): call it with the
        kernel's inputs to get its outputs; get_kernel_source(), get_profiler() as usual.
        Calls of the function with tensors of these sizes then use it too."""
        values, sizes = self._bind(args, kwargs)
        kernel_pos = self._get_layout()[1]
        given = tuple(None if values[i] is _MISSING or not hasattr(values[i], "shape")
                      else (tuple(values[i].shape), str(getattr(values[i], "dtype", ""))) for i in kernel_pos)
        key = _freeze((tuple(values[i] for i in self._get_layout()[2]), sizes or {}, given), "an argument")
        kernel = self._compiled.get(key)
        if kernel is None and not sizes and all(g is not None for g in given):
            kernel = self._cached(values)  # made by a call with tensors like these
        if kernel is None:
            func = self.get_tir(*args, **kwargs)
            kernel = self._compiled[key] = self._kernel(func)
            # The sizes the kernel was made for, as a call's tensors would show them.
            shaped = list(values)
            for pos, param in zip(kernel_pos, func.params):
                shaped[pos] = param if param.is_scalar else _Shaped(param.shape)
            template = self._template(shaped, None, func)
            template.kernels.setdefault(template.key(shaped), kernel)
            if all(isinstance(s, int) for pos, d in template.mask for s in _sizes(shaped[pos], d)):
                self._index_fast(shaped, template, kernel)
        return kernel

    def get_kernel_source(self, *args, **kwargs) -> str:
        return self.compile(*args, **kwargs).get_kernel_source()

    def par_compile(self, configs, num_workers=None, ignore_error=False) -> list[JITKernel]:
        """`.compile` for each configuration (a dict of keywords or a tuple; a T.ptr
        parameter's value may be `T.ptr()`), NVRTC building the kernels in parallel; calls
        with tensors of those sizes then use them."""
        return par_compile_configs(self.compile, configs, num_workers, ignore_error)

    def cache_clear(self) -> None:
        self._templates.clear()
        self._compiled.clear()
        self._fast.clear()

    def __repr__(self):
        return f"<eager @tegula.jit {self.fn.__qualname__}>"


def _sizes(shaped: _Shaped, dim):
    return shaped.shape if dim is None else (shaped.shape[dim],)


def _dispatcher(jit: EagerJITFunction):
    """A function with the decorated function's signature (plus **sizes) that looks the
    kernel up in `jit._fast` and launches it, or hands the arguments to `jit._call`. None
    when a parameter's name would clash with the generated code's."""
    names = jit._names
    if any(name.startswith(_PREFIX) for name in names) or not jit.fn.__name__.isidentifier():
        return None
    kernel_names, _, const_pos, _ = jit._get_layout()
    env = {f"{_PREFIX}fast": jit._fast, f"{_PREFIX}slow": jit._call, f"{_PREFIX}tuple": list}
    signature = []
    keyword_only = False
    for index, param in enumerate(jit._signature.parameters.values()):
        if param.kind is param.KEYWORD_ONLY and not keyword_only:
            signature.append("*")
            keyword_only = True
        if param.default is param.empty:
            signature.append(param.name)
        else:
            env[f"{_PREFIX}d{index}"] = param.default
            signature.append(f"{param.name}={_PREFIX}d{index}")
    signature.append(f"**{_PREFIX}sizes")
    key = [names[i] for i in const_pos]
    key += [f"{names[pos]}.shape" if d is None else f"{names[pos]}.shape[{d}]" for pos, d in jit._mask]
    source = (
        f"def {_PREFIX}make({', '.join(env)}):\n"
        f"    def {jit.fn.__name__}({', '.join(signature)}):\n"
        f"        if not {_PREFIX}sizes:\n"
        f"            try:\n"
        f"                {_PREFIX}entry = {_PREFIX}fast.get(({''.join(k + ', ' for k in key)}))\n"
        f"            except Exception:\n"
        f"                {_PREFIX}entry = None\n"
        f"            if {_PREFIX}entry is not None:\n"
        f"                {_PREFIX}out = {_PREFIX}entry.kernel({', '.join(kernel_names)})\n"
        f"                return {_PREFIX}tuple({_PREFIX}out) if {_PREFIX}entry.several else {_PREFIX}out\n"
        f"        return {_PREFIX}slow([{', '.join(names)}], {_PREFIX}sizes or None)\n"
        f"    return {jit.fn.__name__}\n"
    )
    scope: dict = {}
    exec(compile(source, f"<tegula eager dispatcher of {jit.fn.__qualname__}>", "exec"), scope)  # noqa: S102
    dispatch = scope[f"{_PREFIX}make"](**env)
    dispatch.__qualname__ = jit.fn.__qualname__
    dispatch.__doc__ = jit.fn.__doc__
    return dispatch


_EAGER_FUNCTION.append(EagerJITFunction)
