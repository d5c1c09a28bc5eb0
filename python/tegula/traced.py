"""A kernel met by torch's tracers goes through a torch.library operator made for it.

A JITKernel call launches at once (the C++ launcher, no Python frame). When what it is
given has no memory to launch on (FakeTensor, torch.compile's functional tensors, a meta
tensor, vmap's BatchedTensor) or a TorchDispatchMode is active (FakeTensorMode, make_fx,
torch.export), the launcher hands the call here instead, and when torch.compile's Dynamo
traces a call it reads JITKernel.__call__, which comes here too. Either way the call
becomes one of the kernel's operator, `torch.ops.tegula_kernels.<name>_<n>`, made on
first use and kept for the kernel's life:

- its schema from the kernel's parameters: the inputs in order (`Tensor`, or `int`,
  `float`, `bool` for a scalar), a tensor the kernel writes declared mutated
  (`Tensor(a!)`: a kernel without out_idx writing its arguments), the outputs returned;
- its CUDA implementation is the launch itself;
- its fake implementation (what FakeTensorMode, Dynamo and torch.export run) checks the
  inputs as the launcher would (dimensions, dtype, the fixed sizes: a symbolic size is
  guarded equal) and makes the outputs, a T.dynamic size taken from the input dimension
  that declares it, symbolic when that is.

So `torch.compile(fullgraph=True)` (inductor, CUDA graphs), torch.export and
`torch.library.opcheck` see an ordinary operator. tegula.custom_op names one for a kernel
with out_idx, as a user-facing op (ops.py builds it the same way).
"""
from __future__ import annotations

import itertools
import operator
import re
import weakref

import torch

from .frontend.dtypes import to_torch

NAMESPACE = "tegula_kernels"

# The kernels and eager functions a trace may meet, by a key Dynamo reads as a constant
# (their `_trace_key`), and the operators made so far.
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_KEYS = itertools.count()
_OPS: dict = {}  # id(kernel) -> (the kernel's weakref, its CustomOpDef)


def register(obj) -> str:
    """A key for `obj` (a JITKernel or an eager @jit function) that finds it again: a
    string, which Dynamo reads as a constant (an int attribute it may make symbolic)."""
    key = str(next(_KEYS))
    _LIVE[key] = obj
    return key


# ---- the operator ----
def _scalar_type(dtype_name: str) -> str:
    if dtype_name == "bool":
        return "bool"
    if dtype_name.startswith(("int", "uint")):
        return "int"
    return "float"


def dim_sources(func, outputs: set) -> dict:
    """For each T.dynamic size: (input position, dimension) of a whole input dimension that
    declares it."""
    sources = {}
    position = 0
    for index, param in enumerate(func.params):
        if index in outputs:
            continue
        if not param.is_scalar:
            for d, size in enumerate(param.shape):
                if not isinstance(size, int) and id(size) not in sources:
                    sources[id(size)] = (position, d)
        position += 1
    return sources


