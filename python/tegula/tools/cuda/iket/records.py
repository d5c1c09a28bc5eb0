"""The host side of iket: a log per launch of an instrumented kernel, and the records
decoded from it.

A kernel parsed with instrumentation on carries a `KernelEvents` among its launch hooks
(frontend/builder.py). The JIT lets it wrap the kernel's launches: before each, a log is
allocated on the launch's device and stream (kernels/include/tegula/iket.h gives its
layout) and handed to the launcher, which passes it to the kernel as its last argument.
Nothing waits for the kernel: the logs are read when the records are asked for
(`launches(kernel)`, `write_traces()`, `trace_files()`, and at exit when a trace
directory is set), each as one `LaunchTrace`.

A trace file `<kernel>.trace.json` holds the kernel's events, its launches with their
markers and ranges, and the same as Chrome trace events ("traceEvents": Perfetto and
chrome://tracing open the file as it is; one process per launch, one track per thread).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import struct
import threading
from pathlib import Path
from typing import NamedTuple

from . import state

HEADER_BYTES = 32
RECORD_BYTES = 32
PHASES = ("mark", "range_start", "range_end")
_PENDING_BYTES = 256 << 20  # logs waiting past this are read at the next launch


class Record(NamedTuple):
    """One event of one thread. time_ns: the GPU's global timer; payload: the value
    recorded, or None."""

    name: str
    event_id: int
    phase: str
    time_ns: int
    block: int
    thread: int
    sm: int
    payload: int | float | None


def _payload(bits: int, dtype: str | None):
    if dtype is None:
        return None
    if dtype == "float32":
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    return bits - (1 << 32) if dtype == "int32" and bits >= 1 << 31 else bits


class LaunchTrace:
    """The records of one launch, in the order they were claimed: a thread's records in
    that order are its events in program order. `claimed` counts every event the launch
    reached; `dropped` those past the log's capacity."""

    def __init__(self, index: int, device: int, claimed: int, capacity: int, records: list[Record]):
        self.index = index
        self.device = device
        self.claimed = claimed
        self.dropped = max(0, claimed - capacity)
        self.records = records

    def __repr__(self):
        return f"<LaunchTrace {self.index}: {len(self.records)} records, {self.dropped} dropped>"

    @property
    def start_ns(self) -> int:
        return min((r.time_ns for r in self.records), default=0)

    def by_thread(self) -> dict[tuple[int, int], list[Record]]:
        """(block, thread) -> that thread's records, in program order."""
        threads: dict[tuple[int, int], list[Record]] = {}
        for r in self.records:
            threads.setdefault((r.block, r.thread), []).append(r)
        return threads

    @property
    def markers(self) -> list[dict]:
        return [{"name": r.name, "block": r.block, "thread": r.thread, "sm": r.sm, "time_ns": r.time_ns,
                 "payload": r.payload} for r in self.records if r.phase == "mark"]

    @property
    def ranges(self) -> list[dict]:
        """Each range a thread opened, with where it closed (end_ns None: never closed)."""
        found = []
        for (block, thread), records in self.by_thread().items():
            open_ranges: list[dict] = []
            for r in records:
                if r.phase == "range_start":
                    open_ranges.append({"name": r.name, "block": block, "thread": thread, "sm": r.sm,
                                        "start_ns": r.time_ns, "end_ns": None, "payload": r.payload})
                    found.append(open_ranges[-1])
                elif r.phase == "range_end":
                    match = next((o for o in reversed(open_ranges) if o["name"] == r.name), None)
                    if match is not None:
                        match["end_ns"] = r.time_ns
                        open_ranges.remove(match)
        return found

    def to_json(self, origin_ns: int) -> dict:
        def shift(items, *keys):
            return [{**item, **{k: None if item[k] is None else item[k] - origin_ns for k in keys}} for item in items]

        return {"index": self.index, "device": self.device, "records": len(self.records), "dropped": self.dropped,
                "start_ns": self.start_ns - origin_ns, "markers": shift(self.markers, "time_ns"),
                "ranges": shift(self.ranges, "start_ns", "end_ns")}

    def chrome_events(self, origin_ns: int) -> list[dict]:
        """Chrome trace events: process = this launch, thread track = block * 1024 + thread."""
        pid, events, named = self.index, [], set()
        for r in self.records:
            tid = r.block * 1024 + r.thread
            if tid not in named:
                named.add(tid)
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                               "args": {"name": f"block {r.block} thread {r.thread}"}})
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"launch {self.index}"}})
        for m in self.markers:
            events.append({"name": m["name"], "ph": "i", "s": "t", "pid": pid, "tid": m["block"] * 1024 + m["thread"],
                           "ts": (m["time_ns"] - origin_ns) / 1e3, "args": {"payload": m["payload"], "sm": m["sm"]}})
        for g in self.ranges:
            end = g["end_ns"] if g["end_ns"] is not None else g["start_ns"]
            events.append({"name": g["name"], "ph": "X", "pid": pid, "tid": g["block"] * 1024 + g["thread"],
                           "ts": (g["start_ns"] - origin_ns) / 1e3, "dur": (end - g["start_ns"]) / 1e3,
                           "args": {"payload": g["payload"], "sm": g["sm"], "closed": g["end_ns"] is not None}})
        return events


