"""`tegula.autotune`: compile a @tegula.jit function once per configuration, time each,
and return the fastest kernel, with TileLang's decorator and meaning.

    @tegula.autotune(configs=[{"block": 128, "threads": 128}, {"block": 256, "threads": 256}])
    @tegula.jit(out_idx=[-1])
    def add(N, block=128, threads=128): ...

    kernel = add(1 << 20)                  # tunes; kernel.config, kernel.latency (ms)
    kernel = add(1 << 20, block=64, threads=64)   # every tunable given: compiled, not tuned

Over an eager @tegula.jit function (the body is the kernel), `f(x, ...)` tunes for the
sizes of the call's tensors, then runs the chosen kernel on them and returns its outputs;
`f.compile(N=..., ...)` returns the chosen kernel.

A configuration may also hold `pass_configs` (TileLang's reserved key): compiler pass
configurations for that configuration only, over the ones `@tegula.jit(pass_configs=...)`
(or `set_compile_args`) gives, so the search covers compiler options as well:

    configs = [{"block": 128, "pass_configs": {PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: ws}}
               for ws in (True, False)]

The result is remembered per (function source, call arguments, configurations, device,
target, tegula version and build) in this process and as JSON under
`<cache dir>/autotune/<key>.json`, so a later call, here or in a new process, only
compiles the chosen configuration.

Everything that needs a GPU (making inputs, checking, timing, naming the device) goes
through the module-level `_bench` (a `CudaBench`), so tests replace that one object.
"""
from __future__ import annotations

import enum
import functools
import hashlib
import inspect
import json
import os
import sys
import tempfile
import time
import warnings
from typing import NamedTuple

import torch

from .registers import RegisterPressureWarning
from . import env
from .jit_eager import EagerJITFunction
from .frontend.errors import TegulaCompileError
from .jit import JITFunction, jit
from .parallel_compile import compile_batch
from .profiler import Profiler, TensorSupplyType
from . import transform
from .version import __version__

# What a configuration the DSL or NVRTC cannot build raises; anything else is a bug in
# the caller's code or ours and is not swallowed.
_BUILD_ERRORS = (TegulaCompileError, ValueError, RuntimeError)
_RUN_ERRORS = (AssertionError, RuntimeError, ValueError)


class CudaBench:
    """How a configuration is run and timed on the current CUDA device."""

    def require_device(self) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("autotuning needs a CUDA device (torch.cuda.is_available() is False); give every "
                               "tunable argument explicitly to compile one configuration without tuning")

    def device_name(self) -> str:
        # Part of the cache key: without a GPU only explicit calls and cache hits happen.
        return torch.cuda.get_device_name() if torch.cuda.is_available() else "no-cuda-device"

    def make_inputs(self, kernel, supply_type):
        return Profiler(kernel, supply_type).get_inputs()

    def check(self, kernel, supply_type, ref_prog, atol, rtol, max_mismatched_ratio) -> None:
        Profiler(kernel, supply_type).assert_allclose(ref_prog, atol=atol, rtol=rtol,
                                                     max_mismatched_ratio=max_mismatched_ratio)

    def time(self, kernel, inputs, warmup, rep) -> float:
        # Profiler.do_bench passes preallocated outputs, so no allocation is timed.
        return Profiler(kernel).do_bench(warmup=warmup, rep=rep, input_tensors=inputs)


_bench = CudaBench()
_memo: dict[str, dict] = {}  # cache key -> {"config", "latency", "results"}


_captured_inputs: list[list] = []  # set_autotune_inputs's stack, innermost last


class set_autotune_inputs:  # noqa: N801 - TileLang's name, used as a context manager
    """`with set_autotune_inputs(q, k, v, lengths, max_len):` (or one list): tuning inside
    the block times every configuration on these inputs (the kernel's inputs, in order,
    scalars included) instead of generated ones, as in TileLang; for kernels whose inputs
    must hold meaningful values (offsets, lengths)."""

    def __init__(self, *args):
        self.inputs = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)

    def __enter__(self):
        _captured_inputs.append(self.inputs)
        return self

    def __exit__(self, *exc):
        _captured_inputs.pop()


def get_autotune_inputs() -> list | None:
    """The inputs of the innermost `set_autotune_inputs` block, or None outside one."""
    return _captured_inputs[-1] if _captured_inputs else None


def clear_memory_cache() -> None:
    """Forget this process's tuning results (the JSON files on disk stay)."""
    _memo.clear()


