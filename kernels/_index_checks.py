"""Checked indices: the entry points that read index tensors validate them against the
tensors they index, on request.

    out = mla_decode(q, pages, lens, block_table=table, check_indices=True)
    TEGULA_CHECK_INDICES=1 python serve.py      # every call, unless it says check_indices=False

Unchecked, a bad index gives a quiet answer, never an error: a page or row past its tensor
reads zeros (the engine masks a load past an edge), a length past the cache counts as its
end, an expert id outside [0, E) is dropped, and offsets that decrease give rows no expert
writes. Checked, the first bad entry (row-major) is a ValueError naming the argument, the
entry's position and value, and the range it must be in. Each check copies its index
tensors to the host, a device-to-host read that waits for the GPU, so it is off by default.

What is checked, per entry point:

    mla_decode      cache_seqlens in [0, capacity] (S_max, or max_pages x 64 when paged);
                    block_table entries a sequence reads (its first ceil(len / 64)) in
                    [0, num_pages)
    flash_decode    cache_seqlens in [0, S_max]
    rope            positions in [0, P), P the rows of the cos/sin tables (without tables
                    every position has an angle, and nothing is checked)
    grouped_gemm    offsets non-decreasing, from offsets[0] >= 0 to offsets[E] <= M
    moe_align_block_size  topk_ids in [0, num_experts), or -1 (a dropped slot)
    moe_permute     sorted_token_ids in [0, T top_k] (T top_k: the padding entry)
    moe_combine     token_positions in [0, R) (the rows of y), or -1 (a dropped slot)

The checks need data: a call being traced (torch.compile, FakeTensorMode, meta tensors)
or captured into a CUDA graph is not checked, and keeps its unchecked behaviour.
"""
from __future__ import annotations

import torch

from tegula import env

Tensor = torch.Tensor


def check_switch(op: str, check_indices) -> None:
    """check_indices is None (the environment decides) or a bool."""
    if check_indices is not None and not isinstance(check_indices, bool):
        raise TypeError(f"{op}: check_indices must be None (TEGULA_CHECK_INDICES decides) or a bool, "
                        f"got {check_indices!r}")


def wanted(op: str, check_indices, *tensors) -> bool:
    """Whether this call checks its indices: `check_indices` True or False, or None for
    the environment's TEGULA_CHECK_INDICES; and only where `tensors` hold data the host
    can read now (`readable`)."""
    check_switch(op, check_indices)
    on = env.check_indices() if check_indices is None else check_indices
    return on and readable(*tensors)


def readable(*tensors) -> bool:
    """Plain tensors with data, outside tracing and CUDA-graph capture (None is skipped)."""
    if torch.compiler.is_compiling():
        return False
    present = [t for t in tensors if t is not None]
    for t in present:
        # FakeTensor, FunctionalTensor and the other subclasses of tracing have no data.
        if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter or t.is_meta:
            return False
    if any(t.is_cuda for t in present) and torch.cuda.is_current_stream_capturing():
        return False
    return True


def _host(t: Tensor) -> Tensor:
    return t.detach().to("cpu", torch.int64)


def _first(bad: Tensor):
    """The position (a tuple) of the first True entry of `bad` in row-major order, or None."""
    hits = bad.reshape(-1).nonzero()
    if hits.numel() == 0:
        return None
    return tuple(int(i) for i in torch.unravel_index(hits[0, 0], bad.shape))


def _at(name: str, pos) -> str:
    return f"{name}[{', '.join(map(str, pos))}]"


def check_range(op: str, name: str, t: Tensor, lo: int, hi: int, what: str, allowed=()) -> None:
    """Every entry of t in [lo, hi), or one of `allowed` (such as -1 for a dropped slot);
    `what` says what the range is."""
    host = _host(t)
    bad = (host < lo) | (host >= hi)
    for value in allowed:
        bad &= host != value
    pos = _first(bad)
    if pos is not None:
        extra = "".join(f" or {v}" for v in allowed)
        raise ValueError(f"{op}: {_at(name, pos)} = {int(host[pos])} is out of range: its entries must be in "
                         f"[{lo}, {hi - 1}]{extra} ({what})")


def check_lengths(op: str, name: str, lengths: Tensor, capacity: int, what: str) -> None:
    """Per-sequence lengths in [0, capacity]; `what` names the capacity."""
    check_range(op, name, lengths, 0, capacity + 1, what)


def check_block_table(op: str, block_table: Tensor, lengths: Tensor, page: int, num_pages: int,
                      pages_of: str = "kv_cache") -> None:
    """The entries each sequence reads, its first ceil(len_b / page) (lengths already
    checked), in [0, num_pages): the pages of `pages_of`. Entries past those are unused
    and may hold anything (padding such as -1)."""
    table, tokens = _host(block_table), _host(lengths)
    read = (tokens.clamp(min=0) + page - 1) // page
    columns = torch.arange(table.shape[1])
    used = columns[None, :] < read[:, None]
    pos = _first(used & ((table < 0) | (table >= num_pages)))
    if pos is not None:
        b = pos[0]
        raise ValueError(f"{op}: {_at('block_table', pos)} = {int(table[pos])} is not a page of {pages_of}: "
                         f"the entries a sequence reads must be in [0, {num_pages - 1}] ({pages_of} holds "
                         f"{num_pages} pages); sequence {b} has {int(tokens[b])} tokens, so it reads its "
                         f"first {int(read[b])} entries")


def check_offsets(op: str, offsets: Tensor, rows: int, rows_of: str = "a") -> None:
    """Row offsets of E groups: offsets[0] >= 0, non-decreasing, offsets[E] <= rows."""
    host = _host(offsets)
    rule = f"offsets must be non-decreasing, from offsets[0] >= 0 to offsets[-1] <= {rows} (the rows of {rows_of})"
    if host.numel() == 0:
        return
    if host[0] < 0:
        raise ValueError(f"{op}: offsets[0] = {int(host[0])} is negative: {rule}")
    pos = _first(host[1:] < host[:-1])
    if pos is not None:
        e = pos[0]
        raise ValueError(f"{op}: offsets[{e + 1}] = {int(host[e + 1])} is less than offsets[{e}] = "
                         f"{int(host[e])}: {rule}")
    if host[-1] > rows:
        raise ValueError(f"{op}: offsets[{host.numel() - 1}] = {int(host[-1])} is past the end: {rule}")
