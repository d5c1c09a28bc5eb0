"""`tilelang.cuda.intrinsics.sparse_layout`: the numbers of structured sparsity that
T.gemm_sp's operands are laid out by (docs/language.md, "Sparse gemm").

A row of the dense A is cut into groups of `group` elements along K, of which `kept` are
stored: A_sparse holds K * kept / group elements a row. The metadata E says which: each
group takes 4 bits of E's row, the kept elements' positions in the group 2 bits each
(the first kept in the low bits), groups packed from an element's low bits up. So one
element of E covers `get_e_factor(a_dtype, e_dtype)` elements of the dense row:

    get_e_factor(T.float16, T.int16)  # 16: four groups of four
    get_e_factor(T.float16, T.int8)   # 8
    get_e_factor(T.float32, T.int16)  # 8: four groups of two
"""
from __future__ import annotations

from ...frontend.dtypes import DType, normalize_dtype, value_bits

_BITS_PER_GROUP = 4


class _ByDtype(dict):
    """A dict of dtypes that finds any spelling of one (T.float8_e4m3 and "float8_e4m3fn",
    torch.float16 and T.half)."""

    def __missing__(self, key):
        try:
            canonical = normalize_dtype(key)
        except (ValueError, TypeError):
            raise KeyError(key) from None
        for known, value in self.items():
            if normalize_dtype(known) == canonical:
                return value
        raise KeyError(key)

    def __contains__(self, key):
        try:
            self[key]
        except KeyError:
            return False
        return True


# element type of A -> (kept, group): two of four for 16- and 8-bit elements, one of two
# for 32-bit ones.
GROUP_CONFIG: dict = _ByDtype({
    DType("float32"): (1, 2),
    DType("float16"): (2, 4),
    DType("bfloat16"): (2, 4),
    DType("int8"): (2, 4),
    DType("uint8"): (2, 4),
    DType("float8_e4m3fn"): (2, 4),
    DType("float8_e5m2"): (2, 4),
})


def get_e_factor(a_dtype, meta_dtype) -> int:
    """Elements of the dense A's row one element of E (of `meta_dtype`) covers."""
    _, group = GROUP_CONFIG[a_dtype]
    return value_bits(normalize_dtype(meta_dtype)) // _BITS_PER_GROUP * group


def get_e_replicate_factor(a_dtype) -> int:
    """How many neighbouring lanes of a warp load the same metadata for the instruction
    (TileLang's register layout of E; 2 for 16- and 32-bit A, 1 for 8-bit A)."""
    return 1 if value_bits(normalize_dtype(a_dtype)) <= 8 else 2
