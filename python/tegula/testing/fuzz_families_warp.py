"""Fuzz family of warp shuffles: every thread of blocks of whole warps loads X[i] (0 past a
ragged end), then takes 1..3 steps, each a shuffle of its value (by lane index, up, down or
xor, in groups of 1..32 lanes; spelled T.shfl_* or TileLang's T.tvm_warp_shuffle* with TVM's
argument order and a warp_size CUDA does not use) that replaces the value or is added to it;
Y[i] is the result. The reference cannot run a warp's lanes together (a tile program is one
logical thread per block), so the program carries an oracle: the same steps in torch, on
each warp's 32 values."""
from __future__ import annotations

import torch

from .fuzz_gen import Kernel, _size

_OPS = ("idx", "up", "down", "xor")
_SHFL = {"idx": "T.shfl_sync", "up": "T.shfl_up", "down": "T.shfl_down", "xor": "T.shfl_xor"}
_TVM = {"idx": "T.tvm_warp_shuffle", "up": "T.tvm_warp_shuffle_up", "down": "T.tvm_warp_shuffle_down"}


def _source_lanes(op: str, arg, width: int) -> torch.Tensor:
    """The lane each of a warp's 32 lanes reads (as the device library's shuffles choose it)."""
    lane = torch.arange(32)
    group = lane - lane % width
    d = arg(lane)
    if op == "idx":
        return group + d % width
    if op == "up":
        return torch.where(lane - d >= group, lane - d, lane)
    if op == "down":
        return torch.where(lane + d < group + width, lane + d, lane)
    partner = (lane ^ d) & 31
    return torch.where(partner < group + width, partner, lane)


def gen_warp_shuffle(k: Kernel) -> None:
    c = k.c
    dt = c.choice(["float32", "int32", "float16"])
    k.dtypes.add(dt)
    threads = c.choice([32, 64, 128])
    N = _size(c, threads)
    X = k.tensor("X", [str(N)], [N], dt, values="ints" if dt != "float32" else "signed")
    Y = k.tensor("Y", [str(N)], [N], dt, role="out")
    k.header = f"with T.Kernel(T.ceildiv({N}, {threads}), threads={threads}) as bx:"
    k.body.emit("tx = T.get_thread_binding()")
    k.body.emit("lane = tx % 32")
    v, s = k.fresh("v"), k.fresh("s")
    k.body.emit(f"{v} = T.alloc_var(\"{dt}\")")
    k.body.emit(f"{s} = T.alloc_var(\"{dt}\")")
    k.body.emit(f"{v} = {X}[bx * {threads} + tx]")
    steps = []
    for _ in range(c.int(1, 3)):
        op = c.choice(_OPS)
        width = c.choice([1, 2, 4, 8, 16, 32])
        if op == "idx" and c.flip(0.5):  # a lane computed per thread
            a, b = c.int(1, 9), c.int(0, 40)
            lane_src, arg = f"lane * {a} + {b}", (lambda lane, a=a, b=b: lane * a + b)
        else:
            d = c.int(0, 31 if op in ("idx", "xor") else width)
            lane_src, arg = str(d), (lambda lane, d=d: torch.full_like(lane, d))
        tvm = op in _TVM and c.flip(0.5)
        if tvm:
            warp_size = c.choice([32, width])
            call = f"{_TVM[op]}(0xFFFFFFFF, {v}, {lane_src}, {width}, {warp_size})"
        else:
            call = f"{_SHFL[op]}({v}, {lane_src}, width={width})"
        add = dt != "float16" and c.flip(0.5)  # float16 steps only move values: exact in any order
        k.body.emit(f"{s} = {call}")
        k.body.emit(f"{v} = {v} + {s}" if add else f"{v} = {s}")
        steps.append((_source_lanes(op, arg, width), add))
        k.features.update({f"warp_shuffle_{op}", "warp_shuffle_tvm" if tvm else "warp_shuffle_shfl"})
    k.body.emit(f"{Y}[bx * {threads} + tx] = {v}")
    k.features.add("warp_shuffle")

    def oracle(inputs: list) -> dict:
        x = inputs[0]
        padded = torch.zeros(-(-N // threads) * threads, dtype=x.dtype)
        padded[:N] = x
        w = padded.view(-1, 32)
        for src, add in steps:
            w = w + w[:, src] if add else w[:, src]
        return {"Y": w.reshape(-1)[:N]}

    k.oracle = oracle


FAMILIES = [(gen_warp_shuffle, 1)]
