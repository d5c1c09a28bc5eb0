"""T.alloc_reducer / T.reducer_init / T.reducer_update / T.finalize_reducer on the CPU:
the reference and the simulator against torch in float64 (each logical iteration counted
once, however many threads its loop's layout gives it; the seed once; epochs inside
serial and pipelined loops), and every misuse an error at its line."""
import functools
import os
import sys

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import reducer_programs as rp  # noqa: E402

RUNS = [tt.reference, tt.simulate]
IDS = ["reference", "simulate"]


def build(program, out_idx=-1):
    return tegula.compile(program, out_idx=out_idx, target="sm_90a")


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("extent,threads", [(8, 128), (100, 64), (256, 256), (3, 32)])
def test_each_iteration_counts_once(run, extent, threads):
    a = torch.arange(1, extent + 1, dtype=torch.float32)
    assert run(build(rp.scalar_program(extent, threads)), a).item() == a.sum().item()


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_a_loop_over_replicated_values_counts_each_row_once(run):
    a = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    out = run(build(rp.replicated_program()), a)
    torch.testing.assert_close(out.double(), a.double().sum().reshape(1), rtol=1e-5, atol=1e-5)
    assert "if (((tx & 3) == 0))" in build(rp.replicated_program()).get_kernel_source()  # one copy of each row


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_and_nan(run, op):
    a = torch.randn(40, generator=torch.Generator().manual_seed(2))
    want = a.max() if op == "max" else a.min()
    assert run(build(rp.scalar_program(40, op=op)), a).item() == want.item()
    a[17] = float("nan")
    assert torch.isnan(run(build(rp.scalar_program(40, op=op)), a)).all()


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_the_seed_is_combined_once(run):
    a = torch.arange(1, 9, dtype=torch.float32)
    assert run(build(rp.scalar_program(seed=100.0)), a).item() == 136.0


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("op", ["sum", "bitand", "bitor", "bitxor", "max"])
def test_integer_reducers(run, op):
    a = torch.randint(-1000, 1000, (24,), dtype=torch.int32, generator=torch.Generator().manual_seed(3))
    fold = {"sum": lambda x, y: x + y, "bitand": lambda x, y: x & y, "bitor": lambda x, y: x | y,
            "bitxor": lambda x, y: x ^ y, "max": max}[op]
    assert run(build(rp.scalar_program(24, op=op, dtype="int32")), a).item() == functools.reduce(fold, a.tolist())


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("M,K,block_K,op,pipelined", [(32, 512, 128, "sum", False), (16, 200, 64, "max", False),
                                                      (32, 300, 128, "sum", True)])
