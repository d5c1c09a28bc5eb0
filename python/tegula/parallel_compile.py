"""Building kernels in threads: NVRTC releases the GIL, so the builds of many lowered
kernels (the autotuner's candidates, `par_compile`'s functions) overlap. The kernels are
tegula.jit's JITKernels, known here only by what they have (`_lowered_all`, each with a
`compile()`, and `_program` once built); tegula.jit's par_compile and the @jit functions'
`par_compile` build on these."""
import concurrent.futures
import os
import warnings


def guarded(ignore_error: bool, what: str, fn, *args, **kwargs):
    if not ignore_error:
        return fn(*args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - ignore_error: reported, the caller gets None
        warnings.warn(f"par_compile: {what} failed to compile and is None: {type(err).__name__}: {err}", stacklevel=3)
        return None


def build_in_parallel(kernels: list, num_workers=None, ignore_error: bool = False) -> list:
    """Builds (NVRTC, through the cache) every kernel of `kernels` not built yet, in
    threads; a build that fails is raised, or with `ignore_error` its kernel becomes None."""
    if num_workers is not None and (isinstance(num_workers, bool) or not isinstance(num_workers, int)
                                    or num_workers < 1):
        raise ValueError(f"par_compile: num_workers must be a positive int or None, got {num_workers!r}")
    jobs = [(position, index) for position, kernel in enumerate(kernels)
            if kernel is not None and kernel.__dict__.get("_program") is None
            for index in range(len(kernel._lowered_all))]
    if not jobs:
        return kernels
    workers = num_workers or min(len(jobs), os.cpu_count() or 1)
    with concurrent.futures.ThreadPoolExecutor(workers, "tegula-par-compile") as pool:
        futures = [(position, pool.submit(kernels[position]._lowered_all[index].compile)) for position, index in jobs]
    failed = {}
    for position, future in futures:
        if future.exception() is not None and position not in failed:
            failed[position] = future.exception()
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
