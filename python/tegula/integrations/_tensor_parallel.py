"""How the linear layers of a model sharded with torch's tensor-parallel API
(`torch.distributed.tensor.parallel.parallelize_module`: weights become DTensors on a 1-D
device mesh) are split, and the local shards the patched forwards compute with.

    ColwiseParallel   weight Shard(0): this rank holds some output features (heads, or
                      intermediate columns); the product of the full input with the local
                      shard is this rank's part of the output, nothing to communicate
    RowwiseParallel   weight Shard(1): this rank holds some input features; the product of
                      its part of the input is a partial sum, all-reduced over the mesh,
                      and the (replicated) bias is added once, after the reduction

A weight that is not a DTensor, or a DTensor replicated on every rank, is used whole.
Anything else (a 2-D mesh, a partial or uneven placement the forwards cannot follow) is
refused by name when the model is patched, never approximated."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class Linear(NamedTuple):
    """One nn.Linear as the patched forward uses it."""
    weight: torch.Tensor            # the local shard: a plain tensor (a view, no copy)
    bias: Optional[torch.Tensor]    # column: the local shard; row: the whole bias, added after the reduction
    split: str                      # "none", "column" or "row"
    group: object                   # the mesh's process group (None when split is "none")
    mesh: object                    # the DTensor's device mesh, or None


def _dtensor_class():
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:   # pragma: no cover - a torch built without distributed
        return None
    return DTensor


def is_dtensor(t) -> bool:
    cls = _dtensor_class()
    return cls is not None and isinstance(t, cls)


def _placement(t, what: str):
    """'replicate', 'shard0' or 'shard1' for a DTensor on a 1-D mesh; ValueError otherwise."""
    from torch.distributed.tensor import Replicate, Shard

    if t.device_mesh.ndim != 1:
        raise ValueError(f"apply: {what} is a DTensor on a {t.device_mesh.ndim}-D device mesh; the patched "
                         f"forwards follow tensor parallelism on a 1-D mesh only")
    (p,) = t.placements
    if isinstance(p, Replicate):
        return "replicate"
    if isinstance(p, Shard) and p.dim in (0, 1):
        return f"shard{p.dim}"
    raise ValueError(f"apply: {what} has placement {p}; the patched forwards take Replicate(), Shard(0) "
                     f"(ColwiseParallel) or Shard(1) (RowwiseParallel)")


def local(t, what: str):
    """A replicated tensor's local value (t itself when it is not a DTensor)."""
    if t is None or not is_dtensor(t):
        return t
    if _placement(t, what) != "replicate":
        raise ValueError(f"apply: {what} is sharded ({t.placements[0]}); the patched forwards need it "
                         f"replicated on every rank")
    return t.to_local()


def linear(module, what: str) -> Linear:
    """The split of an nn.Linear's weight and its local shards."""
    w, b = module.weight, module.bias
    if not is_dtensor(w):
        if is_dtensor(b):
            raise ValueError(f"apply: {what}.bias is a DTensor but its weight is not")
        return Linear(w, b, "none", None, None)
    kind = _placement(w, f"{what}.weight")
    mesh = w.device_mesh
    if kind == "replicate":
        return Linear(w.to_local(), local(b, f"{what}.bias"), "none", None, mesh)
    world = mesh.size()
    dim = 0 if kind == "shard0" else 1
    if w.shape[dim] % world:
        raise ValueError(f"apply: {what}.weight's {w.shape[dim]} {'rows' if dim == 0 else 'columns'} do not "
                         f"split evenly over {world} ranks")
    if dim == 0:
        bias = None
        if b is not None:
            if not is_dtensor(b) or _placement(b, f"{what}.bias") != "shard0":
                raise ValueError(f"apply: {what}.bias must be sharded like its weight (Shard(0))")
            bias = b.to_local()
        return Linear(w.to_local(), bias, "column", mesh.get_group(), mesh)
    return Linear(w.to_local(), local(b, f"{what}.bias"), "row", mesh.get_group(), mesh)


