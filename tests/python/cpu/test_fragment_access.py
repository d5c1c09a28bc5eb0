"""Fragments read at a scalar index outside every T.Parallel loop (issue 24, part 1), on
the CPU: such a fragment is held whole by every thread (TileLang's meaning). The reference
interpreter and the simulator of the lowered code (races checked) must agree with torch
on sm_80 and sm_90a, outputs poisoned. The same programs run on the GPU in
gpu/test_fragment_access_gpu.py."""
import zlib

import pytest
import torch

import fragment_access_programs as fp
import tegula
import tegula.language as T
import tegula.testing as tt
from helpers import rel_err


@pytest.mark.parametrize("name", sorted(fp.CASES))
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("run", ["reference", "simulate"])
def test_matches_torch(name, target, run):
    make, inputs, ref = fp.CASES[name]
    args = inputs(torch.Generator().manual_seed(zlib.crc32(name.encode())))
    got = getattr(tt, run)(make(target), *args)
    want = ref(*args)
    assert not torch.isnan(got).any(), f"{name}: unwritten elements"
    assert rel_err(got.double(), want) < 1e-5, f"{name} ({run}, {target}): relative error {rel_err(got.double(), want):.2e}"


def test_the_fragment_is_a_register_array_every_thread_fills():
    ir = fp.masked_tiles(4, 7 * 32, 7, target="sm_90a").get_ir("final")
    assert "alloc mf: local int32[7]" in ir, ir
    assert "let a = mf[k]" in ir, ir


def test_a_gemm_accumulator_read_outside_a_loop_is_an_error():
    # The mma accumulator is spread over the threads: no thread holds it whole.
    @tegula.jit(out_idx=[-1], target="sm_80")
    def program(N=32):
        @T.prim_func
        def main(A: T.Tensor((N, N), "float16"), B: T.Tensor((N, N), "float16"), C: T.Tensor((N, N), "float32")):
            with T.Kernel(1, threads=128) as bx:
                a = T.alloc_shared((N, N), "float16")
                b = T.alloc_shared((N, N), "float16")
                c = T.alloc_fragment((N, N), "float32")
                T.copy(A, a)
                T.copy(B, b)
                T.gemm(a, b, c, clear_accum=True)
                if c[0, 0] > 0:  # MARK
                    T.copy(c, C)

        return main

    with pytest.raises(tegula.TegulaCompileError) as e:
        program()
    assert "layout conflict" in str(e.value) and "replicated(32, 32)" in str(e.value)
    assert f"decided at line {_marked_line(test_a_gemm_accumulator_read_outside_a_loop_is_an_error)}" in str(e.value)


def _marked_line(fn):
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, l in enumerate(lines) if "# MARK" in l)


def test_a_condition_on_a_fragment_that_differs_between_threads_is_refused():
    # wf is held whole by every thread, but each thread wrote its own index into it: the
    # branch may differ between threads, so the tile copy under it is refused at the line.
    @tegula.jit(out_idx=[-1], target="sm_80")
    def program(N=32):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                tx = T.get_thread_binding(0)
                wf = T.alloc_fragment((4,), "float32")
                s = T.alloc_shared((N,), "float32")
                for i in T.Parallel(4):
                    wf[i] = T.cast(tx, "float32") - 3.0
                T.clear(s)
                if wf[0] > 0:  # MARK
                    T.copy(A, s)
                T.copy(s, C)

        return main

    with pytest.raises(tegula.TegulaCompileError) as e:
        program()
    assert "may differ between the block's threads" in str(e.value)
    assert f":{_marked_line(test_a_condition_on_a_fragment_that_differs_between_threads_is_refused)}:" in str(e.value).splitlines()[0]