class AutotuneResult(NamedTuple):
    """What `AutoTuner.run` returns (TileLang's names); results are (config, latency or
    None, error or None) per configuration."""

    config: dict
    latency: float | None
    kernel: object
    results: list | tuple = ()
    ref_latency: float | None = None  # TileLang's time of ref_prog; Tegula uses ref_prog only to check


# ---- keys and the disk cache ----

def _plain(value):
    """JSON-ready and order-stable: dicts become sorted [key, value] pairs, unknown objects
    (dtypes, enums) their repr."""
    if isinstance(value, dict):  # a str enum key (PassConfigKey) as its string: JSON keeps only that
        return sorted(([repr(k.value if isinstance(k, enum.Enum) and isinstance(k, str) else k), _plain(v)]
                       for k, v in value.items()), key=lambda kv: kv[0])
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):  # an eager function's tensors: what its kernel depends on
        return ["tensor", list(value.shape), str(value.dtype), value.device.type]
    return repr(value)


def _source_of(fn) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):  # defined at a prompt: the bytecode stands in for the text
        code = fn.__code__
        return repr((code.co_code, code.co_consts, code.co_names))


def _core_stamp() -> str:
    # A rebuilt compiler may lower a configuration differently, so its tuning is stale.
    path = getattr(env.native(), "__file__", None)
    try:
        stat = os.stat(path)
        return f"{stat.st_size}:{stat.st_mtime_ns}"
    except (OSError, TypeError):
        return "unknown"


def _cache_enabled() -> bool:
    """False after `tegula.disable_cache()`, with TEGULA_DISABLE_CACHE (or TileLang's
    TILELANG_DISABLE_CACHE / TILELANG_AUTO_TUNING_DISABLE_CACHE) set: then every call
    tunes again, as in TileLang, which skips its memory and disk caches alike."""
    for name in ("TEGULA_DISABLE_CACHE", "TILELANG_DISABLE_CACHE", "TILELANG_AUTO_TUNING_DISABLE_CACHE"):
        flag = os.environ.get(name, "")
        if flag and flag not in ("0", "false", "FALSE", "off"):
            return False
    return bool(env.native().cache_disk_enabled())


def _cache_dir() -> str | None:
    """`<cache dir>/autotune`, or None when the disk cache is off. Read at every call
    (the native cache reads its variables once, at first use)."""
    if not _cache_enabled():
        return None
    root = os.environ.get("TEGULA_CACHE_DIR") or env.cache_dir()
    return os.path.join(root, "autotune") if root else None


def _load(key: str) -> dict | None:
    directory = _cache_dir()
    try:
        with open(os.path.join(directory, key + ".json")) as f:
            entry = json.load(f)
    except (OSError, ValueError, TypeError):  # off, absent, or unreadable: tune again
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("config"), dict) else None


def _store(key: str, entry: dict) -> None:
    directory = _cache_dir()
    if directory is None:
        return
    try:
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f, indent=1, default=repr)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, key + ".json"))  # readers see the old file or the whole new one
    except OSError as err:
        warnings.warn(f"tegula.autotune: could not write the tuning cache in {directory}: {err}", stacklevel=3)


class _Progress:
    """A one-line counter on stderr ("label 3/12"): tqdm when installed, else rewritten in
    place. Shown on a terminal, or anywhere when TEGULA_LOG names autotune (or compile)."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.done = label, total, 0
        self.shown = sys.stderr.isatty() or env.log_enabled("autotune") or env.log_enabled("compile")
        self.bar = None
        if self.shown and sys.stderr.isatty():
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=label, file=sys.stderr, leave=False)
            except ImportError:
                pass
        self._draw()

    def _draw(self):
        if self.shown and self.bar is None:
            end = "\r" if sys.stderr.isatty() else "\n"
            print(f"{self.label} {self.done}/{self.total}", end=end, file=sys.stderr, flush=True)

    def step(self):
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        else:
            self._draw()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.shown and sys.stderr.isatty():
            print(file=sys.stderr, flush=True)


def _describe(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "(defaults)"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


class _Failure(str):
    """A configuration's error as results list it (stage and first line), with the whole
    text kept for the message when every configuration fails."""

    full: str

    def __new__(cls, stage: str, err: BaseException):
        self = super().__new__(cls, f"{stage}: {_first_line(err)}")
        self.full = f"{stage}: {type(err).__name__}: {str(err).strip()}"
        return self


# ---- the tuner ----

# TileLang's reserved key of a configuration: pass configurations for that configuration
# alone, over the function's own; not an argument of the function.
PASS_CONFIGS = "pass_configs"


def _pass_configs(value, where: str) -> dict:
    """Pass configurations as {key string: value}, each key and value checked; `where`
    begins the message of a bad one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"{where}: 'pass_configs' must be a dict of pass configurations, got {value!r}")
    try:
        out = {transform.key_name(k): v for k, v in value.items()}
        transform.to_options(out)
    except ValueError as err:
        raise ValueError(f"{where}: 'pass_configs': {err}") from None
    return out


