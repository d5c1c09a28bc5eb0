"""How tegula's operators are called, below kernels/_ops.py (which registers them) and
kernels/_model_ops.py (whose public functions call them): a tensor argument taken from
torch or any DLPack / __cuda_array_interface__ producer, `torch.ops.tegula.<name>` or, when
nothing traces the call, the implementation itself (`_call`), and `out=` calls. The
registries `_IMPLS`, `_FUNCTIONS` and `EAGER` are filled by _ops as it registers."""
from __future__ import annotations

import functools
import inspect
import os

import torch

from ._common import check_out, describe, refuse_grad

NS = "tegula"

# name -> the op's implementation; name -> its torch.autograd.Function (the ops with a
# formula); name -> the kernel module's eager entry point (`out=` calls).
_IMPLS = {}
_FUNCTIONS = {}
EAGER = {}


def _interop():
    from tegula import interop

    return interop


def _tensor(op: str, name: str, value):
    """A torch.Tensor for `value`: itself, or a zero-copy view of a DLPack /
    __cuda_array_interface__ producer (CuPy, JAX, Numba, ...). Anything else: TypeError
    naming the argument."""
    if isinstance(value, torch.Tensor):
        return value
    if not (hasattr(value, "__dlpack__") or hasattr(value, "__cuda_array_interface__")):
        raise TypeError(f"{op}: {name} must be a torch.Tensor (or an array exposing __dlpack__ or "
                        f"__cuda_array_interface__), got {describe(value)}")
    return _interop().as_torch(value, f"{op}: {name}")


def _op(name: str):
    return getattr(getattr(torch.ops, NS), name)


def _eager(args) -> bool:
    """Whether a call may skip the dispatcher: not being traced (torch.compile, a dispatch
    or function mode such as FakeTensorMode or make_fx), and every tensor a plain one on a
    real device. A custom op's Python dispatch costs microseconds per call and, on its
    first call in a process, seconds of torch's own imports; the eager path costs neither
    and runs the same implementation (and, for grad, the same formulas)."""
    if _compiling() or _dispatch_modes() or _function_modes():
        return False
    for a in args:
        if type(a) is not torch.Tensor and type(a) is not _Parameter:
            # A subclass (FakeTensor, a functional tensor, ...); nn.Parameter, a module's
            # weight, is a plain tensor to the dispatcher and takes the eager road.
            if isinstance(a, torch.Tensor):
                return False
        elif a.is_meta:
            return False
    return True


_Parameter = torch.nn.Parameter
_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled


def _call(name: str, *args):
    """`torch.ops.tegula.<name>(*args)`, or its implementation directly when `_eager`
    allows: through the op's autograd formula as a torch.autograd.Function when an input
    requires grad (and grad recording is on), else the plain function."""
    if not _eager(args):
        return _op(name)(*args)
    if name in _FUNCTIONS and torch.is_grad_enabled() and \
            any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
        return _FUNCTIONS[name].apply(*args)
    return _IMPLS[name](*args)


def _refuse_all(op: str, **named) -> None:
    for name, t in named.items():
        refuse_grad(op, name, t)


def _with_out(entry, out, *args):
    """An `out=` call: the eager entry point writes `out` in place. Traced (torch.compile,
    FakeTensorMode, ...: whatever `_eager` refuses) it is the op and a copy into out.
    Either way there is no backward through it (as for torch's own out= variants): an
    input that requires grad is refused."""
    if not _eager((*args, out)):
        result = _op(entry.__name__)(*args)
        check_out(entry.__name__, out, result.shape, result)
        return out.copy_(result)
    return entry(*args, out=out)


def planned(public):
    """`public`, with its eager calls replayed from entry plans: the first calls of each
    argument signature run `public` under a recorder, and once two recordings agree the
    signature's later calls allocate and launch what they recorded, without Python
    (`tegula._C.EntryPlans`, src/bindings/entry_plans.cc, says what a recording may
    contain and when one is refused). Traced calls (torch.compile's Dynamo, which reads
    `public` itself) always run `public`. TEGULA_ENTRY_PLANS=0 turns plans off.
    The wrapper's `plans` attribute counts hits and refusals (`plans.stats()`)."""
    if os.environ.get("TEGULA_ENTRY_PLANS", "1").strip() == "0":
        return public
    try:
        from tegula.env import native

        plans = native().EntryPlans(public)
    except ImportError:  # the core is not built: the public function as it is
        return public
    compiling = torch.compiler.is_compiling
    if "check_indices" in inspect.signature(public).parameters:
        from tegula.env import check_indices

        # TEGULA_CHECK_INDICES is read per call (a session may switch it); a checked call
        # reads indices to the host, which no plan repeats.
        @functools.wraps(public)
        def entry(*args, **kwargs):
            if compiling() or (kwargs.get("check_indices") is None and check_indices()):
                return public(*args, **kwargs)
            return plans(args, kwargs)
    else:
        @functools.wraps(public)
        def entry(*args, **kwargs):
            if compiling():
                return public(*args, **kwargs)
            return plans(args, kwargs)

    entry.plans = plans
    return entry


def plan_constant(t: torch.Tensor) -> torch.Tensor:
    """t, declared a tensor this module keeps between calls whose memory entry plans may
    launch with (a placeholder argument the kernel never reads, a table built once and
    never changed): held for the life of the process. Without the core, t itself."""
    try:
        from tegula.env import native

        return native().entry_plan_constant(t)
    except ImportError:
        return t
