"""A T.alloc_var is printed as a plain variable of the thread (`bool pred;`, read and
written as `pred`), not a one-element array; its values are the same (reference and
simulator), and the code compiles, whether the variable is written by an assignment, an
initialiser, a loop or the result of T.atomic_add(..., return_prev=True)."""
import re

import torch

import tegula
import tegula.language as T
import tegula.testing as tt


def test_isfinite_into_a_var_is_a_scalar_assignment():
    @T.prim_func
    def main(x: T.Tensor((1,), "float32"), y: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=1):
            pred = T.alloc_var(T.bool)
            pred = T.isfinite(x[0])
            y[0] = T.if_then_else(pred, 1, 0)

    k = tegula.compile(main, target="sm_90a")
    src = k.get_kernel_source()
    assert re.search(r"^\s*bool pred;$", src, re.M), src
    assert re.search(r"^\s*pred = isfinite\(x\[0\]\);$", src, re.M), src
    assert "pred[" not in src
    assert len(k.cubin()) > 0
    for value, want in ((1.5, 1), (float("inf"), 0), (float("nan"), 0)):
        for run in (tt.reference, tt.simulate):
            y = torch.zeros(1, dtype=torch.int32)
            run(k, torch.tensor([value]), y)
            assert int(y[0]) == want


def test_a_running_sum_in_a_var():
    @T.prim_func
    def main(X: T.Tensor((8, 100), "float32"), Y: T.Tensor((8,), "float32")):
        with T.Kernel(8, threads=32) as bx:
            acc = T.alloc_var("float32", init=0.0)
            for k in T.serial(100):
                acc += X[bx, k]
            Y[bx] = acc

    k = tegula.compile(main, target="sm_80")
    src = k.get_kernel_source()
    assert "float acc;" in src and "acc = (acc + X[" in src and "acc[" not in src
    X = torch.randn(8, 100)
    for run in (tt.reference, tt.simulate):
        Y = torch.zeros(8)
        run(k, X, Y)
        torch.testing.assert_close(Y, X.sum(1), rtol=1e-5, atol=1e-5)


def test_an_alloc_local_of_one_element_stays_an_array():
    @T.prim_func
    def main(X: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            r = T.alloc_local((1,), "float32")
            r[0] = X[tx] * 2
            X[tx] = r[0]

    src = tegula.compile(main, target="sm_80").get_kernel_source()
    assert "float r[1];" in src and "r[0] = " in src
