"""Checking the compiler against itself on the CPU, no GPU needed.

    kernel = my_kernel(256, 1024)                      # any target: nothing is launched
    y = tegula.testing.reference(kernel, x)            # the program's meaning
    y_sim = tegula.testing.simulate(kernel, x)         # what the lowered code computes

Both take a compiled kernel and the call's arguments as a kernel call does (the `out_idx`
outputs left out), as CPU tensors, and return the outputs the way the call would: None, one
tensor, or a list. Tensors the kernel writes that are not `out_idx` outputs are written in
place, as on the GPU.

`reference` interprets the kernel as written: tile ops at tile level, every `T.Parallel`
iteration one after another, every block one after another. It is independent of every
pass, so it is the oracle for tests and a debugging aid: a wrong GPU result that
`reference` shares is a wrong program; one it does not is a compiler bug.

`simulate` runs the code after the last pass, every thread of every block (small shapes),
with barriers, warp shuffles and cp.async groups modelled. It raises `SimulationError`
when the run did something a GPU would hide or make flaky (an out-of-bounds access, a
read of unwritten memory, a race between barriers, two blocks storing different values
into one element of global memory: the blocks run one at a time here, and at once on a
GPU, where which store lands is a race). `simulate` agreeing with `reference`
is the CPU-side proof that the passes kept the program's meaning.

Outputs start poisoned (NaN for float dtypes, the dtype's minimum for integers), so an
element the kernel never writes shows up.

The package also holds what `tilelang.testing` gives TileLang's own tests, with TileLang's
meaning (markers.py, perf.py): `requires_cuda`, `requires_cuda_compute_version[_ge|_gt|_le
|_lt|_eq]`, `requires_package`, `set_random_seed`, `torch_assert_close` (from
tegula.utils.tensor), `main()` (pytest on the calling file), `process_func`, `regression`.
"""
from __future__ import annotations

import torch

from ..frontend.dtypes import PACKED_STORAGE, is_packed
from ..frontend.errors import from_native
from ..utils.tensor import torch_assert_close
from . import markers as _markers
from .markers import *  # noqa: F401,F403 - the decorators named in markers.__all__
from .perf import process_func, regression

__all__ = ["reference", "simulate", "SimulationError", "AssumptionError", "poison", "pack_4bit", "unpack_4bit"]
__all__ += [*_markers.__all__, "torch_assert_close", "process_func", "regression"]


class SimulationError(AssertionError):
    """The simulated run did something a GPU run would hide or make flaky."""


class AssumptionError(SimulationError, RuntimeError):
    """The call breaks a T.assume that a launch checks (a condition of the sizes and
    scalars at the top of the kernel): the RuntimeError the launch raises, and for the
    interpreters a finding like SimulationError's."""


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fills t with a value no correct kernel leaves in an output (in place; returns t)."""
    if str(t.dtype).endswith("float4_e2m1fn_x2"):  # no arithmetic in torch: both nibbles -6
        t.view(torch.uint8).fill_(0xFF)
        return t
    if t.dtype.is_floating_point:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).min)


# float4_e2m1fn's 16 values by code: sign bit 3, then 2 exponent bits and 1 mantissa bit.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _logical_shape(t: torch.Tensor, dtype: str) -> tuple:
    """A tensor's shape in elements of `dtype`: a 4-bit type's last dimension holds two a byte."""
    shape = tuple(t.shape)
    return (*shape[:-1], 2 * shape[-1]) if is_packed(dtype) and shape else shape


def unpack_4bit(t: torch.Tensor, dtype: str) -> torch.Tensor:
    """The float64 values of a packed 4-bit tensor (int4, uint4, float4_e2m1fn; two elements
    a byte, the even one in the low nibble), on the CPU, with the last dimension doubled."""
    b = t.detach().contiguous().view(torch.uint8).to("cpu", torch.int64)
    nib = torch.stack([b & 15, b >> 4], dim=-1).flatten(-2)
    if dtype == "int4":
        return ((nib ^ 8) - 8).double()
    if dtype == "uint4":
        return nib.double()
    mag = torch.tensor(_E2M1, dtype=torch.float64)[nib & 7]
    return torch.where(nib >= 8, -mag, mag)


def pack_4bit(values: torch.Tensor, dtype: str) -> torch.Tensor:
    """The uint8 bytes holding `values` (already of `dtype`: integers in range, e2m1 values),
    two a byte, the last dimension halved; unpack_4bit's inverse."""
    v = values.detach().to("cpu", torch.float64)
    if dtype in ("int4", "uint4"):
        nib = v.to(torch.int64) & 15
    else:
        table = torch.tensor(_E2M1, dtype=torch.float64)
        code = (v.abs().unsqueeze(-1) - table).abs().argmin(-1)
        nib = code | (torch.signbit(v).to(torch.int64) << 3)
    pairs = nib.reshape(*nib.shape[:-1], -1, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)


