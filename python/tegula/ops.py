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
any custom op. A kernel that also writes one of its inputs is refused (an operator named
here returns its outputs); called raw inside torch.compile, such a kernel goes through an
operator that declares the write (traced.py, which builds both).
"""
from __future__ import annotations

import re

from . import traced


def custom_op(kernel, name: str):
    """Registers `kernel` (a JITKernel with out_idx, e.g. from a @tegula.jit function called
    with its sizes) as the operator `name` ("namespace::op_name") and returns it; it is
    also reachable as torch.ops.namespace.op_name."""
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
    return traced.make_operator(kernel, name, kernel._launch_direct, mutates=False, where="tegula.custom_op")
