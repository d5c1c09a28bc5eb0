"""Timing and checking kernels, with the names and meaning of `tilelang.profiler`.

    profiler = kernel.get_profiler(tegula.TensorSupplyType.Normal)
    profiler.assert_allclose(lambda x: torch.softmax(x.float(), -1), atol=1e-2, rtol=1e-2)
    ms = profiler.do_bench()                    # the kernel
    ref_ms = profiler.do_bench(torch_softmax)   # a reference, on the same inputs
    print(profiler.roofline())                  # timed, with FLOPs, bytes and % of peak

A kernel object here is anything with `params` (each with `.shape` (ints, None for a
dynamic dimension), `.dtype` (a torch dtype), `.is_output`, optionally `.is_scalar` and
`.name`) and `__call__(*inputs)`, which TileLang-style returns the outputs. When it also has
`launch(*every_argument, stream=)`, the profiler passes outputs it allocated itself: NaN-
poisoned ones when checking (so an element the kernel never writes cannot pass), and the
same ones on every run when timing (so no allocation sits between the timed launches).
"""
from __future__ import annotations

from enum import Enum

import torch

from .bench import BACKENDS, _check_bench_args, _require_cuda, do_bench  # noqa: F401 - do_bench is tilelang.profiler's
from .jit import _PROFILER


class TensorSupplyType(Enum):
    """How `Profiler.get_inputs` fills the inputs (TileLang's members and meaning)."""

    Integer = 1  # integers in [-2, 2] ([0, 2] for unsigned, {0, 1} for bool)
    Uniform = 2  # uniform in [-1, 1)
    Normal = 3  # normal with mean -1 and std 1, as TileLang draws it
    Randn = 4  # standard normal, drawn in float32 and cast
    Zero = 5
    One = 6
    Auto = 7  # Normal for floating types, Integer for the rest


def _integers(shape, dtype, device):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device=device).bool()
    if dtype in (torch.uint8, getattr(torch, "uint16", None), getattr(torch, "uint32", None)):
        return torch.randint(0, 3, shape, device=device, dtype=dtype)
    if dtype.is_floating_point and dtype.itemsize == 1:  # float8: exact small integers
        return torch.randint(-2, 3, shape, device=device, dtype=torch.int8).to(dtype)
    return torch.randint(-2, 3, shape, device=device, dtype=dtype)


def _is_float(dtype):
    # float8 types cannot be drawn into directly: they take the Integer path.
    return dtype.is_floating_point and dtype.itemsize > 1


_SUPPLY = {
    TensorSupplyType.Integer: _integers,
    TensorSupplyType.Uniform: lambda s, d, dev: torch.empty(s, dtype=d, device=dev).uniform_(-1.0, 1.0),
    TensorSupplyType.Normal: lambda s, d, dev: torch.empty(s, dtype=d, device=dev).normal_(-1.0, 1.0),
    TensorSupplyType.Randn: lambda s, d, dev: torch.randn(s, device=dev).to(d),
    TensorSupplyType.Zero: lambda s, d, dev: torch.zeros(s, dtype=d, device=dev),
    TensorSupplyType.One: lambda s, d, dev: torch.ones(s, dtype=d, device=dev),
}


def make_tensor(shape, dtype, supply=TensorSupplyType.Auto, device="cuda"):
    """One tensor drawn per `supply`; random kinds fall back to Integer for non-float types."""
    shape = tuple(shape)
    if supply == TensorSupplyType.Auto:
        supply = TensorSupplyType.Normal if _is_float(dtype) else TensorSupplyType.Integer
    if supply in (TensorSupplyType.Uniform, TensorSupplyType.Normal, TensorSupplyType.Randn) and not _is_float(dtype):
        supply = TensorSupplyType.Integer
    return _SUPPLY[supply](shape, dtype, device)


