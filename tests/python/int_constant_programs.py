"""A program that writes the extremes of an integer dtype (tests/python/cpu/test_int_constants.py
compiles and interprets it, tests/python/gpu/test_int_constants_gpu.py runs it)."""
import tegula.language as T

RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1), "bool": (0, 1),
}


def extremes_program(dtype):
    """A = [lo, hi, hi, lo, lo, hi] of `dtype` (as an alloc_var's init, stores, T.cast, an
    assignment and an operand), F = [hi, lo] as float64."""
    lo, hi = RANGES[dtype]
    if dtype == "bool":
        lo, hi = False, True

    @T.prim_func
    def extremes(A: T.Tensor((6,), dtype), F: T.Tensor((2,), "float64")):
        with T.Kernel(1, threads=32) as bx:
            v = T.alloc_var(dtype, init=hi)
            w = T.alloc_var(dtype)
            w = lo
            A[0] = lo
            A[1] = hi
            A[2] = v
            A[3] = T.cast(lo, dtype)
            A[4] = w
            A[5] = v & hi
            F[0] = T.cast(v, "float64")
            F[1] = T.cast(w, "float64")

    return extremes