def _alias(n: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[n] if n < 26 else letters[n // 26 - 1] + letters[n % 26]


class Signature:
    """What an operator of `kernel` is: schema, mutated inputs, the outputs' shapes (ints,
    or (input position, dimension) for a T.dynamic size) and dtypes, the inputs to check."""

    def __init__(self, kernel, where: str, mutated: set | None = None):
        func = kernel.prim_func
        outputs = set(kernel.out_idx)
        self.name = func.name
        sources = dim_sources(func, outputs)
        declared, self.mutated, self.inputs = [], [], []
        for index, param in enumerate(func.params):
            if index in outputs:
                continue
            if param.dtype == "handle":
                raise TypeError(f"{where}: kernel {func.name}'s parameter '{param.name}' is a T.ptr, an address "
                                "torch's tracers cannot follow; pass a tensor (T.Tensor) instead")
            if param.is_scalar:
                declared.append(f"{_scalar_type(param.dtype)} {param.name}")
            elif mutated and index in mutated:
                declared.append(f"Tensor({_alias(len(self.mutated))}!) {param.name}")
                self.mutated.append(param.name)
            else:
                declared.append(f"Tensor {param.name}")
            self.inputs.append(kernel.params[index])
        self.outputs = []
        for index in kernel.out_idx:
            param = func.params[index]
            dims = []
            for size in param.shape:
                if isinstance(size, int):
                    dims.append(size)
                elif id(size) in sources:
                    dims.append(sources[id(size)])
                else:
                    raise ValueError(f"{where}: output '{param.name}' of {func.name} has a dynamic size '{size}' "
                                     "that is not a whole dimension of an input, so its shape is not known before "
                                     "the kernel runs")
            self.outputs.append((tuple(dims), to_torch(param.dtype), kernel.params[index].dtype_name))
        returns = {0: "()", 1: "Tensor"}.get(len(self.outputs), "(" + ", ".join(["Tensor"] * len(self.outputs)) + ")")
        self.schema = f"({', '.join(declared)}) -> {returns}"

    def check(self, args) -> None:
        """The launcher's checks that need no memory: argument count, each tensor's
        dimensions, dtype and fixed sizes (a symbolic size is guarded equal)."""
        if len(args) != len(self.inputs):
            names = ", ".join(p.name for p in self.inputs)
            raise ValueError(f"{self.name}: expected {len(self.inputs)} argument(s) ({names}), got {len(args)}")
        for p, a in zip(self.inputs, args):
            if p.is_scalar:
                continue
            if not isinstance(a, torch.Tensor):
                raise ValueError(f"{self.name}: argument '{p.name}' must be a torch.Tensor, got {type(a).__name__}")
            packed = p.dtype_name in ("int4", "uint4", "float4_e2m1fn")
            if packed and a.dtype not in (torch.int8, torch.uint8) or not packed and a.dtype != p.dtype:
                raise ValueError(f"{self.name}: argument '{p.name}' must have dtype {p.dtype_name}, got {a.dtype}")
            if a.dim() != len(p.shape):
                raise ValueError(f"{self.name}: argument '{p.name}' must have {len(p.shape)} dimensions, got "
                                 f"{a.dim()}")
            for d, size in enumerate(p.shape):
                got = a.shape[d] * (2 if packed and d == len(p.shape) - 1 else 1)
                if size is not None and got != size:
                    raise ValueError(f"{self.name}: argument '{p.name}' dimension {d} must be {size}, got {got}")

    def fake_outputs(self, args) -> list:
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cuda"
        made = []
        for dims, dtype, dtype_name in self.outputs:
            shape = [args[d[0]].shape[d[1]] if isinstance(d, tuple) else d for d in dims]
            if dtype_name in ("int4", "uint4", "float4_e2m1fn"):
                shape[-1] = shape[-1] // 2
            made.append(torch.empty(shape, dtype=dtype, device=device))
        return made


def make_operator(kernel, name: str, launch, *, mutates: bool, where: str):
    """The torch.library operator `name` for `kernel`, launching through `launch` (the
    kernel's launcher without the tracing detour). mutates: declare the tensors the
    kernel writes as mutated (else a kernel writing an input is refused)."""
    written = set()
    for lowered in kernel._lowered_all:
        written.update(lowered.written_params)
    written -= set(kernel.out_idx)
    if written and not mutates:
        names = ", ".join(repr(kernel.prim_func.params[i].name) for i in sorted(written))
        raise ValueError(f"{where}: kernel {kernel.prim_func.name} writes its input(s) {names}; an operator made "
                         "by tegula.custom_op returns its outputs and may not write its inputs")
    sig = Signature(kernel, where, written)
    several = len(sig.outputs) > 1

    def impl(*args):
        result = launch(*args)
        if not sig.outputs:
            return None
        return tuple(result) if several else result

    def fake(*args):
        sig.check(args)
        made = sig.fake_outputs(args)
        if not made:
            return None
        return tuple(made) if several else made[0]

    op = torch.library.custom_op(name, impl, mutates_args=tuple(sig.mutated), schema=sig.schema)
    op.register_fake(fake)
    return op


def operator_for(kernel):
    """The kernel's own operator in the tegula_kernels namespace, made on first use."""
    entry = _OPS.get(id(kernel))
    if entry is not None and entry[0]() is kernel:
        return entry[1]
    base = re.sub(r"\W", "_", kernel.prim_func.name)
    name = f"{NAMESPACE}::{base}_{kernel._trace_key}"
    op = make_operator(kernel, name, kernel._launch_direct, mutates=True, where="tracing a tegula kernel")
    _OPS[id(kernel)] = (weakref.ref(kernel, lambda _, k=id(kernel): _OPS.pop(k, None)), op)
    return op


@torch.compiler.assume_constant_result
def _op_name(key: str) -> tuple:
    """Run by Dynamo outside its trace (its result a constant): the operator's name, the
    kernel's, and its inputs' names."""
    kernel = _LIVE[key]
    return operator_for(kernel)._name, kernel.prim_func.name, _input_names(kernel)


def _input_names(kernel) -> tuple:
    return tuple(p.name for p in kernel.params if not p.is_output)


def _check_count(kernel_name: str, inputs: tuple, args) -> None:
    if len(args) != len(inputs):  # before the dispatcher, whose message names no kernel
        raise ValueError(f"{kernel_name}: expected {len(inputs)} argument(s) ({', '.join(inputs)}), got {len(args)}")


# ---- calls ----
def call(kernel, args):
    """A call of `kernel` through its operator, with the eager call's result: one tensor,
    a list of several, or None."""
    if torch.compiler.is_dynamo_compiling():
        name, kernel_name, inputs = _op_name(kernel._trace_key)
        _check_count(kernel_name, inputs, args)
        out = getattr(getattr(torch.ops, NAMESPACE), name)(*args)
    else:
        _check_count(kernel.prim_func.name, _input_names(kernel), args)
        out = operator_for(kernel)(*args)
    return list(out) if isinstance(out, tuple) else out


def traced_launcher(kernel):
    """What the kernel's launcher calls instead of launching when its arguments need
    tracing: a function holding the kernel weakly (the launcher is the kernel's)."""
    ref = weakref.ref(kernel)

    def traced(*args):
        return call(ref(), args)

    return traced


# ---- an eager @tegula.jit function under Dynamo ----
# Dynamo hands a function's result out of its trace only for constant arguments, and it
# cannot tell a symbolic size from an int; so the sizes a kernel is compiled for (its
# template's mask, or every size before the first template) are made ints (guarded), the
# others left out (None): a T.dynamic size stays symbolic once a kernel of those constants
# exists.
class _Described:
    """A tensor argument by its shape (None: a size left symbolic) and dtype: what
    parsing an eager body reads of one."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype


def _arguments(jit, constants: tuple, described: tuple | None) -> list:
    kernel_pos, const_pos = jit._get_layout()[1], jit._get_layout()[2]
    values = [None] * (len(kernel_pos) + len(const_pos))
    for i, value in zip(const_pos, constants):
        values[i] = value
    for i, d in zip(kernel_pos, described or ()):
        values[i] = _Described(*d[1:]) if d[0] == "tensor" else None
    return values


@torch.compiler.assume_constant_result
def _eager_layout(key: str) -> tuple:
    """(kernel parameter positions, constant positions) of the eager function's call."""
    layout = _LIVE[key]._get_layout()
    return tuple(layout[1]), tuple(layout[2])


@torch.compiler.assume_constant_result
def _eager_mask(key: str, constants: tuple, sizes: tuple) -> tuple | None:
    """The (position, dimension) sizes the kernels of these constants are compiled for
    (dimension None: the whole shape); None before the first such kernel."""
    jit = _LIVE[key]
    return jit.template_mask(_arguments(jit, constants, None), dict(sizes) if sizes else None)


@torch.compiler.assume_constant_result
def _eager_op(key: str, constants: tuple, described: tuple, sizes: tuple) -> str:
    """The operator of the kernel a call with arguments like these runs, found or compiled."""
    jit = _LIVE[key]
    return operator_for(jit.kernel_for(_arguments(jit, constants, described), dict(sizes) if sizes else None))._name


def eager_call(jit, values: list, sizes):
    """An eager @jit function's call traced by Dynamo: its kernel found or compiled
    outside the trace, then called through the kernel's operator."""
    key = jit._trace_key
    kernel_pos, const_pos = _eager_layout(key)
    constants = tuple(values[i] for i in const_pos)
    sizes_key = tuple(sorted(sizes.items())) if sizes else ()
    mask = _eager_mask(key, constants, sizes_key)
    described = []
    for i in kernel_pos:
        value = values[i]
        if isinstance(value, torch.Tensor):
            # operator.index, not int: Dynamo specialises a symbolic size (a guard) for it.
            shape = tuple(operator.index(s) if mask is None or (i, None) in mask or (i, d) in mask else None
                          for d, s in enumerate(value.shape))
            described.append(("tensor", shape, value.dtype))
        else:
            described.append(("scalar",))
    name = _eager_op(key, constants, tuple(described), sizes_key)
    out = getattr(getattr(torch.ops, NAMESPACE), name)(*[values[i] for i in kernel_pos])
    return list(out) if isinstance(out, tuple) else out
