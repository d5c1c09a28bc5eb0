"""The timing collectors of TileLang's `regression_*.py` example files.

    def regression_gemm():
        tegula.testing.process_func(bench_gemm, M=4096)   # records bench_gemm(M=4096)'s latency

    if __name__ == "__main__":
        tegula.testing.regression()   # runs this module's regression_* functions, prints "name: latency"

Latencies are opaque numbers (only ratios between runs matter); a function that keeps
returning a latency <= 0 is reported with a warning and not recorded.
"""
from __future__ import annotations

import inspect
import time
import warnings

__all__ = ["process_func", "regression"]

_RETRIES = 5
_results: list[tuple[str, float]] = []


def process_func(func, name: str | None = None, /, **kwargs) -> None:
    """Calls func(**kwargs) (up to 5 more times while it returns <= 0) and records the latency."""
    label = name if name is not None else getattr(func, "__module__", "<unknown>")
    label = label.removeprefix("regression_")
    latency = float(func(**kwargs))
    for _ in range(_RETRIES):
        if latency > 0:
            break
        latency = float(func(**kwargs))
    if latency <= 0:
        warnings.warn(f"{label} has latency {latency} <= 0: check how it is timed", RuntimeWarning, 2)
        return
    _results.append((label, latency))


def regression(prefixes=("regression_",), verbose: bool = True) -> None:
    """Runs every function of the calling module whose name starts with one of `prefixes`,
    in name order, then prints one "name: latency" line per recorded result."""
    scope = inspect.currentframe().f_back.f_globals
    chosen = sorted((k, v) for k, v in scope.items() if callable(v) and k.startswith(tuple(prefixes)))
    _results.clear()
    for i, (fname, fn) in enumerate(chosen, 1):
        start = time.perf_counter()
        if verbose:
            print(f"  [{i}/{len(chosen)}] {fname.removeprefix('regression_')}", end="", flush=True)
        fn()
        if verbose:
            print(f" ({time.perf_counter() - start:.2f}s)", flush=True)
    for label, latency in _results:
        print(f"{label}: {latency}")
