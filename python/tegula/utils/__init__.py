"""Helpers TileLang programs import from `tilelang.utils`: tensors made and compared the
way TileLang's tests do (see tensor.py)."""
from .tensor import TensorSupplyType, get_tensor_supply, map_torch_type, torch_assert_close

__all__ = ["TensorSupplyType", "get_tensor_supply", "map_torch_type", "torch_assert_close"]
