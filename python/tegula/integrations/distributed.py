"""Tensor-parallel products whose communication overlaps the GEMM, on torch.distributed's
NCCL process groups (one process a GPU):

    from tegula.integrations.distributed import all_gather_matmul, matmul_reduce_scatter
    y = all_gather_matmul(x_shard, w_t, group)     # all_gather(x_shard) @ w_t
    z = matmul_reduce_scatter(h, w2_t, group)      # reduce_scatter(h @ w2_t), rows split by rank

The column-parallel product of a sequence-parallel layer needs every rank's rows of the
input; the row-parallel one ends with a reduce-scatter of partial sums. Run one after the
other, the GPU's tensor cores idle while NCCL moves the data and the links idle while the
GEMM runs. Here the rows are cut into `chunks` pieces:

- all_gather_matmul: the pieces of the other ranks' rows are fetched in order on a side
  stream, each followed by an event: by the copy engines from the other ranks'
  symmetric-memory buffers (torch's symmetric memory; no SM is taken from the GEMM), or by
  NCCL's all-gather. The product of this rank's own rows needs nothing and runs first,
  then the product of piece k of every rank runs as soon as piece k has arrived, while
  piece k + 1 is in flight.
- matmul_reduce_scatter: the product of piece k (rows k of every rank's share of the
  output, laid out as reduce_scatter wants them) is computed, then its reduce-scatter is
  issued on the side stream while piece k + 1 is multiplied.

The products are Tegula's GEMM (`matmul="tegula"`) or cuBLAS (`"torch"`). The result is the
unfused computation's, to the GEMM's rounding: the same products of the same rows, and the
same NCCL reduction. The side stream waits for torch's current stream on entry, and the
current stream waits for every piece before the call returns, so callers see one ordinary
stream-ordered op and every buffer's last use is ordered before anything after it. On one
rank, or without an initialised process group, they are plain products.
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["all_gather_matmul", "matmul_reduce_scatter"]

_SIDE = {}   # device -> the side stream the collectives run on


def _side_stream(device) -> torch.cuda.Stream:
    key = torch.device(device).index
    if key not in _SIDE:
        _SIDE[key] = torch.cuda.Stream(device=device)
    return _SIDE[key]


def _mm_into(policy: str, op: str):
    """f(x, w, out): out[...] = x @ w, by cuBLAS or by Tegula's GEMM."""
    if policy == "torch":
        return lambda x, w, out: torch.matmul(x, w, out=out)
    if policy == "tegula":
        from tegula.kernels import matmul

        return lambda x, w, out: out.copy_(matmul(x, w))
    raise ValueError(f"{op}: matmul must be 'tegula' or 'torch', got {policy!r}")


def _symmetric_memory_available() -> bool:
    try:
        import torch.distributed._symmetric_memory  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch.ops, "symm_mem")


def _world(group):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return 1, 0
    return dist.get_world_size(group), dist.get_rank(group)


def _check_operands(op: str, a_name: str, a, b_name: str, b):
    """Two 2-D CUDA tensors on one device whose inner sizes agree; errors name them."""
    for name, t in ((a_name, a), (b_name, b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"{op}: {name} must be 2-D, got shape {tuple(t.shape)}")
        if t.device.type != "cuda":
            raise ValueError(f"{op}: {name} must be a CUDA tensor, got one on {t.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{op}: {a_name} is {tuple(a.shape)} and {b_name} {tuple(b.shape)}: inner sizes differ")
    if b.device != a.device:
        raise ValueError(f"{op}: {b_name} must be on {a.device} ({a_name}'s device), got {b.device}")


def _pieces(rows: int, chunks: int, op: str):
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"{op}: chunks must be a positive int, got {chunks!r}")
    chunks = min(chunks, max(rows, 1))
    base, extra = divmod(rows, chunks)
    bounds, start = [], 0
    for k in range(chunks):
        size = base + (k < extra)
        bounds.append((start, start + size))
        start += size
    return [b for b in bounds if b[1] > b[0]]


_SYMM = {}   # (group name, device, dtype, shape) -> (buffer, its symmetric-memory handle)


def _symmetric(shape, dtype, device, group):
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    name = (group or dist.group.WORLD).group_name
    key = (name, device, dtype, tuple(shape))
    if key not in _SYMM:
        buf = symm_mem.empty(*shape, dtype=dtype, device=device)
        _SYMM[key] = buf, symm_mem.rendezvous(buf, name)
    return _SYMM[key]


def _copy_engine_gather(a_shard, group, world, rank, pieces, side, current):
    """(gathered (world * m, K), one event a piece): every rank's shard put in its own
    symmetric buffer, then the other ranks' pieces copied from theirs by the copy engines
    on the side stream (no SM work beside the GEMM), an event after each piece."""
    m, K = a_shard.shape
    buf, handle = _symmetric((world * m, K), a_shard.dtype, a_shard.device, group)
    buf[rank * m:(rank + 1) * m].copy_(a_shard)
    handle.barrier(channel=0)                  # every rank's shard is in its buffer
    side.wait_stream(current)
    arrived = []
    with torch.cuda.stream(side):
        for lo, hi in pieces:
            for r in range(world):
                if r != rank:
                    peer = handle.get_buffer(r, (world * m, K), a_shard.dtype)
                    buf[r * m + lo:r * m + hi].copy_(peer[r * m + lo:r * m + hi])
            event = torch.cuda.Event()
            event.record(side)
            arrived.append(event)
    return buf, handle, arrived


