"""`iket.session()`: instrumentation on for the kernels built inside it.

    with iket.session(output_dir="/tmp/traces", runtime_payloads=True):
        kernel = tegula.compile(program_with_marks(1024), out_idx=-1)
    c = kernel(a, b)                     # records its events: launched after the session too
    iket.launches(kernel)[0].records     # ... or /tmp/traces/<kernel>.trace.json
"""
from __future__ import annotations

from ....env import native
from . import events, state


class Session:
    """Entered: instrumentation enabled (nested sessions nest), the output directory and
    payload setting applied, event numbering restarted (reset_events) and the disk cache
    off (disable_cache); exited: each restored. One object is entered once at a time."""

    def __init__(self, *, reset_events: bool = True, override: bool = True, disable_on_exit: bool = True,
                 output_dir=None, runtime_payloads: bool | None = None, disable_cache: bool = True,
                 capacity: int | None = None):
        # override: TileLang's choice about its compiler callback; Tegula has none to replace.
        self.reset_events = reset_events
        self.disable_on_exit = disable_on_exit
        self.output_dir = output_dir
        self.runtime_payloads = runtime_payloads
        self.disable_cache = disable_cache
        self.capacity = capacity
        self._saved = None

    def __enter__(self):
        if self._saved is not None:
            raise RuntimeError("an iket session object cannot be entered more than once at a time")
        saved = (state.snapshot(), native().cache_disk_enabled())
        try:
            if self.capacity is not None:
                state.set_capacity(self.capacity)
            if self.output_dir is not None:
                state.set_output_dir(self.output_dir)
            if self.runtime_payloads is not None:
                (state.enable_runtime_payloads if self.runtime_payloads else state.disable_runtime_payloads)()
        except Exception:
            state.restore(saved[0])
            raise
        if self.disable_cache:
            native().set_cache_enabled(False)
        if self.reset_events:
            events.reset()
        state.enable()
        self._saved = saved
        return self

    def __exit__(self, *exc):
        saved, self._saved = self._saved, None
        if self.disable_on_exit:
            state.disable()
        state.restore(saved[0])
        if self.disable_cache:
            native().set_cache_enabled(saved[1])
        return False


def session(*, reset_events: bool = True, override: bool = True, disable_on_exit: bool = True, output_dir=None,
            runtime_payloads: bool | None = None, disable_cache: bool = True, capacity: int | None = None) -> Session:
    """Instrumentation around building and compiling kernels: `iket.mark` / `iket.range`
    in kernels parsed inside record events whenever those kernels launch (see Session).
    output_dir: where traces go; runtime_payloads: whether payload values are recorded;
    capacity: records a launch's log holds (Tegula's; state.DEFAULT_CAPACITY)."""
    return Session(reset_events=reset_events, override=override, disable_on_exit=disable_on_exit,
                   output_dir=output_dir, runtime_payloads=runtime_payloads, disable_cache=disable_cache,
                   capacity=capacity)