def check_pair(where: str, column: dict, row: tuple):
    """`column` ({name: Linear}) feed `row` (name, Linear): either nothing is split, or every
    column-side layer is ColwiseParallel and the row-side one RowwiseParallel, on one mesh."""
    row_name, row_linear = row
    splits = {name: lin.split for name, lin in column.items()}
    if row_linear.split == "none" and all(s == "none" for s in splits.values()):
        return
    wrong = [n for n, s in splits.items() if s != "column"]
    if wrong or row_linear.split != "row":
        raise ValueError(f"apply: {where}: {', '.join(f'{n} is {s}' for n, s in splits.items())} and {row_name} "
                         f"is {row_linear.split}; the patched forwards take {', '.join(splits)} ColwiseParallel "
                         f"with {row_name} RowwiseParallel, or none of them split")
    meshes = [lin.mesh for lin in list(column.values()) + [row_linear]]
    if any(m != meshes[0] for m in meshes[1:]):
        raise ValueError(f"apply: {where}: the layers are sharded on different device meshes")


def fused_gate_up(gate: Linear, up: Linear, gate_param, up_param):
    """One (2I_local, K) weight, the local gate rows then the local up rows, and the two
    parameters to put back in the modules: views of it (DTensors again where the originals
    were, so the model's state dict and its sharding stay as they were)."""
    fused = torch.cat([gate.weight.detach(), up.weight.detach()], dim=0)
    inter = gate.weight.shape[0]
    views = fused[:inter], fused[inter:]
    if gate.split == "none" and not is_dtensor(gate_param):
        return fused, views
    from torch.distributed.tensor import DTensor

    wrapped = tuple(DTensor.from_local(v, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                       stride=p.stride())
                    for v, p in zip(views, (gate_param, up_param)))
    return fused, wrapped


# A partial sum this small (a decode step's: batch x hidden) is all-reduced in one kernel
# through torch's symmetric memory (every rank reads its peers' copies over NVLink, no
# multicast) rather than by NCCL, whose fixed cost dominates small messages.
ONE_SHOT_MAX_BYTES = 1 << 20
_BUFFERS = {}     # (group name, device, dtype, numel) -> the rendezvoused symmetric buffer
_MAX_BUFFERS = 16


def _one_shot_buffer(t: torch.Tensor, group):
    """The symmetric-memory buffer for t's size, or None where the one-shot path does not
    apply (set up on first use: a collective, which every rank reaches at the same call)."""
    import os

    import torch.distributed as dist

    if os.environ.get("TEGULA_ALL_REDUCE", "auto") == "nccl" or not t.is_cuda or \
            t.numel() * t.element_size() > ONE_SHOT_MAX_BYTES or dist.get_backend(group) != "nccl":
        return None
    if not hasattr(torch.ops, "symm_mem") or not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy"):
        return None
    name = (group or dist.group.WORLD).group_name
    key = (name, t.device, t.dtype, t.numel())
    buf = _BUFFERS.get(key)
    if buf is None:
        if len(_BUFFERS) >= _MAX_BUFFERS:
            return None
        import torch.distributed._symmetric_memory as symm_mem

        buf = symm_mem.empty(t.numel(), dtype=t.dtype, device=t.device)
        symm_mem.rendezvous(buf, name)
        _BUFFERS[key] = buf
    return buf, name


def all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    """t summed over the group's ranks: for a small CUDA tensor on NCCL's group, torch's
    symmetric-memory one-shot all-reduce (a new tensor); else NCCL or gloo, in place.
    TEGULA_ALL_REDUCE=nccl keeps every call on NCCL."""
    import torch.distributed as dist

    one_shot = _one_shot_buffer(t, group)
    if one_shot is not None:
        buf, name = one_shot
        return torch.ops.symm_mem.one_shot_all_reduce_copy(buf, t.reshape(-1), "sum", name).view(t.shape)
    dist.all_reduce(t, group=group)
    return t
