"""Time per op class for a model's forward: `OpTimer`'s scopes and the attribution of the
GPU's kernel record to them (used by tegula.integrations.transformers and the
`python -m tegula model` command)."""
from __future__ import annotations

import time

import torch

OP_CLASSES = ("GEMM", "attention", "norm", "RoPE", "MLP activation", "communication", "other")


class OpTimer:
    """Time per op class, from the GPU's own record of its kernels.

    `scope(label)` (or `push(label)` / `pop()`) brackets the work of one op class. Scopes
    nest; work belongs to its innermost scope, so a GEMM inside the MLP counts as GEMM.
    `measure(fn)` runs fn with the scopes on and returns (fn's result, {label: ms}):

    - on a CUDA device, the scopes are profiler ranges (torch.autograd.profiler's
      record_function) and the times are the durations of the kernels, copies and fills
      the GPU ran inside each range, from torch.profiler's CUDA activity record. Time the
      GPU sat idle waiting for the host counts nowhere, so the classes add up to the GPU's
      busy time however slow the instrumented host is. Work outside every scope is "other".
    - on the CPU, each scope's own wall-clock time (its children's excluded).

    Off (the default, outside `measure`) a scope costs one attribute test."""

    def __init__(self, device="cuda"):
        self.enabled = False
        self.cuda = torch.device(device).type == "cuda"
        self._records = []   # CPU: [label, start, end, parent index]
        self._stack = []

    def reset(self):
        self._records.clear()
        self._stack.clear()

    def push(self, label: str):
        if not self.enabled:
            return
        if self.cuda:
            scope = torch.autograd.profiler.record_function(label)
            scope.__enter__()
            self._stack.append(scope)
            return
        parent = self._stack[-1] if self._stack else None
        self._stack.append(len(self._records))
        self._records.append([label, time.perf_counter(), None, parent])

    def pop(self):
        if not self.enabled:
            return
        if self.cuda:
            self._stack.pop().__exit__(None, None, None)
            return
        self._records[self._stack.pop()][2] = time.perf_counter()

    def scope(self, label: str):
        """A context manager bracketing its body in `label` (a shared no-op one when off)."""
        if not self.enabled:
            return _OFF
        return _Scope(self, label)

    def measure(self, fn):
        """(fn(), {label: ms}) with the scopes on (see the class note)."""
        self.reset()
        self.enabled = True
        try:
            if not self.cuda:
                out = fn()
                return out, self._wall_totals()
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                out = fn()
                torch.cuda.synchronize()
            return out, gpu_time_by_range(prof)
        finally:
            self.enabled = False
            self.reset()

    def _wall_totals(self) -> dict:
        inclusive = [(end - start) * 1e3 for _, start, end, _ in self._records]
        own = list(inclusive)
        for i, (_, _, _, parent) in enumerate(self._records):
            if parent is not None:
                own[parent] -= inclusive[i]
        out = {}
        for (label, *_), t in zip(self._records, own):
            out[label] = out.get(label, 0.0) + t
        return out


class _Off:
    """The scope of a timer that is off: nothing to do, and nothing allocated per call
    (the patched ops enter one per op, so it is on the decode step's host path)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _Scope:
    def __init__(self, timer, label):
        self.timer, self.label = timer, label

    def __enter__(self):
        self.timer.push(self.label)

    def __exit__(self, *exc):
        self.timer.pop()
        return False


_OFF = _Off()
_GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def gpu_time_by_range(prof) -> dict:
    """{label: ms} from a finished torch.profiler run: each GPU activity (kernel, copy,
    fill) counted in the innermost profiler range around it on the GPU's timeline (the
    trace's gpu_user_annotation spans), "other" outside every range."""
    import json
    import os
    import tempfile

    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    return attribute_gpu_time(events)


def attribute_gpu_time(events) -> dict:
    """The attribution of `gpu_time_by_range` over chrome-trace events (ts and dur in µs):
    a sweep over start times keeping the open ranges on a stack (ranges nest), each piece
    of GPU work going to the range on top that contains it."""
    spans = [(e["ts"], e["ts"] + e.get("dur", 0), e["name"]) for e in events
             if e.get("cat") == "gpu_user_annotation" and e.get("ph") == "X"]
    work = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events
            if e.get("cat") in _GPU_WORK and e.get("ph") == "X"]
    # At one start time: ranges before work, the longer (outer) range first.
    items = sorted([(s, 0, -(t - s), t, name) for s, t, name in spans]
                   + [(s, 1, 0, t, None) for s, t in work])
    open_ranges, totals = [], {}     # open_ranges: (end, name), innermost last
    for start, kind, _, end, name in items:
        while open_ranges and open_ranges[-1][0] <= start:
            open_ranges.pop()
        if kind == 0:
            open_ranges.append((end, name))
            continue
        label = "other"
        for range_end, range_name in reversed(open_ranges):
            if range_end >= end:
                label = range_name
                break
        totals[label] = totals.get(label, 0.0) + (end - start) / 1e3
    return totals
