"""tegula.profiler without a GPU: supply types, input generation, checking on CPU tensors
through a stand-in kernel, and the clear error that timing gives without a CUDA device."""
from types import SimpleNamespace

import pytest
import torch

import helpers
from tegula import profiler
from tegula.profiler import Profiler, TensorSupplyType, make_tensor


def param(name, shape, dtype, is_output=False, is_scalar=False):
    return SimpleNamespace(name=name, shape=shape, dtype=dtype, is_output=is_output, is_scalar=is_scalar)


class AddOne:
    """A stand-in kernel y = x + 1 that allocates its output, as a kernel with out_idx does."""

    params = [param("x", (4, 8), torch.float16), param("y", (4, 8), torch.float16, is_output=True)]

    def __call__(self, x):
        return x + 1


class AddOneInto(AddOne):
    """The same with `launch` (every argument given), writing only the first `rows` rows."""

    def __init__(self, rows=4):
        self.rows = rows

    def launch(self, x, y, stream=0):
        y[: self.rows] = x[: self.rows] + 1


def test_supply_type_members_match_tilelang():
    names = [m.name for m in TensorSupplyType]
    assert names == ["Integer", "Uniform", "Normal", "Randn", "Zero", "One", "Auto"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.int8,
                                   torch.uint8, torch.bool, torch.float8_e4m3fn])
@pytest.mark.parametrize("supply", list(TensorSupplyType), ids=lambda s: s.name)
def test_make_tensor_shape_dtype_and_range(supply, dtype):
    t = make_tensor((3, 5), dtype, supply, device="cpu")
    assert t.shape == (3, 5) and t.dtype == dtype and t.device.type == "cpu"
    values = t.to(torch.float32)
    if supply == TensorSupplyType.Zero:
        assert (values == 0).all()
    elif supply == TensorSupplyType.One:
        assert (values == 1).all()
    elif supply == TensorSupplyType.Integer or not dtype.is_floating_point or dtype.itemsize == 1:
        assert (values == values.round()).all() and values.min() >= -2 and values.max() <= 2
    elif supply == TensorSupplyType.Uniform:
        assert values.min() >= -1 and values.max() <= 1


def test_get_inputs_skips_outputs_and_gives_scalars_as_numbers():
    kernel = SimpleNamespace(params=[param("a", (2, 3), torch.float32), param("n", (), torch.int32, is_scalar=True),
                                     param("out", (2, 3), torch.float32, is_output=True)])
    inputs = Profiler(kernel, TensorSupplyType.One, device="cpu").get_inputs()
    assert len(inputs) == 2
    assert inputs[0].shape == (2, 3) and inputs[0].dtype == torch.float32
    assert inputs[1] == 1 and isinstance(inputs[1], int)


def test_dynamic_dimensions_need_a_size():
    kernel = SimpleNamespace(params=[param("x", (None, 16), torch.float16)])
    with pytest.raises(ValueError, match="dynamic_size"):
        Profiler(kernel, device="cpu").get_inputs()
    (x,) = Profiler(kernel, device="cpu", dynamic_size=7).get_inputs()
    assert x.shape == (7, 16)


def test_dynamic_outputs_without_a_size_are_left_to_the_kernel():
    class Double(AddOneInto):
        params = [param("x", (None, 8), torch.float32), param("y", (None, 8), torch.float32, is_output=True)]

        def __call__(self, x):
            return x * 2

    x = torch.ones(3, 8)
    prof = Profiler(Double(), device="cpu")
    assert torch.equal(prof._runner([x], prof._outputs(poison=True))()[0], x * 2)
    Profiler(Double(rows=3), device="cpu", dynamic_size=3).assert_allclose(lambda x: x + 1)


def test_supply_type_must_be_the_enum():
    with pytest.raises(TypeError, match="TensorSupplyType"):
        Profiler(AddOne(), "Normal", device="cpu")


def test_assert_allclose_passes_and_run_once_returns_the_output():
    prof = Profiler(AddOne(), TensorSupplyType.Normal, device="cpu")
    prof.assert_allclose(lambda x: x.float() + 1)
    assert prof.run_once().shape == (4, 8)


def test_assert_allclose_reports_the_error():
    prof = Profiler(AddOne(), TensorSupplyType.Zero, device="cpu")
    with pytest.raises(AssertionError, match=r"output 'y': 32 of 32 .*max abs error 1"):
        prof.assert_allclose(lambda x: x + 2)


def test_assert_allclose_poisons_outputs_given_through_launch():
    Profiler(AddOneInto(rows=4), device="cpu").assert_allclose(lambda x: x + 1)
    # One row of four left unwritten is 25% mismatched: far over the allowed ratio...
    with pytest.raises(AssertionError, match="8 NaN where the reference has a number"):
        Profiler(AddOneInto(rows=3), device="cpu").assert_allclose(lambda x: x + 1)
    # ...and an unwritten element fails even when the ratio would allow it.
    with pytest.raises(AssertionError, match="never written"):
        Profiler(AddOneInto(rows=3), device="cpu").assert_allclose(lambda x: x + 1, max_mismatched_ratio=0.5)


def test_assert_allclose_needs_outputs():
    kernel = SimpleNamespace(params=[param("x", (4,), torch.float32)], __call__=None)
    with pytest.raises(ValueError, match="out_idx"):
        Profiler(kernel, device="cpu").assert_allclose(lambda x: x)


def test_timing_without_a_cuda_device_raises(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        profiler.do_bench(lambda: None)
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        Profiler(AddOne(), device="cpu").do_bench()


def test_do_bench_rejects_unknown_return_mode():
    with pytest.raises(ValueError, match="return_mode"):
        profiler.do_bench(lambda: None, return_mode="p50")


def test_poisoned_outputs_by_dtype():
    assert torch.isnan(profiler.poisoned((3,), torch.bfloat16, "cpu")).all()
    assert (profiler.poisoned((3,), torch.int32, "cpu") == torch.iinfo(torch.int32).min).all()


def test_helpers_rel_err_and_nan_check():
    ref = torch.tensor([3.0, 4.0])
    assert helpers.rel_err(torch.tensor([3.0, 4.0]), ref) == 0
    assert helpers.rel_err(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    helpers.assert_close_rel(torch.tensor([3.0, 4.0001]), ref, 1e-3)
    with pytest.raises(AssertionError, match="NaN"):
        helpers.assert_close_rel(helpers.poisoned_like(ref), ref, 1.0)
    with pytest.raises(AssertionError, match="relative error"):
        helpers.assert_close_rel(ref * 2, ref, 1e-3)
