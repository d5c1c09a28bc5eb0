"""iket: events a CUDA kernel records as it runs, TileLang's `tilelang.tools.cuda.iket`.

Inside a prim_func, `iket.mark(name)` is an instant event and `with iket.range(name):`
(also written beside T.Kernel: `with T.Kernel(...) as bx, iket.range("block"):`) a range;
either may carry a value, `payload=iket.payload(expr, dtype="int32")`. Kernels built inside
`iket.session()` record, per launch, one record per event per thread that reaches it (the
GPU's global timer, the block, the thread, the SM, the payload); outside a session the
calls emit nothing. `iket.launches(kernel)` returns the records, and the trace files in
the session's output_dir (`<kernel>.trace.json`) open in Perfetto.

Modules: events.py (the kernel side), records.py (logs, records, trace files),
session.py, state.py (what is enabled, the output directory).
"""
from .events import Event, PayloadSpec, event_table, mark, payload, range, range_end, range_pop, range_push  # noqa: A004
from .events import range_start, reset
from .records import LaunchTrace, Record, launches, trace_files, write_traces
from .session import Session, session
from .state import (capacity, disable, disable_runtime_payloads, enable, enable_runtime_payloads, is_enabled,
                    output_dir, output_path, runtime_payloads_enabled, set_capacity, set_output_dir)


def profile_command(command, *, directory, postprocess: str = "all", clobber: bool = True):
    """TileLang builds a command line for NVIDIA's external IKET profiler here. Tegula's
    kernels record their events themselves: run the program, then read
    iket.launches(kernel) or iket.trace_files()."""
    raise NotImplementedError("iket.profile_command: Tegula does not drive the external IKET profiler; its "
                              "instrumented kernels record their own events (iket.launches(kernel), "
                              "iket.trace_files())")


__all__ = ["Event", "LaunchTrace", "PayloadSpec", "Record", "Session", "capacity", "disable",
           "disable_runtime_payloads", "enable", "enable_runtime_payloads", "event_table", "is_enabled", "launches",
           "mark", "output_dir", "output_path", "payload", "profile_command", "range", "range_end", "range_pop",
           "range_push", "range_start", "reset", "runtime_payloads_enabled", "session", "set_capacity",
           "set_output_dir", "trace_files", "write_traces"]