def poisoned(shape, dtype, device):
    """NaN for floating types; for the rest the most negative value, which no kernel in a
    test is expected to produce."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    low = False if dtype == torch.bool else torch.iinfo(dtype).min
    return torch.full(shape, low, dtype=dtype, device=device)


def _as_list(result):
    if result is None:
        return []
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _compare(name, out, ref, atol, rtol, max_mismatched_ratio):
    """Raises AssertionError unless `out` matches `ref` in float32 within the tolerances on
    all but `max_mismatched_ratio` of the elements. A NaN where the reference has a number
    always fails: that is an element the kernel never wrote (the output was poisoned)."""
    got = out.detach().to(torch.float32)
    want = torch.as_tensor(ref).detach().to(device=got.device, dtype=torch.float32)
    if got.shape != want.shape:
        raise AssertionError(f"output '{name}': shape {tuple(got.shape)}, the reference's {tuple(want.shape)}")
    close = torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    bad, total = int((~close).sum()), got.numel()
    unwritten = int((torch.isnan(got) & ~torch.isnan(want)).sum())
    if total == 0 or (bad <= max_mismatched_ratio * total and unwritten == 0):
        return
    error = (got - want).abs()
    finite = error[~torch.isnan(error)]
    max_err = finite.max().item() if finite.numel() else float("nan")
    first = tuple(int(i) for i in torch.nonzero(~close)[0].tolist())
    raise AssertionError(
        f"output '{name}': {bad} of {total} elements ({bad / total:.3%}) differ beyond atol={atol}, rtol={rtol} "
        f"(allowed: {max_mismatched_ratio:.3%}); max abs error {max_err:.6g}; {unwritten} NaN where the "
        f"reference has a number (never written?); first mismatch at {first}: "
        f"got {got[first].item():.6g}, expected {want[first].item():.6g}")


class Profiler:
    """Inputs, checks and timings for one kernel (see the module docstring).

    `device` is where inputs are made ("cuda"; tests without a GPU use "cpu").
    `dynamic_size` is the size given to every dynamic (None) dimension; needed only when
    the kernel has one."""

    def __init__(self, kernel, tensor_supply_type=TensorSupplyType.Auto, device="cuda", dynamic_size=None):
        if not isinstance(tensor_supply_type, TensorSupplyType):
            raise TypeError(f"tensor_supply_type: expected a TensorSupplyType, got {tensor_supply_type!r}")
        self.kernel = kernel
        self.params = list(kernel.params)
        self.supply_type = tensor_supply_type
        self.device = torch.device(device)
        self.dynamic_size = dynamic_size

    @property
    def func(self):
        """The kernel, callable on inputs (TileLang's `profiler.func`)."""
        return self.kernel

    def _shape(self, param):
        if all(d is not None for d in param.shape):
            return tuple(param.shape)
        if self.dynamic_size is None:
            raise ValueError(f"parameter '{getattr(param, 'name', '?')}' has dynamic dimensions {tuple(param.shape)}: "
                             "give Profiler(..., dynamic_size=N) to choose the size to test with")
        return tuple(self.dynamic_size if d is None else d for d in param.shape)

    def _make(self, param):
        if getattr(param, "dtype_name", None) == "handle":
            raise ValueError(f"parameter '{param.name}' is a T.ptr: the profiler cannot make the memory behind an "
                             "address; pass the inputs yourself (profiler.do_bench(input_tensors=[...]), "
                             "set_autotune_inputs(...))")
        if getattr(param, "is_scalar", False):
            return make_tensor((), param.dtype, self.supply_type, "cpu").item()
        return make_tensor(self._shape(param), param.dtype, self.supply_type, self.device)

    def get_inputs(self):
        """Fresh inputs (every parameter that is not an output), drawn per the supply type."""
        return [self._make(p) for p in self.params if not p.is_output]

    def _outputs(self, poison):
        """Outputs to pass the kernel, or None when their sizes are dynamic and unknown to
        the profiler (then the kernel allocates them, as __call__ does)."""
        outs = [p for p in self.params if p.is_output]
        if self.dynamic_size is None and any(d is None for p in outs for d in p.shape):
            return None
        fill = poisoned if poison else (lambda s, d, dev: torch.empty(s, dtype=d, device=dev))
        return [fill(self._shape(p), p.dtype, self.device) for p in outs]

    def _runner(self, inputs, outputs):
        """A callable with no arguments that runs the kernel once and returns its outputs."""
        launch = getattr(self.kernel, "launch", None)
        if not outputs or launch is None:
            return lambda: _as_list(self.kernel(*inputs))
        pending_in, pending_out = iter(inputs), iter(outputs)
        args = [next(pending_out) if p.is_output else next(pending_in) for p in self.params]

        def run():
            stream = torch.cuda.current_stream().cuda_stream if self.device.type == "cuda" else 0
            launch(*args, stream=stream)
            return outputs
        return run

    def run_once(self, func=None):
        """Runs the kernel (or `func`) once on fresh inputs; returns what it returns."""
        inputs = self.get_inputs()
        if func is not None:
            return func(*inputs)
        outs = self._runner(inputs, self._outputs(poison=True))()
        return outs[0] if len(outs) == 1 else (outs or None)

    def do_bench(self, func=None, warmup=25, rep=100, n_warmup=0, n_repeat=0, input_tensors=None, backend="event",
                 quantiles=None, return_mode="mean", dynamic_symbolic_constraints=None, device=None,
                 early_stop_baseline=None):
        """Milliseconds per run of the kernel, or of `func` (a reference taking the same
        inputs), on `input_tensors` or fresh inputs. See `do_bench` for the arguments.
        `dynamic_symbolic_constraints` ({name: size}) sizes the dynamic dimensions of fresh
        inputs; Tegula gives them all one size, so the sizes must agree."""
        _check_bench_args(warmup, rep, n_warmup, n_repeat, quantiles, backend, return_mode, 0)
        _require_cuda("Profiler.do_bench")
        saved = self.dynamic_size
        if dynamic_symbolic_constraints:
            sizes = set(dynamic_symbolic_constraints.values())
            if len(sizes) != 1:
                raise ValueError(f"dynamic_symbolic_constraints {dynamic_symbolic_constraints!r}: Tegula's profiler "
                                 "gives every dynamic dimension one size (Profiler(dynamic_size=N)); give one size")
            self.dynamic_size = sizes.pop()
        try:
            inputs = list(input_tensors) if input_tensors is not None else self.get_inputs()
            if func is None:
                run = self._runner(inputs, self._outputs(poison=False))
            else:
                def run():
                    return func(*inputs)
        finally:
            self.dynamic_size = saved
        return do_bench(run, warmup, rep, n_warmup, n_repeat, quantiles=quantiles, backend=backend,
                        return_mode=return_mode, device=device, early_stop_baseline=early_stop_baseline)

    def roofline(self, input_tensors=None, device=None, copy_bandwidth=None, warmup=25, rep=100, backend="event",
                 return_mode=None):
        """Times the kernel (`do_bench`, on `input_tensors` or fresh inputs) and returns its
        analysis with that time (tegula.tools.analyzer.AnalysisResult): FLOPs, bytes,
        occupancy, the fractions of peak compute and of copy bandwidth, and the bound.
        device: the peaks to compare with (default: this GPU); copy_bandwidth: GB/s (default:
        measured here by a device-to-device copy); return_mode: the statistic timed (default
        the median; "mean" for backend "cupti", which gives only that)."""
        if return_mode is None:
            return_mode = "mean" if backend == "cupti" else "median"
        from .tools.analyzer import Analyzer
        from .tools.layout_data import is_compiled_kernel

        if not is_compiled_kernel(self.kernel):
            raise TypeError(f"roofline needs a compiled kernel (tegula.jit / tegula.compile), got "
                            f"{type(self.kernel).__name__}")
        _require_cuda("Profiler.roofline")
        inputs = list(input_tensors) if input_tensors is not None else self.get_inputs()
        analyzer = Analyzer(self.kernel, *inputs)  # argument errors before any timing
        ms = self.do_bench(warmup=warmup, rep=rep, input_tensors=inputs, backend=backend, return_mode=return_mode)
        return analyzer.calculate(time_ms=ms, device=device, copy_bandwidth=copy_bandwidth)

    def assert_allclose(self, reference_program, atol=1e-2, rtol=1e-2, max_mismatched_ratio=0.01):
        """Runs the kernel and `reference_program` on the same fresh inputs and compares
        each output in float32 (see `_compare`). The kernel runs first, so a kernel that
        writes into its inputs makes the reference disagree."""
        names = [getattr(p, "name", str(i)) for i, p in enumerate(self.params) if p.is_output]
        if not names:
            raise ValueError("assert_allclose needs to know which parameters are outputs: compile the kernel "
                             "with out_idx")
        inputs = self.get_inputs()
        got = self._runner(inputs, self._outputs(poison=True))()
        expected = _as_list(reference_program(*inputs))
        if len(got) != len(expected):
            raise AssertionError(f"the kernel gives {len(got)} outputs, the reference {len(expected)}")
        for name, out, ref in zip(names, got, expected):
            _compare(name, out, ref, atol, rtol, max_mismatched_ratio)


_PROFILER.append(Profiler)