def all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor, group=None, *, chunks: int = 4,
                      matmul: str = "torch", transport: str = "auto",
                      out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """all_gather(a_shard, dim 0) @ b: a_shard (m, K) this rank's rows (every rank the same
    m), b (K, N) -> (world * m, N), rank r's rows at [r * m, (r + 1) * m). The all-gather
    runs in `chunks` pieces of rows on a side stream, each piece multiplied as it arrives.
    transport: "copy" (the other ranks' rows read from their symmetric-memory buffers by
    the copy engines: no SMs taken from the GEMM), "nccl" (NCCL's all-gather, piece by
    piece), or "auto" (copy where torch's symmetric memory is available)."""
    op = "all_gather_matmul"
    _check_operands(op, "a_shard", a_shard, "b", b)
    mm = _mm_into(matmul, op)
    world, rank = _world(group)
    m, n = a_shard.shape[0], b.shape[1]
    if out is None:
        out = torch.empty(world * m, n, dtype=torch.result_type(a_shard, b), device=a_shard.device)
    elif out.shape != (world * m, n) or out.device != a_shard.device:
        raise ValueError(f"{op}: out must be ({world * m}, {n}) on {a_shard.device}, got {tuple(out.shape)} on "
                         f"{out.device}")
    if world == 1:
        mm(a_shard, b, out)
        return out
    import torch.distributed as dist

    if transport not in ("auto", "copy", "nccl"):
        raise ValueError(f"{op}: transport must be 'auto', 'copy' or 'nccl', got {transport!r}")
    if transport == "auto":
        transport = "copy" if _symmetric_memory_available() else "nccl"
    a_shard = a_shard.contiguous()
    current, side = torch.cuda.current_stream(a_shard.device), _side_stream(a_shard.device)
    pieces = _pieces(m, chunks, op)
    if transport == "copy":
        gathered, handle, arrived = _copy_engine_gather(a_shard, group, world, rank, pieces, side, current)

        def rows(r, lo, hi):
            return gathered[r * m + lo:r * m + hi]
    else:
        # buffers[k] holds piece k of every rank: (world, rows of piece k, K)
        buffers = [torch.empty(world, hi - lo, a_shard.shape[1], dtype=a_shard.dtype, device=a_shard.device)
                   for lo, hi in pieces]
        arrived = []
        side.wait_stream(current)
        with torch.cuda.stream(side):
            for (lo, hi), buf in zip(pieces, buffers):
                dist.all_gather_into_tensor(buf, a_shard[lo:hi], group=group)
                event = torch.cuda.Event()
                event.record(side)
                arrived.append(event)
        starts = {lo: k for k, (lo, _) in enumerate(pieces)}

        def rows(r, lo, hi):
            return buffers[starts[lo]][r]
    mm(a_shard, b, out[rank * m:(rank + 1) * m])            # this rank's rows need no data
    for (lo, hi), event in zip(pieces, arrived):
        current.wait_event(event)
        for r in range(world):
            if r != rank:
                mm(rows(r, lo, hi), b, out[r * m + lo:r * m + hi])
    if transport == "copy":
        current.wait_stream(side)
        handle.barrier(channel=0)   # no rank rewrites its buffer while another still reads it
    return out


def matmul_reduce_scatter(a: torch.Tensor, b_shard: torch.Tensor, group=None, *, chunks: int = 4,
                          matmul: str = "torch") -> torch.Tensor:
    """reduce_scatter(a @ b_shard, dim 0): a (M, k) this rank's columns of the input, b_shard
    (k, N) its rows of the weight -> (M / world, N), this rank's rows of the summed product
    (M a multiple of world). Each piece's reduce-scatter runs on a side stream while the next
    piece is multiplied."""
    op = "matmul_reduce_scatter"
    _check_operands(op, "a", a, "b_shard", b_shard)
    mm = _mm_into(matmul, op)
    world, rank = _world(group)
    if world == 1:
        out = torch.empty(a.shape[0], b_shard.shape[1], dtype=torch.result_type(a, b_shard), device=a.device)
        mm(a, b_shard, out)
        return out
    M, n = a.shape[0], b_shard.shape[1]
    if M % world:
        raise ValueError(f"{op}: a's {M} rows do not split evenly over {world} ranks")
    import torch.distributed as dist

    m = M // world
    dtype = torch.result_type(a, b_shard)
    out = torch.empty(m, n, dtype=dtype, device=a.device)
    current, side = torch.cuda.current_stream(a.device), _side_stream(a.device)
    side.wait_stream(current)        # out and the inputs are ready for the side stream's work
    for lo, hi in _pieces(m, chunks, op):
        piece = torch.empty(world, hi - lo, n, dtype=dtype, device=a.device)
        for r in range(world):       # rows lo..hi of every rank's share, in rank order
            mm(a[r * m + lo:r * m + hi], b_shard, piece[r])
        ready = torch.cuda.Event()
        ready.record(current)
        side.wait_event(ready)
        with torch.cuda.stream(side):
            dist.reduce_scatter_tensor(out[lo:hi], piece, group=group)
        piece.record_stream(side)    # the next piece must not reuse its memory before the side stream read it
    current.wait_stream(side)
    return out
