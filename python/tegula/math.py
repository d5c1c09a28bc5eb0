"""Integer helpers for sizing kernels, with TileLang's names (`tilelang.math`), also at the
top of the package: `tegula.cdiv(1000, 128)` is 8, `tegula.next_power_of_2(100)` is 128.

Both take Python ints (what tile sizes and grids are computed from before a kernel is
written). `cdiv` also takes kernel expressions (`T.dynamic` sizes, block indices), where
it builds `(a + b - 1) // b`, as `T.ceildiv` does.
"""
from __future__ import annotations

import numbers


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def cdiv(a, b):
    """a / b rounded up: the number of b-sized tiles that cover a."""
    if _is_int(a) and _is_int(b):
        if b <= 0:
            raise ValueError(f"tegula.cdiv: b must be a positive int, got {b}")
        return -(-int(a) // int(b))
    from .frontend.values import PrimExpr  # noqa: PLC0415 - only kernel expressions need the core

    if not all(_is_int(v) or (isinstance(v, PrimExpr) and v.expr.dtype.startswith(("int", "uint")))
               for v in (a, b)):
        raise TypeError(f"tegula.cdiv takes ints or integer kernel expressions, got {a!r} and {b!r}")
    return (a + b - 1) // b


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, for n >= 1 (next_power_of_2(64) is 64, of 65 is 128)."""
    if not _is_int(n):
        raise TypeError(f"tegula.next_power_of_2 takes a Python int (a size known before the kernel is "
                        f"written), got {type(n).__name__} {n!r}")
    if n < 1:
        raise ValueError(f"tegula.next_power_of_2: n must be >= 1, got {n}")
    return 1 << (int(n) - 1).bit_length()
