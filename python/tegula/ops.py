"""A user's kernel as a PyTorch operator, in one line:

    @tegula.jit(out_idx=[-1])
    def scale_add(M, N, block=128): ...           # returns a T.prim_func (X, Y, s, Z)

    kernel = scale_add(T.dynamic("m"), 1024)      # or fixed sizes
    op = tegula.custom_op(kernel, "mylib::scale_add")
    z = op(x, y, 2.0)                              # = torch.ops.mylib.scale_add(x, y, 2.0)

The operator's schema comes from the kernel's parameters: the inputs (every parameter not
in `out_idx`, in order) are `Tensor` or, for a scalar parameter, `int`/`float`/`bool` by its
dtype; the outputs (`out_idx`) are the returned tensors. The fake implementation (what
torch.compile and FakeTensorMode see) makes outputs of the parameters' shapes and dtypes,
a T.dynamic size taken from the input dimension that declares it. So
`torch.compile(fullgraph=True)` traces through the call, and `torch.library.opcheck`
applies. A backward can be added with `torch.library.register_autograd(op, ...)`, as for
any custom op.
"""
from __future__ import annotations

import re

from .frontend.dtypes import to_torch

def _scalar_type(dtype_name: str) -> str:
    if dtype_name == "bool":
        return "bool"
    if dtype_name.startswith(("int", "uint")):
        return "int"
    return "float"


def _dim_sources(func, outputs: set) -> dict:
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


def custom_op(kernel, name: str):
    """Registers `kernel` (a JITKernel with out_idx, e.g. from a @tegula.jit function called
    with its sizes) as the operator `name` ("namespace::op_name") and returns it; it is
    also reachable as torch.ops.namespace.op_name."""
    import torch

    from .jit import JITKernel

    if not isinstance(kernel, JITKernel):
        raise TypeError("tegula.custom_op: kernel must be a compiled JITKernel (call the @tegula.jit function with "
                        f"its sizes first), got {type(kernel).__name__}")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w*::[A-Za-z_]\w*", name):
        raise ValueError(f"tegula.custom_op: name must be 'namespace::op_name', got {name!r}")
    if not kernel.out_idx:
        raise ValueError(f"tegula.custom_op: kernel {kernel.prim_func.name} has no out_idx, so its outputs are "
                         "arguments it writes in place; an operator returns its outputs: compile it with "
                         "tegula.jit(out_idx=[...])")
    func = kernel.prim_func
    outputs = set(kernel.out_idx)
    sources = _dim_sources(func, outputs)
    declared = []
    for index, param in enumerate(func.params):
        if index in outputs:
            continue
        kind = _scalar_type(param.dtype) if param.is_scalar else "Tensor"
        declared.append(f"{kind} {param.name}")
    out_shapes = []
    for index in kernel.out_idx:
        param = func.params[index]
        dims = []
        for size in param.shape:
            if isinstance(size, int):
                dims.append(size)
            elif id(size) in sources:
                dims.append(sources[id(size)])
            else:
                raise ValueError(f"tegula.custom_op: output '{param.name}' of {func.name} has a dynamic size "
                                 f"'{size}' that is not a whole dimension of an input, so its shape is not known "
                                 "before the kernel runs")
        out_shapes.append((tuple(dims), to_torch(param.dtype)))
    returns = "Tensor" if len(out_shapes) == 1 else "(" + ", ".join("Tensor" for _ in out_shapes) + ")"
    schema = f"({', '.join(declared)}) -> {returns}"

    def impl(*args):
        result = kernel(*args)
        return tuple(result) if isinstance(result, list) else result

    def fake(*args):
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        made = [torch.empty([args[d[0]].shape[d[1]] if isinstance(d, tuple) else d for d in dims],
                            dtype=dtype, device=device)
                for dims, dtype in out_shapes]
        return made[0] if len(made) == 1 else tuple(made)

    op = torch.library.custom_op(name, impl, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op
