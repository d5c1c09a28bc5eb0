"""Entry plans (src/bindings/entry_plans.cc, kernels/_calls.py `planned`) on the CPU: what
a recording accepts and refuses, when a plan becomes active, what a replay gives back,
and which calls are never planned. The entries here are Python functions that allocate
and view CPU tensors (a plan of no launch); the GPU side, with the shipped entry points'
launches, is gpu/test_entry_plans_gpu.py."""
import os
import subprocess
import sys
from collections import namedtuple

import pytest
import torch

import tegula
from tegula.kernels import _calls

EntryPlans = tegula.env.native().EntryPlans


def fresh_and_view(x, n=2):
    y = torch.empty_like(x)
    return y.view(-1)[:n], x


def calls(plans, *args, times=1, **kwargs):
    return [plans(args, kwargs) for _ in range(times)]


def test_a_plan_is_active_once_two_recordings_agree_and_replays_allocations_and_arguments():
    plans = EntryPlans(fresh_and_view)
    x = torch.randn(4, 4)
    first, second, third = calls(plans, x, n=3, times=3)
    stats = plans.stats()
    assert (stats["recordings"], stats["hits"], stats["plans"]) == (2, 1, 1)
    y, same = third
    assert same is x
    assert y.shape == (3,) and y.dtype == x.dtype and y.stride() == (1,)
    assert y.untyped_storage().nbytes() == x.numel() * x.element_size()
    assert y.untyped_storage().data_ptr() != second[0].untyped_storage().data_ptr()  # its own allocation


def test_a_replayed_view_keeps_its_offset_and_strides():
    def entry(x):
        y = torch.empty(6, 4, dtype=x.dtype)
        return y[1:].t()

    plans = EntryPlans(entry)
    x = torch.randn(2)
    recorded = calls(plans, x, times=2)[-1]
    replayed = plans((x,), None)
    assert plans.stats()["hits"] == 1
    assert (replayed.shape, replayed.stride(), replayed.storage_offset()) == \
           (recorded.shape, recorded.stride(), recorded.storage_offset())
    assert replayed.untyped_storage().nbytes() == 6 * 4 * 4


@pytest.mark.parametrize("body,reason", [
    (lambda x: x.clone(), "aten::clone"),
    (lambda x: torch.zeros_like(x), "aten::zero"),
    (lambda x: float(x.sum()), "aten::sum"),
    (lambda x: x.contiguous(), "aten::clone"),
    (lambda x: x + 1, "aten::add"),
])
def test_a_call_that_runs_a_torch_operator_is_refused_and_stops_being_recorded(body, reason):
    plans = EntryPlans(body)
    x = torch.randn(3, 5).t()  # not contiguous: contiguous() copies
    results = calls(plans, x, times=5)
    stats = plans.stats()
    assert reason in stats["last_refusal"]
    assert (stats["plans"], stats["hits"], stats["refusals"], stats["refused_signatures"]) == (0, 0, 3, 1)
    assert stats["direct"] == 2
    # Every call still ran the entry point.
    for r in results:
        torch.testing.assert_close(r, body(x))


def test_memory_the_call_keeps_between_calls_is_refused():
    kept = torch.empty(8)

    def entry(x):
        return kept

    plans = EntryPlans(entry)
    assert all(r is kept for r in calls(plans, torch.randn(2), times=4))
    assert "neither an argument nor its own allocation" in plans.stats()["last_refusal"]
    assert plans.stats()["hits"] == 0


def test_plan_constant_returns_its_tensor_and_refuses_anything_else():
    # Launching with a constant needs a GPU (gpu/test_entry_plans_gpu.py: w4a16_gemm's
    # placeholder, mla_decode's table); here, the registry's interface.
    table = torch.zeros(4)
    assert _calls.plan_constant(table) is table
    assert tegula.env.native().entry_plan_constant(table) is table  # again: harmless
    with pytest.raises(TypeError):
        tegula.env.native().entry_plan_constant(None)