def _call_key(args, kwargs):
    """What an eager call's choice depends on: its tensors' shapes, dtypes and devices and
    its other arguments; None when one cannot be hashed."""
    def part(value):
        if isinstance(value, torch.Tensor):
            return (tuple(value.shape), value.dtype, value.device)
        return value

    key = (tuple(part(v) for v in args), tuple((k, part(v)) for k, v in sorted(kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


class AutoTuner:
    """Tunes one @tegula.jit function over `configs` (a list of kwargs dicts, or a callable
    given the call's arguments that returns one). `autotune(...)` builds one of these."""

    def __init__(self, fn, configs, warmup=25, rep=100, timeout=None, supply_type=None, ref_prog=None,
                 atol=1e-2, rtol=1e-2, max_mismatched_ratio=0.01, cache_input_tensors=True, skip_check=False,
                 early_stop=False, early_stop_factor=2.0):
        if configs is None:
            raise ValueError("tegula.autotune needs configs: a list of kwargs dicts, or a callable returning one")
        # Eager (the body is the kernel): a call runs the chosen kernel on its tensors and
        # returns the outputs; `.compile(...)` gives the kernel.
        self._eager = isinstance(fn, EagerJITFunction)
        self.fn = fn
        self.configs = configs
        self._compile_args: dict = {}
        self._chosen: dict = {}  # an eager call's signature -> the tunables it runs with
        self._jit_fn = fn if isinstance(fn, (JITFunction, EagerJITFunction)) else None
        self._siblings: dict = {}  # a configuration's pass_configs -> the jit function that builds with them
        self._stamp = None  # the function's source and the compiler build, found once
        self.set_profile_args(warmup=warmup, rep=rep, timeout=timeout, supply_type=supply_type, ref_prog=ref_prog,
                              atol=atol, rtol=rtol, max_mismatched_ratio=max_mismatched_ratio,
                              cache_input_tensors=cache_input_tensors, skip_check=skip_check, early_stop=early_stop,
                              early_stop_factor=early_stop_factor)
        functools.update_wrapper(self, fn.fn if self._jit_fn is not None else fn, updated=())

    @classmethod
    def from_kernel(cls, kernel, configs):
        return cls(kernel, configs)

    def set_compile_args(self, **jit_settings):
        """Settings for `tegula.jit` (out_idx=, target=, ...) when `fn` is not jitted yet."""
        if self._jit_fn is self.fn:
            raise ValueError("set_compile_args: the function is already @tegula.jit; give the settings there")
        self._compile_args = jit_settings
        self._jit_fn = None
        return self

    def set_profile_args(self, **settings):
        """warmup, rep (ms budgets), timeout (s per configuration), supply_type, ref_prog,
        atol, rtol, max_mismatched_ratio, cache_input_tensors, skip_check, early_stop,
        early_stop_factor; None keeps a value. early_stop (TileLang: stop timing a configuration
        early once an estimate is early_stop_factor times the best) is accepted and times
        every configuration in full, which picks the same one."""
        known = ("warmup", "rep", "timeout", "supply_type", "ref_prog", "atol", "rtol", "max_mismatched_ratio",
                 "cache_input_tensors", "skip_check", "early_stop", "early_stop_factor")
        factor = settings.get("early_stop_factor")
        if factor is not None and factor < 1.0:
            raise ValueError(f"early_stop_factor must be >= 1.0, got {factor}")
        for name, value in settings.items():
            if name not in known:
                raise TypeError(f"set_profile_args: unknown setting {name!r}; expected one of {known}")
            if value is not None or not hasattr(self, name):
                setattr(self, name, value)
        return self

    def _jit(self) -> JITFunction:
        if self._jit_fn is None:
            self._jit_fn = jit(**self._compile_args)(self.fn)
            self._eager = not isinstance(self._jit_fn, JITFunction)
            self._stamp = None
            self._siblings.clear()
        return self._jit_fn

    @property
    def _name(self) -> str:
        return self._jit().fn.__qualname__

    def run(self, warmup=None, rep=None, timeout=None, use_pipeline=False, enable_grouped_compile=False,
            group_compile_size=2, benchmark_devices=None, benchmark_multi_gpu=False, early_stop=False,
            early_stop_factor=2.0) -> AutotuneResult:
        """TileLang's `AutoTuner.from_kernel(f, configs).run()`: f takes only tunables.
        TileLang's scheduling options are accepted and change nothing here: Tegula already
        compiles the configurations in parallel (the grouped and pipelined modes' aim),
        times on the current device, and times every configuration in full (early_stop
        only skips slow ones sooner in TileLang, the choice is the same)."""
        self.set_profile_args(warmup=warmup, rep=rep, timeout=timeout, early_stop=early_stop,
                              early_stop_factor=early_stop_factor)
        return self._search((), {})

    def __call__(self, *args, **kwargs):
        if self._jit_fn is None or not self._eager:
            result = self._search(args, kwargs)
            if not self._eager:
                return result.kernel
        # As TileLang: run the chosen kernel on the call's tensors, return its outputs. The
        # choice is remembered per call signature (TileLang's per-function tuner cache), so a
        # repeated call costs one dict lookup more than the eager function's own.
        key = _call_key(args, kwargs)
        chosen = self._chosen.get(key) if key is not None else None
        if chosen is None:
            config = self._search(args, kwargs).config
            given = self._given(args, kwargs)
            chosen = {k: v for k, v in config.items() if k not in given}
            if key is not None:
                self._chosen[key] = chosen
        jit_fn, chosen = self._for_config(self._jit_fn, chosen)
        return jit_fn(*args, **kwargs, **chosen)

    def compile(self, *args, **kwargs):
        """The tuned kernel (TileLang's `.compile`), also for an eager function, whose
        sizes come from tensors or keywords as in its own `.compile` (`f.compile(N=1024)`)."""
        return self._search(args, kwargs).kernel

    def _for_config(self, jit_fn, config: dict):
        """(the jit function that builds `config`, its arguments): a configuration's
        pass_configs go over the function's own in a sibling of the function (made once,
        so each keeps its kernels); the other entries are arguments."""
        if PASS_CONFIGS not in config:
            return jit_fn, config
        rest = {k: v for k, v in config.items() if k != PASS_CONFIGS}
        extra = _pass_configs(config[PASS_CONFIGS], f"tegula.autotune({self._name})")
        if not extra:
            return jit_fn, rest
        key = json.dumps(_plain(extra))
        sibling = self._siblings.get(key)
        if sibling is None:
            own = _pass_configs(jit_fn.settings.get("pass_configs"), f"tegula.jit({self._name})")
            sibling = type(jit_fn)(jit_fn.fn, {**jit_fn.settings, "pass_configs": {**own, **extra}})
            self._siblings[key] = sibling
        return sibling, rest

    def _build(self, jit_fn, args, kwargs, config):
        jit_fn, config = self._for_config(jit_fn, config)
        if self._eager:
            return jit_fn.compile(*args, **kwargs, **config)
        return jit_fn(*args, **kwargs, **config)

    # ---- one call ----
    def _configs_for(self, args, kwargs) -> list[dict]:
        configs = self.configs
        if callable(configs):  # given the call's arguments, less keywords it does not take
            params = inspect.signature(configs).parameters
            open_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
            configs = configs(*args, **{k: v for k, v in kwargs.items() if open_kwargs or k in params})
        configs = list(configs)
        name = self._name
        if not configs:
            raise ValueError(f"tegula.autotune({name}): the configuration list is empty")
        fn_params = inspect.signature(self._jit().fn).parameters
        open_kwargs = any(p.kind is p.VAR_KEYWORD for p in fn_params.values())
        for config in configs:
            if not isinstance(config, dict):
                raise TypeError(f"tegula.autotune({name}): each configuration must be a dict, got {config!r}")
            unknown = [k for k in config if k not in fn_params and not open_kwargs and k != PASS_CONFIGS]
            if unknown:
                raise TypeError(f"tegula.autotune({name}): configuration {config} names {unknown}, which "
                                f"{name}() does not take")
            _pass_configs(config.get(PASS_CONFIGS), f"tegula.autotune({name}): configuration {config}")
        return configs

    def _given(self, args, kwargs) -> dict:
        signature = inspect.signature(self._jit().fn)
        sizes = {}
        if self._eager:  # keywords naming no parameter are T.const sizes (`f.compile(N=1024)`)
            sizes = {k: v for k, v in kwargs.items() if k not in signature.parameters}
            kwargs = {k: v for k, v in kwargs.items() if k not in sizes}
        try:
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"{self._name}(): {err}") from None
        given = dict(bound.arguments)
        for name, param in signature.parameters.items():
            if param.kind is param.VAR_KEYWORD:  # f(**kw): its keys are arguments too
                given.update(given.pop(name, {}))
        given.update(sizes)
        return given

    def _key(self, given, configs, device) -> str:
        jit_fn = self._jit()
        if self._stamp is None:
            settings = {k: jit_fn.settings.get(k) for k in ("target", "pass_configs", "out_idx")}
            self._stamp = [jit_fn.fn.__module__, jit_fn.fn.__qualname__, _source_of(jit_fn.fn), _plain(settings),
                           __version__, _core_stamp()]
        payload = ["tegula autotune v1", *self._stamp, _plain(given), _plain(configs), device]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()[:40]

    def _search(self, args, kwargs) -> AutotuneResult:
        jit_fn = self._jit()
        configs = self._configs_for(args, kwargs)
        given = self._given(args, kwargs)
        tunables = list(dict.fromkeys(k for c in configs for k in c if k != PASS_CONFIGS))
        fixed = {k: given[k] for k in tunables if k in given}
        # Nothing left to choose when the call gives every tunable (as in TileLang, its
        # pass_configs are then not tried either) or the configurations offer no choice.
        if (len(fixed) == len(tunables) and tunables) or not (tunables or any(c.get(PASS_CONFIGS) for c in configs)):
            kernel = self._build(jit_fn, args, kwargs, {})
            kernel.config = fixed  # nothing was timed: no latency
            return AutotuneResult(fixed, None, kernel)
        # Tunables given explicitly stay as given; the rest are searched.
        free: list[dict] = []
        for config in configs:
            rest = {k: v for k, v in config.items() if k not in given}
            if all(_plain(rest) != _plain(seen) for seen in free):
                free.append(rest)

        key = self._key(given, free, _bench.device_name())
        entry = (_memo.get(key) or _load(key)) if _cache_enabled() else None
        # The cached config is matched back to the list so its values keep their types
        # (JSON has no tuples or dtypes).
        chosen = next((c for c in free if entry and _plain(c) == _plain(entry["config"])), None)
        if chosen is None:
            _bench.require_device()
            entry = self._time_all(jit_fn, args, kwargs, free)
            _store(key, entry)
            chosen = entry["config"]
        _memo[key] = dict(entry, config=chosen)
        results = [tuple(r) for r in entry.get("results", ())]
        kernel = self._build(jit_fn, args, kwargs, chosen)
        # Attributes on the kernel are how TileLang's users read the choice.
        kernel.config, kernel.latency, kernel.autotune_results = {**fixed, **chosen}, entry.get("latency"), results
        kernel.ref_latency = None  # TileLang's time of ref_prog; Tegula uses ref_prog only to check
        return AutotuneResult(kernel.config, kernel.latency, kernel, results)

    def _build_all(self, jit_fn, args, kwargs, configs) -> list:
        """(kernel, error) per configuration. Parsing and lowering run here, one after the
        other; the NVRTC compiles then run as one batch (parallel_compile.compile_batch: in
        worker processes)."""
        built = []
        for config in configs:
            try:
                with warnings.catch_warnings():  # a spilling candidate is timed, not reported
                    warnings.simplefilter("ignore", RegisterPressureWarning)
                    built.append((self._build(jit_fn, args, kwargs, config), None))
            except _BUILD_ERRORS as err:
                built.append((None, _Failure("compile", err)))
        pending = [i for i, (kernel, _) in enumerate(built) if kernel is not None and kernel._program is None]
        if not pending:
            return built
        progress = _Progress(f"autotune {self._name}: compiling", len(pending))
        jobs = [(index, lowered) for index in pending for lowered in built[index][0]._lowered_all]
        errors = compile_batch([lowered for _, lowered in jobs], max(1, min(len(jobs), os.cpu_count() or 1, 16)))
        for (index, _), err in zip(jobs, errors):
            if err is not None and built[index][1] is None:
                if not isinstance(err, _BUILD_ERRORS):
                    raise err
                built[index] = (None, _Failure("compile", err))
        for _ in pending:
            progress.step()
        progress.close()
        return built

    def _try(self, built, inputs: dict):
        """(latency, error) of one built configuration; `inputs` holds the inputs last made."""
        kernel, error = built
        if error is not None:
            return None, error
        supply, stage = self.supply_type or TensorSupplyType.Auto, "inputs"
        try:
            # One set of inputs serves every configuration with the same parameters.
            signature = [(p.shape, p.dtype, p.is_output) for p in kernel.params]
            captured = get_autotune_inputs()
            if captured is not None:
                inputs.update(signature=None, tensors=list(captured))
            elif not self.cache_input_tensors or inputs.get("signature") != signature:
                inputs.update(signature=signature, tensors=_bench.make_inputs(kernel, supply))
            if self.ref_prog is not None and not self.skip_check:
                stage = "check"
                _bench.check(kernel, supply, self.ref_prog, self.atol, self.rtol, self.max_mismatched_ratio)
            stage = "run"
            return float(_bench.time(kernel, inputs["tensors"], self.warmup, self.rep)), None
        except _RUN_ERRORS as err:
            return None, _Failure(stage, err)

    def _time_all(self, jit_fn, args, kwargs, configs) -> dict:
        name, total, started = self._name, len(configs), time.perf_counter()
        results, best, inputs = [], None, {}
        building = time.perf_counter()
        built = self._build_all(jit_fn, args, kwargs, configs)
        # The compiles ran together: each configuration is charged an equal share.
        build_share = (time.perf_counter() - building) / max(1, total)
        for index, (config, one) in enumerate(zip(configs, built), 1):
            began = time.perf_counter() - build_share
            latency, error = self._try(one, inputs)
            # A compile or a launched kernel cannot be interrupted from Python, so the
            # limit is applied once the configuration's work has finished.
            spent = time.perf_counter() - began
            if error is None and self.timeout is not None and spent > self.timeout:
                latency, error = None, f"timeout: took {spent:.1f} s, over {self.timeout} s"
            results.append((config, latency, error))
            if latency is not None and (best is None or latency < best[1]):
                best = (config, latency)
            shown = f"{latency:.3f} ms" if latency is not None else f"failed ({error})"
            tail = f" (best {best[1]:.3f} ms)" if best is not None else ""
            print(f"autotune {name}: {index}/{total} {_describe(config)} {shown}{tail}", file=sys.stderr, flush=True)
        if best is None:
            # The first line names the first configuration's error, whole lines after: a
            # runner that keeps one line of the message still shows why.
            first_config, _, first_error = results[0]
            listing = "\n".join(f"  {_describe(c)}: {e}" for c, _, e in results[:20])
            raise RuntimeError(f"tegula.autotune: every configuration of {name} failed ({total}); the first, "
                               f"{_describe(first_config)}: {first_error}\n{listing}\n"
                               f"The first configuration's error in full:\n{getattr(first_error, 'full', first_error)}")
        failed = sum(1 for r in results if r[1] is None)
        print(f"autotune {name}: best {_describe(best[0])} {best[1]:.3f} ms; {total - failed}/{total} ran, "
              f"{failed} failed, {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        return {"function": name, "device": _bench.device_name(), "config": best[0], "latency": best[1],
                "results": results}


def autotune(func=None, *, configs=None, **settings):
    """`@tegula.autotune(configs=..., warmup=25, rep=100, timeout=None, supply_type=None,
    ref_prog=None, atol=1e-2, rtol=1e-2, max_mismatched_ratio=0.01, cache_input_tensors=True,
    skip_check=False)` over `@tegula.jit(...)` (see the module docstring and AutoTuner).
    `warmup` / `rep` are do_bench's budgets in ms; `timeout` drops a configuration whose
    compile, check and timing took longer than that many seconds."""

    def decorate(fn):
        return AutoTuner(fn, configs, **settings)

    return decorate if func is None else decorate(func)


__all__ = ["autotune", "AutoTuner", "AutotuneResult", "CudaBench", "clear_memory_cache", "set_autotune_inputs",
           "get_autotune_inputs"]