def test_accumulation_across_tiles(run, M, K, block_K, op, pipelined):
    a = torch.randn(M, K, generator=torch.Generator().manual_seed(M + K))
    k = tegula.compile(rp.rows_program(M, K, block_K, op=op, pipelined=pipelined), out_idx=-1, target="sm_90a",
                       pass_configs={"tl.disable_warp_specialized": True})
    want = a.double().sum(1) if op == "sum" else a.double().max(1).values
    torch.testing.assert_close(run(k, a).double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_two_update_sites(run):
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(8, generator=g), torch.randn(16, generator=g)
    out = run(build(rp.two_sites_program()), a, b)
    torch.testing.assert_close(out.double(), (a.double().sum() + b.double().sum()).reshape(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_an_epoch_per_iteration_of_a_serial_loop(run):
    a = torch.randn(256, generator=torch.Generator().manual_seed(5)) * 3
    out = run(build(rp.online_softmax_program(256, 64)), a).double()
    m = a.double().max()
    torch.testing.assert_close(out, torch.stack([m, torch.exp(a.double() - m).sum()]), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- misuse


def _kernel_error(body: str) -> str:
    """Compiles a kernel whose reducer lines are `body` (indented under T.Kernel) and
    returns the error's message."""
    import importlib.util
    import tempfile
    import textwrap

    src = textwrap.dedent('''
        import tegula
        import tegula.language as T

        @T.prim_func
        def kernel(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=128):
                src = T.alloc_fragment((8,), "float32")
                result = T.alloc_fragment((1,), "float32")
                T.copy(A, src)
    ''') + textwrap.indent(textwrap.dedent(body), " " * 8)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("reducer_misuse", f.name)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(tegula.TegulaCompileError) as info:
        spec.loader.exec_module(module)
        tegula.compile(module.kernel, target="sm_90a")
    return str(info.value)


UPDATE = """
for i in T.Parallel(8):
    T.reducer_update(acc[0], src[i])
"""


@pytest.mark.parametrize("body,message", [
    ("acc = T.alloc_reducer((1,), 'float32')\n" + UPDATE + "T.finalize_reducer(acc, result)\n",
     "T.reducer_update of reducer 'acc' before T.reducer_init"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\nT.reducer_init(acc)\n",
     "double T.reducer_init of reducer 'acc'"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\n" + UPDATE,
     "reducer 'acc' is initialised but never finalized"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\nfor i in T.Parallel(8):\n    acc[0] += src[i]\n",
     "illegal store to reducer 'acc' (+=): T.reducer_init opened it"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\n" + UPDATE + "if T.get_thread_binding() == 0:\n"
     "    B[0] = acc[0]\nT.finalize_reducer(acc, result)\n", "illegal read of reducer 'acc'"),
    ("acc = T.alloc_reducer((1,), 'float32')\nfor i in T.Parallel(8):\n    acc[0] += src[i]\n",
     "illegal store to reducer 'acc' (+=) before T.clear(acc)"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.clear(acc)\nfor i in T.Parallel(8):\n    acc[0] -= src[i]\n",
     "update it with acc[i] +=, got -="),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.clear(acc)\n" + UPDATE, "illegal mix of forms on reducer 'acc'"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.clear(acc)\nacc[0] += src[0]\n", "outside any T.Parallel loop"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.clear(acc)\n", "reducer 'acc' is initialised but never finalized"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.clear(acc)\nT.reducer_init(acc)\n",
     "T.reducer_init of reducer 'acc', which T.clear opened"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\nT.clear(acc)\n", "illegal use of reducer 'acc'"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\nacc[0] = 1.0\n",
     "illegal store to reducer 'acc'"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\nT.reducer_update(acc[0], src[0])\n",
     "outside any T.Parallel loop"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc, T.float16(1.0))\n", "does not match reducer 'acc'"),
    ("acc = T.alloc_reducer((1,), 'float32', op='bitand')\n", "op='bitand' needs an integer dtype"),
    ("acc = T.alloc_reducer((1,), 'float32', op='prod')\n", "op must be one of sum, max, min"),
    ("acc = T.alloc_reducer((300,), 'float32')\n", "past the 1020 bytes"),
    ("acc = T.alloc_reducer((1,), 'float32')\nT.reducer_init(acc)\n" + UPDATE + "T.finalize_reducer(acc, src)\n",
     "result 'src' has shape [8], the reducer [1]"),
])
def test_misuse_is_an_error_at_its_line(body, message):
    assert message in _kernel_error(body)


def test_a_bitwise_reducer_of_floats_is_also_an_assertion_error():
    """TileLang asserts the dtype: a port's `except AssertionError` catches ours too."""
    with pytest.raises(AssertionError, match="integer dtype") as info:
        @T.prim_func
        def kernel(B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32):
                acc = T.alloc_reducer((1,), "float32", op="bitand")  # noqa: F841
    assert isinstance(info.value, tegula.TegulaCompileError)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
@pytest.mark.parametrize("K,threads,fill", [(256, 128, None), (100, 64, None), (37, 32, 0.5)])
def test_the_first_form_finalizes_in_place(run, K, threads, fill):
    """T.clear (or T.fill), acc[i, j] += v, T.finalize_reducer(acc), T.copy(acc, B): the
    T.fill value is combined once."""
    g = torch.Generator().manual_seed(K)
    a, a2 = torch.randn(4, K, generator=g), torch.randn(4, K, generator=g)
    out = run(build(rp.first_form_program(4, K, threads, fill)), a, a2).double()
    want = a.double() @ a2.double().T + (0 if fill is None else fill)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_the_first_form_of_a_bitwise_reducer(run):
    g = torch.Generator().manual_seed(9)
    a, a2 = (torch.randint(-50, 50, (4, 40), dtype=torch.int32, generator=g) for _ in range(2))
    out = run(build(rp.first_form_program(4, 40, 32, op="bitxor", dtype="int32")), a, a2)
    prod = a[:, None, :] * a2[None, :, :]
    want = functools.reduce(lambda x, y: x ^ y, prod.unbind(-1))
    assert torch.equal(out, want)


def _finalize_scope_program(shape: str):
    """A reducer finalized outside the loop that opens it, or inside a loop it is not in."""
    @T.prim_func
    def kernel(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((8,), "float32")
            T.copy(A, src)
            acc = T.alloc_reducer((1,), "float32", op="sum")
            result = T.alloc_fragment((1,), "float32")
            if shape == "init_in_loop":
                for _ in T.serial(4):
                    T.reducer_init(acc)
                    for i in T.Parallel(8):
                        T.reducer_update(acc[0], src[i])
                T.finalize_reducer(acc, result)
            else:
                T.reducer_init(acc)
                for _ in T.serial(4):
                    for i in T.Parallel(8):
                        T.reducer_update(acc[0], src[i])
                    T.finalize_reducer(acc, result)
            B[0] = result[0]

    return kernel


@pytest.mark.parametrize("shape", ["init_in_loop", "finalize_in_loop"])
def test_a_finalize_outside_the_scope_of_its_init_is_an_error_at_the_line(shape):
    with pytest.raises(tegula.TegulaCompileError, match="not in the scope of its T.reducer_init") as info:
        _finalize_scope_program(shape)
    assert "T.finalize_reducer(acc, result)" in str(info.value)