def test_results_a_plan_cannot_rebuild_are_refused():
    Pair = namedtuple("Pair", "a b")
    plans = EntryPlans(lambda x: Pair(torch.empty(2), torch.empty(2)))
    results = calls(plans, torch.randn(2), times=4)
    assert all(type(r) is Pair for r in results)
    assert plans.stats()["hits"] == 0 and "returns something other" in plans.stats()["last_refusal"]
    ints = EntryPlans(lambda x: x.shape[0])
    assert calls(ints, torch.randn(3), times=4) == [3] * 4
    assert ints.stats()["hits"] == 0


def test_tuples_lists_and_none_come_back_in_their_shape():
    plans = EntryPlans(lambda x: [torch.empty(2), None, x])
    x = torch.randn(2)
    out = calls(plans, x, times=3)[-1]
    assert plans.stats()["hits"] == 1
    assert type(out) is list and out[1] is None and out[2] is x and out[0].shape == (2,)


def test_an_error_propagates_and_records_nothing():
    def entry(x):
        if x.shape[0] > 2:
            raise ValueError("entry: x must have at most 2 rows")
        return torch.empty_like(x)

    plans = EntryPlans(entry)
    for _ in range(3):
        with pytest.raises(ValueError, match="at most 2 rows"):
            plans((torch.randn(3),), None)
    assert plans.stats()["plans"] == 0 and plans.stats()["refusals"] == 0
    calls(plans, torch.randn(2), times=3)
    assert plans.stats()["hits"] == 1


def test_each_signature_has_its_own_plan():
    shapes = []

    def entry(x, *rest, **kw):
        shapes.append(tuple(x.shape))
        return torch.empty(x.shape[0] * 2, dtype=x.dtype)

    plans = EntryPlans(entry)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    variants = [(a,), (a.t(),), (a.half(),), (a[:3],), (a, 1.0), (a, 2.0), (a, True), (a, 1), (a, "x"),
                (a, None), (a, (1, 2)), (a, torch.float16), (a, a), (a, b)]
    for args in variants:
        for _ in range(3):
            out = plans(args, None)
            assert out.shape == (args[0].shape[0] * 2,) and out.dtype == args[0].dtype
    assert plans.stats()["plans"] == len(variants)
    assert plans.stats()["hits"] == len(variants)
    # Keywords are part of the signature, by name.
    calls(plans, a, eps=1.0, times=2)
    calls(plans, a, tol=1.0, times=2)
    assert plans.stats()["plans"] == len(variants) + 2


def test_misaligned_and_aliased_tensors_are_distinct_signatures():
    plans = EntryPlans(lambda x, y: torch.empty(1))
    base = torch.randn(64)
    x, y = base[:8], torch.randn(8)
    for args in ((x, y), (x, x), (base[1:9], y)):
        calls(plans, *args, times=2)
    assert plans.stats()["plans"] == 3


