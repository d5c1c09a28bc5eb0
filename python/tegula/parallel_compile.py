"""Building many kernels at once (the autotuner's candidates, `par_compile`'s functions).

NVRTC compiles in threads of one process overlap only in part: on a 16-core host, 16
threads compiled a batch of kernels 2.6x faster than one thread, 16 processes 5.3x. So a
batch's NVRTC compiles run in forked worker processes (`_C.compile_in_processes`, which
runs C++ only in the children: src/runtime/compile_pool.h), and what they cannot compile
is compiled again here, for the error. TEGULA_PARALLEL_COMPILE=threads keeps them in
threads of this process (where fork is missing, always). Lowering (C++, the GIL
released) runs in threads.

The kernels are tegula.jit's JITKernels, known here only by what they have
(`_lowered_all`, each with a `compile()`, and `_program` once built); tegula.jit's
par_compile, the @jit functions' `par_compile` and the autotuner build on these."""
import concurrent.futures
import os
import warnings

from . import env

_MODES = ("processes", "threads")


def compile_mode() -> str:
    """How a batch's NVRTC compiles run: "processes" (the default) or "threads"."""
    mode = os.environ.get("TEGULA_PARALLEL_COMPILE", "processes").strip() or "processes"
    if mode not in _MODES:
        raise ValueError(f"TEGULA_PARALLEL_COMPILE must be one of {', '.join(_MODES)}, got {mode!r}")
    return mode if hasattr(os, "fork") else "threads"


def compile_batch(lowered: list, workers: int) -> list:
    """Compiles (through the cache) each lowered kernel of `lowered`, `workers` at a time;
    per kernel None, or the exception its compile raised."""
    errors = [None] * len(lowered)
    todo = list(range(len(lowered)))
    if workers > 1 and len(todo) > 1 and compile_mode() == "processes":
        answers = env.native().compile_in_processes(lowered, workers)
        todo = [i for i, answer in enumerate(answers) if answer is not None]

    def one(index):
        try:
            lowered[index].compile()
        except Exception as err:  # noqa: BLE001 - handed back per kernel
            errors[index] = err

    if workers > 1 and len(todo) > 1:
        with concurrent.futures.ThreadPoolExecutor(min(workers, len(todo)), "tegula-compile") as pool:
            list(pool.map(one, todo))
    else:
        for index in todo:
            one(index)
    return errors


def in_threads(fn, items: list, workers: int) -> list:
    """fn(item) for each item, in `workers` threads, results in order (lowering: C++ with the
    GIL released)."""
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with concurrent.futures.ThreadPoolExecutor(min(workers, len(items)), "tegula-lower") as pool:
        return list(pool.map(fn, items))


def check_workers(num_workers) -> None:
    if num_workers is not None and (isinstance(num_workers, bool) or not isinstance(num_workers, int)
                                    or num_workers < 1):
        raise ValueError(f"par_compile: num_workers must be a positive int or None, got {num_workers!r}")


def guarded(ignore_error: bool, what: str, fn, *args, **kwargs):
    if not ignore_error:
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - ignore_error: reported, the caller gets None
        warnings.warn(f"par_compile: {what} failed to compile and is None: {type(err).__name__}: {err}", stacklevel=3)
        return None


def build_in_parallel(kernels: list, num_workers=None, ignore_error: bool = False) -> list:
    """Builds (NVRTC, through the cache) every kernel of `kernels` not built yet; a build
    that fails is raised, or with `ignore_error` its kernel becomes None."""
    check_workers(num_workers)
    jobs = [(position, lowered) for position, kernel in enumerate(kernels)
            if kernel is not None and kernel.__dict__.get("_program") is None
            for lowered in kernel._lowered_all]
    if not jobs:
        return kernels
    workers = num_workers or min(len(jobs), os.cpu_count() or 1)
    errors = compile_batch([lowered for _, lowered in jobs], workers)
    failed = {}
    for (position, _), err in zip(jobs, errors):
        if err is not None and position not in failed:
            failed[position] = err
    for position, err in failed.items():
        if not ignore_error:
            raise err
        warnings.warn(f"par_compile: kernel {position} failed to build and is None: {err}", stacklevel=3)
        kernels[position] = None
    return kernels


def _config_call(fn, config, index: int):
    """One configuration of a function's par_compile: a dict of keyword arguments or a
    tuple of positional ones."""
    if isinstance(config, dict):
        return fn(**config)
    if isinstance(config, tuple):
        return fn(*config)
    raise ValueError(f"par_compile: configs[{index}] must be a dict of keyword arguments or a tuple of positional "
                     f"ones, got {type(config).__name__}")


def par_compile_configs(fn, configs, num_workers, ignore_error) -> list:
    """`fn.par_compile(configs)` of a @jit function: each configuration compiled (and
    cached as a call with those arguments would be), the NVRTC builds in threads."""
    kernels = [guarded(ignore_error, f"configs[{i}]", _config_call, fn, c, i) for i, c in enumerate(list(configs))]
    return build_in_parallel(kernels, num_workers, ignore_error)