class KernelEvents:
    """The events one prim_func records and the launches recorded so far: the launch hook
    the JIT calls (`wrap_launch`)."""

    def __init__(self, name: str, capacity: int, output_dir: Path | None):
        self.name = name
        self.capacity = capacity
        self.output_dir = output_dir
        self.events: dict[int, tuple[str, str, str | None]] = {}  # id -> name, kind, recorded payload dtype
        self._pending: list[tuple] = []  # (log, device, done event) of launches not read yet
        self._launches: list[LaunchTrace] = []
        self._count = 0
        self._written: dict[Path, int] = {}  # trace file -> how many launches it holds
        self._lock = threading.Lock()
        _LIVE.append(self)

    def add(self, event, recorded_payload: bool) -> None:
        self.events[event.event_id] = (event.name, event.kind, event.payload_type if recorded_payload else None)

    def wrap_launch(self, kernel, program, launch, stream: int = 0):
        if not program.records_events:
            return launch

        def recorded(*args):
            device = _device_of(args)
            with _on_device(device, stream):
                log = _new_log(device, self.capacity)
                program.set_event_log(log.data_ptr())
                try:
                    result = launch(*args)
                finally:
                    program.set_event_log(0)
                done = _launch_done()
            with self._lock:
                self._pending.append((log, device.index, done))
                waiting = len(self._pending) * log.numel()
            if waiting > _PENDING_BYTES:
                self.flush()
            return result

        return recorded

    def flush(self) -> None:
        """Reads the logs of the launches not read yet (waiting for each launch to end)."""
        with self._lock:
            pending, self._pending = self._pending, []
            for log, device, done in pending:
                done.synchronize()
                self._launches.append(self._decode(log, device))

    def _decode(self, log, device: int) -> LaunchTrace:
        import torch

        claimed, capacity = (v & 0xFFFFFFFF for v in log[:8].view(torch.int32).tolist())
        n = min(claimed, capacity)
        body = log[HEADER_BYTES:HEADER_BYTES + n * RECORD_BYTES].cpu()
        times = body.view(torch.int64).reshape(n, 4)[:, 0].tolist()
        words = (body.view(torch.int32).reshape(n, 8).to(torch.int64) & 0xFFFFFFFF).tolist()
        records = []
        for time, (_, _, event, bits, block, thread, sm, _) in zip(times, words):
            event_id, phase = event & 0xFFFF, event >> 16
            name, _, dtype = self.events.get(event_id, (f"event {event_id}", "mark", None))
            records.append(Record(name, event_id, PHASES[phase] if phase < 3 else str(phase), time, block, thread,
                                  sm, _payload(bits, dtype)))
        self._count += 1
        return LaunchTrace(self._count - 1, device, claimed, capacity, records)

    def launches(self) -> list[LaunchTrace]:
        self.flush()
        return list(self._launches)

    def table(self) -> list[dict]:
        return [{"name": name, "event_id": i, "kind": kind, "payload_type": dtype}
                for i, (name, kind, dtype) in sorted(self.events.items())]

    def write(self, directory: Path | None = None) -> Path | None:
        """The trace file, (re)written when there are launches it does not hold yet;
        None where no directory is set or nothing was launched."""
        directory = directory or self.output_dir or state.output_dir()
        if directory is None:
            return None
        launches = self.launches()
        if not launches:
            return None
        path = _path_for(self, Path(directory))
        if self._written.get(path) == len(launches):
            return path  # written already (and perhaps moved or removed since: left so)
        origin = min((launch.start_ns for launch in launches if launch.records), default=0)
        data = {"kernel": self.name, "format": "tegula.iket/1", "events": self.table(),
                "launches": [launch.to_json(origin) for launch in launches], "displayTimeUnit": "ns",
                "traceEvents": [e for launch in launches for e in launch.chrome_events(origin)]}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
        self._written[path] = len(launches)
        return path