def test_calls_that_are_never_planned():
    plans = EntryPlans(lambda *args: torch.empty(1))
    x = torch.randn(2)
    # A tensor that requires grad while grad mode is on: autograd must see the call.
    w = torch.randn(2, requires_grad=True)
    calls(plans, w, times=3)
    # A subclass, an unknown type.
    class Sub(torch.Tensor):
        pass

    calls(plans, x.as_subclass(Sub), times=3)
    calls(plans, object(), times=3)
    # Under a TorchFunctionMode and a TorchDispatchMode.
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Fn(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Fn():
        calls(plans, x, times=3)
    with Dispatch():
        calls(plans, x, times=3)
    with torch.device("meta"):
        calls(plans, torch.empty(2, device="meta"), times=3)
    assert plans.stats()["recordings"] == 0 and plans.stats()["direct"] == 18
    with torch.no_grad():
        calls(plans, w, times=3)
    assert plans.stats()["hits"] == 1


def test_a_call_inside_a_recording_runs_its_entry_point():
    inner = EntryPlans(lambda x: torch.empty_like(x))

    def outer(x):
        return inner((x,), None)

    plans = EntryPlans(outer)
    calls(plans, torch.randn(3), times=4)
    assert inner.stats()["recordings"] == 0 and inner.stats()["direct"] == 2
    assert plans.stats()["hits"] == 2


def test_clear_forgets_plans_and_counts():
    plans = EntryPlans(lambda x: torch.empty(1))
    calls(plans, torch.randn(1), times=3)
    plans.clear()
    assert plans.stats() == {"hits": 0, "recordings": 0, "refusals": 0, "direct": 0, "plans": 0,
                             "refused_signatures": 0, "last_refusal": ""}


def test_bad_use_is_a_type_error():
    with pytest.raises(TypeError, match="callable"):
        EntryPlans(3)
    plans = EntryPlans(lambda: None)
    with pytest.raises(TypeError, match="plans\\(args"):
        plans([1], None)
    with pytest.raises(TypeError, match="plans\\(args"):
        plans((), None, 3)


def test_the_published_entry_points_are_planned_and_keep_their_signature():
    import inspect

    import tegula.kernels as K
    from tegula.kernels import _ops, fused_norm, rmsnorm

    for name in ("rms_norm", "add_rms_norm", "rope", "swiglu", "matmul", "flash_decode", "w4a16_gemm"):
        fn = getattr(K, name)
        assert isinstance(fn.plans, EntryPlans), name
        assert inspect.signature(fn) == inspect.signature(fn.__wrapped__), name
    assert rmsnorm.rms_norm is K.rms_norm and fused_norm.add_rms_norm is K.add_rms_norm
    assert _ops.flash_attention.plans is not None


def test_a_cpu_call_still_names_its_argument():
    import tegula.kernels as K

    x, w = torch.randn(2, 8, dtype=torch.float16), torch.randn(8, dtype=torch.float16)
    before = K.rms_norm.plans.stats()["plans"]
    for _ in range(4):
        with pytest.raises(ValueError, match="rms_norm: x must be a CUDA tensor"):
            K.rms_norm(x, w)
    assert K.rms_norm.plans.stats()["plans"] == before


def test_torch_compile_traces_the_entry_point_not_its_plans():
    import tegula.kernels as K

    def f(x, w):
        return K.rms_norm(x, w)

    from torch._subclasses.fake_tensor import FakeTensorMode

    before = K.rms_norm.plans.stats()
    with FakeTensorMode():
        x = torch.empty(2, 8, dtype=torch.float16, device="cuda")
        w = torch.empty(8, dtype=torch.float16, device="cuda")
        assert f(x, w).shape == (2, 8)
    after = K.rms_norm.plans.stats()
    assert after["hits"] == before["hits"] and after["recordings"] == before["recordings"]
    graph = torch.fx.experimental.proxy_tensor.make_fx(f, tracing_mode="fake")(x, w)
    assert "tegula.rms_norm" in str(graph.graph)


def test_plans_can_be_turned_off():
    code = ("import tegula.kernels as K; print(hasattr(K.rms_norm, 'plans'), "
            "K.rms_norm is K.rms_norm.__dict__.get('__wrapped__', K.rms_norm))")
    env = dict(os.environ, TEGULA_ENTRY_PLANS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_check_indices_from_the_environment_bypasses_plans(monkeypatch):
    seen = []

    def public(x, check_indices=None):
        seen.append(check_indices)
        return torch.empty(1)

    entry = _calls.planned(public)
    x = torch.randn(2)
    for _ in range(3):
        entry(x)
    assert entry.plans.stats()["hits"] == 1
    monkeypatch.setenv("TEGULA_CHECK_INDICES", "1")
    entry(x)
    assert entry.plans.stats()["hits"] == 1 and len(seen) == 3