def _prepare(kernel, args):
    from ..jit import JITKernel

    if not isinstance(kernel, JITKernel):
        raise TypeError(f"expected a compiled kernel (a JITKernel), got {type(kernel).__name__}")
    params = kernel.params
    if len(args) != kernel.num_inputs:
        names = ", ".join(p.name for p in params if not p.is_output)
        raise ValueError(f"{kernel.prim_func.name}: expected {kernel.num_inputs} argument(s) ({names}), got {len(args)}")
    given = iter(args)
    full = []
    for p in params:
        if p.is_output:
            full.append(None)
            continue
        value = next(given)
        if p.dtype_name == "handle":  # T.ptr: a tensor, an address or None, as at a launch
            if not (isinstance(value, torch.Tensor) or value is None or
                    (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64)):
                raise TypeError(f"{kernel.prim_func.name}: argument '{p.name}' (T.ptr) must be a tensor or an address "
                                f"(an int such as tensor.data_ptr()), got {type(value).__name__}")
            full.append(value)
            continue
        if p.is_scalar:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{kernel.prim_func.name}: argument '{p.name}' must be a number, got {type(value).__name__}")
            full.append(value)
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{kernel.prim_func.name}: argument '{p.name}' must be a torch.Tensor, got {type(value).__name__}")
        packed = is_packed(p.dtype_name)
        if packed and str(value.dtype).rsplit(".", 1)[-1] not in PACKED_STORAGE or not packed and value.dtype != p.dtype:
            raise ValueError(f"{kernel.prim_func.name}: argument '{p.name}' must have dtype {p.dtype_name}, got {value.dtype}")
        if value.dim() != len(p.shape):
            raise ValueError(f"{kernel.prim_func.name}: argument '{p.name}' must have {len(p.shape)} dimensions, "
                             f"got {value.dim()}")
        for d, (want, got) in enumerate(zip(p.shape, _logical_shape(value, p.dtype_name))):
            if want is not None and want != got:
                raise ValueError(f"{kernel.prim_func.name}: argument '{p.name}' must have shape {p.shape}, "
                                 f"got dimension {d} = {got}")
        full.append(value)
    # The outputs' dynamic sizes come from the inputs: the kernel's signature says which.
    func = kernel.prim_func
    dynamic = dynamic_sizes(kernel, full)
    # An output may also be sized by integer scalar arguments (T.empty((3, n * 2), ...)), as
    # the runtime allocates it; a workspace may not.
    scalars = {id(info.value): value for info, value in zip(func.params, full)
               if info.is_scalar and isinstance(value, int) and not isinstance(value, bool)}
    outputs = []
    for i, (p, info) in enumerate(zip(params, func.params)):
        if not p.is_output:
            continue
        shape = [d if isinstance(d, int) else dynamic[id(d)] if id(d) in dynamic
                 else _workspace_size(kernel, info, d, dynamic, _native(), scalars) for d in info.shape]
        if is_packed(p.dtype_name):
            shape[-1] //= 2
        out = poison(torch.empty(shape, dtype=p.dtype))
        full[i] = out
        outputs.append(out)
    return full, outputs, dynamic


def _native():
    from ..env import native

    return native()


def dynamic_sizes(kernel, full) -> dict:
    """id(dynamic var) -> its value in this call's tensors (a dimension a * n + b gives n)."""
    from ..env import native

    sizes = {}
    for info, value in zip(kernel.prim_func.params, full):
        if isinstance(value, torch.Tensor):
            for dim, size in zip(info.shape, _logical_shape(value, info.dtype)):
                if isinstance(dim, int):
                    continue
                if any(dim is var for var in kernel.prim_func.dynamic_vars):
                    sizes[id(dim)] = size
                    continue
                used = list(getattr(dim, "dyn", ()))
                if len(used) == 1 and hasattr(dim, "expr"):
                    ev = native().ir.eval_int
                    b, ab = ev(dim.expr, [(used[0].expr, 0)]), ev(dim.expr, [(used[0].expr, 1)])
                    if b is not None and ab is not None and ab > b and (size - b) % (ab - b) == 0:
                        sizes[id(used[0])] = (size - b) // (ab - b)
    return sizes


def _workspace_size(kernel, ws, dim, dynamic: dict, C, scalars: dict | None = None) -> int:
    """One dimension of a T.alloc_global workspace in this call: a constant, a T.dynamic
    size, or an expression over those (what the runtime allocates too)."""
    if isinstance(dim, int):
        return dim
    if id(dim) in dynamic:
        return dynamic[id(dim)]
    values = [(var.expr, dynamic[id(var)]) for var in getattr(dim, "dyn", ()) if id(var) in dynamic]
    if scalars:  # an output's dimension computed from the scalar arguments
        if id(dim) in scalars:
            return scalars[id(dim)]
        values += [(info.value.expr, scalars[id(info.value)]) for info in kernel.prim_func.params
                   if info.is_scalar and id(info.value) in scalars]
    size = C.ir.eval_int(dim.expr, values) if hasattr(dim, "expr") else None
    if size is None or size < 0:
        shape = "(" + ", ".join(str(d) for d in ws.shape) + ")"
        problem = "cannot be computed from this call's dynamic sizes" if size is None else f"is {size} in this call"
        raise ValueError(f"{kernel.prim_func.name}: T.alloc_global '{ws.name}' has shape {shape}, whose entry "
                         f"{dim} {problem}")
    return size