# ---- the device side of a launch (what the CPU tests stand in for) ----

def _device_of(args):
    """The device a launch runs on: its first CUDA tensor's (the launcher's rule), else
    the current one."""
    import torch

    device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
    return device or torch.device("cuda", torch.cuda.current_device())


@contextlib.contextmanager
def _on_device(device, stream: int):
    """Torch's work on the launch's device and stream: an explicit handle's, else the
    current one, which the launcher uses."""
    import torch

    with torch.cuda.device(device):
        if not stream:
            yield
            return
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            yield


def _new_log(device, capacity: int):
    """An empty log of `capacity` records (iket.h's layout), written in stream order."""
    import torch

    log = torch.empty(HEADER_BYTES + capacity * RECORD_BYTES, dtype=torch.uint8, device=device)
    header = log[:HEADER_BYTES].view(torch.int32)
    header.zero_()
    header[1].fill_(capacity)
    return log


def _launch_done():
    """An event that completes when the work queued so far on the stream (the launch) does."""
    import torch

    done = torch.cuda.Event()
    done.record()
    return done


_LIVE: list[KernelEvents] = []
_PATHS: dict[tuple[Path, str], KernelEvents] = {}  # one file per kernel: main.trace.json, main-2.trace.json


def _path_for(hook: KernelEvents, directory: Path) -> Path:
    directory = directory.expanduser().absolute()
    suffix = 1
    while True:
        stem = hook.name if suffix == 1 else f"{hook.name}-{suffix}"
        owner = _PATHS.setdefault((directory, stem), hook)
        if owner is hook:
            return directory / f"{stem}.trace.json"
        suffix += 1


def hook_of(kernel) -> KernelEvents:
    """The events of a compiled kernel (or prim_func) parsed with instrumentation on."""
    func = getattr(kernel, "prim_func", kernel)
    hook = next((h for h in getattr(func, "launch_hooks", ()) if isinstance(h, KernelEvents)), None)
    if hook is None:
        raise ValueError(f"{getattr(func, 'name', kernel)!r} records no iket events: build it inside "
                         "iket.session() (iket.mark and iket.range emit nothing outside one)")
    return hook


def launches(kernel) -> list[LaunchTrace]:
    """The launches of `kernel` recorded so far, oldest first (waits for them to end)."""
    return hook_of(kernel).launches()


def write_traces(directory=None) -> list[Path]:
    """Writes the trace of every instrumented kernel launched so far: into `directory`,
    else the directory its session named, else output_dir(); returns the files."""
    paths = []
    for hook in list(_LIVE):
        path = hook.write(Path(directory) if directory is not None else None)
        if path is not None:
            paths.append(path)
    return paths


def trace_files(*, directory=None) -> list[Path]:
    """The trace files in output_dir(directory), largest first, once every kernel's
    trace is written."""
    write_traces()
    base = state.output_dir(directory)
    if base is None or not base.exists():
        return []
    return sorted(base.glob("*.trace.json"), key=lambda path: path.stat().st_size, reverse=True)


@atexit.register
def _write_at_exit() -> None:
    try:
        write_traces()
    except Exception:  # noqa: BLE001 - at exit the GPU may be gone: the traces are lost, not the exit
        pass