def _region_dtype(t: torch.Tensor) -> str:
    from ..frontend.dtypes import normalize_dtype

    return normalize_dtype(t.dtype)


def _memory(full, wide, names, memory, name: str) -> tuple[list, list]:
    """What the call's addresses may point into (T.make_tensor): every contiguous tensor
    argument (its float64 copy shared with the argument's), each tensor given for a T.ptr parameter, and
    each of `memory`, as (address, dtype, float64 tensor); and (original, copy) of those
    that are no argument, to copy the results back. A T.ptr parameter's value becomes its
    tensor's address."""
    regions, back, seen = [], [], {}

    def add(t: torch.Tensor, copy, what: str, argument: bool = False):
        if not t.is_contiguous():
            raise ValueError(f"{name}: {what} must be contiguous (the interpreters read it as one run of elements)")
        start, size = t.data_ptr(), t.numel() * t.element_size()
        key = (start, size, t.dtype)
        if key in seen:
            return seen[key]
        for (s, n, _), _c in seen.items():
            if start < s + n and s < start + size:
                if argument:  # arguments that share memory stay arguments; no address reaches them
                    return None
                raise ValueError(f"{name}: {what} overlaps another tensor the call can reach; give each piece of "
                                 "memory once")
        if copy is None:
            copy = t.detach().to("cpu", torch.float64).contiguous()
            back.append((t, copy))
        regions.append((start, _region_dtype(t), copy))
        seen[key] = copy
        return copy

    for i, (v, nm) in enumerate(zip(full, names)):
        # A strided (T.StridedTensor) argument is no run of elements an address could reach.
        if isinstance(v, torch.Tensor) and nm != "handle" and not is_packed(nm or "") and v.numel() and \
                v.is_contiguous():
            add(v, wide[i], f"argument {i}", argument=True)
    for i, (v, nm) in enumerate(zip(full, names)):
        if nm == "handle":
            if isinstance(v, torch.Tensor):
                add(v, None, f"the tensor of T.ptr argument {i}")
                wide[i] = v.data_ptr()
            elif v is None:
                wide[i] = 0
    for j, t in enumerate(memory or ()):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: memory[{j}] must be a tensor, got {type(t).__name__}")
        if t.numel():
            add(t, None, f"memory[{j}]")
    return regions, back


def _run(kernel, args, method, memory=None):
    full, outputs, dynamic = _prepare(kernel, args)
    names = [p.dtype_name for p in kernel.params] + [None] * len(kernel.prim_func.workspaces)
    wide = [(unpack_4bit(v, name) if is_packed(name) else v.detach().to("cpu", torch.float64).contiguous())
            if isinstance(v, torch.Tensor) and name != "handle" else v for v, name in zip(full, names)]
    regions, back = _memory(full, wide, names, memory, kernel.prim_func.name)
    from .. import env

    C = env.native()
    # T.alloc_global workspaces: fresh and poisoned, shared by the kernels of the call.
    for ws in kernel.prim_func.workspaces:
        shape = [_workspace_size(kernel, ws, d, dynamic, C) for d in ws.shape]
        wide.append(poison(torch.empty(shape, dtype=torch.float64)))
    try:
        results = [getattr(lowered, method)(wide, regions) for lowered in kernel._lowered_all]
    except C.CompileError as err:
        raise from_native(err, kernel.prim_func.source) from None
    except C.AssumptionError as err:
        raise AssumptionError(str(err)) from None
    result = results[0] if len(results) == 1 else [r for part in results for r in (part or [])]
    for original, computed in back:
        original.copy_(computed.to(original.dtype).to(original.device))
    for original, computed, name in zip(full, wide, names):
        if name == "handle":
            continue
        if isinstance(original, torch.Tensor) and is_packed(name):
            original.view(torch.uint8).copy_(pack_4bit(computed, name).to(original.device))
        elif isinstance(original, torch.Tensor):
            original.copy_(computed.to(original.dtype).to(original.device))
    if not outputs:
        out = None
    elif len(outputs) == 1:
        out = outputs[0]
    else:
        out = outputs
    return out, result


def reference(kernel, *args, memory=None):
    """The kernel's outputs as the language defines them, computed on the CPU. `memory`:
    tensors the call's addresses may point into besides its arguments (those a pointer
    table lists, for T.make_tensor); they are read and written like the arguments."""
    return _run(kernel, args, "reference", memory)[0]


def simulate(kernel, *args, check: bool = True, memory=None):
    """The kernel's outputs as its lowered code computes them, thread by thread on the CPU.
    With check (the default), raises SimulationError if the run accessed memory out of
    bounds, read what was never written, raced, or misused a barrier or shuffle. `memory`:
    as for reference."""
    out, errors = _run(kernel, args, "simulate", memory)
    if check and errors:
        raise SimulationError(f"{kernel.prim_func.name}: the simulated run is not sound:\n  " + "\n  ".join(errors))
    return out
