"""The eager @tegula.jit form (the decorated function is the kernel body) without a GPU:
its GEMM, RMSNorm and softmax compile to the same CUDA source as the lazy form, byte for
byte; every declaration compiles (T.const, T.Tensor(...) and T.Tensor[...], T.dynamic,
scalar parameters, several T.empty outputs, none, mixed tensors and constants, signature
annotations, macros, several kernels); calls find their kernel in the cache (the kernel
itself replaced by a recorder, as there is no GPU to launch on); mistakes are named."""
import pytest

tegula = pytest.importorskip("tegula")
torch = pytest.importorskip("torch")

import eager_programs as P  # noqa: E402
import tegula.jit_eager  # noqa: E402
import tegula.language as T  # noqa: E402
import tegula.testing as tt  # noqa: E402
from tegula.jit_eager import EagerJITFunction, is_eager  # noqa: E402
from tegula.jit import JITFunction  # noqa: E402

H16 = torch.float16


def _tensor(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype)


# ---- the eager and lazy forms give the same source ----

@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_gemm_source_is_byte_identical(target):
    eager, lazy = P.eager_gemm(target), P.lazy_gemm(target)
    assert isinstance(eager, EagerJITFunction) and isinstance(lazy, JITFunction)
    src = eager.compile(M=1024, N=1024, K=512).get_kernel_source()
    assert src == lazy(1024, 1024, 512).get_kernel_source()
    assert ("wgmma" in src) == (target == "sm_90a")
    # Sizes read off tensors give the same kernel as sizes given by keyword.
    from_tensors = eager.compile(_tensor(1024, 512, dtype=H16), _tensor(512, 1024, dtype=H16))
    assert from_tensors.get_kernel_source() == src


@pytest.mark.parametrize("pair,sizes", [("rms_norm", {"N": 1024}), ("softmax", {"N": 512})])
def test_norm_and_softmax_sources_are_byte_identical(pair, sizes):
    eager = getattr(P, f"eager_{pair}")("sm_80")
    lazy = getattr(P, f"lazy_{pair}")("sm_80")
    src = eager.compile(**sizes).get_kernel_source()
    assert src == lazy(sizes["N"]).get_kernel_source()
    assert f"{pair}_kernel(" in src and "int m)" in src  # rows are T.dynamic


# ---- compile-only: each declaration ----

def test_compile_returns_a_jit_kernel():
    kernel = P.eager_gemm("sm_90a").compile(M=256, N=256, K=128, block_M=64, block_N=64, threads=128)
    assert isinstance(kernel, tegula.JITKernel)
    assert [(p.name, p.shape, p.is_output) for p in kernel.params] == [
        ("A", (256, 128), False), ("B", (128, 256), False), ("C", (256, 256), True)]
    assert kernel.out_idx == [2]
    assert kernel.get_profiler().params == kernel.params
    assert "gemm_kernel(" in kernel.get_kernel_source()


def test_dynamic_scalar_and_several_outputs_in_return_order():
    @tegula.jit(target="sm_80")
    def scale_rows(X, n, alpha=2.0):
        m = T.dynamic("m")
        N = T.const("N")
        X: T.Tensor((m, N), "float32")
        n: T.int32
        Y = T.empty((m, N), "float32")
        S = T.empty((m,), "float32")
        with T.Kernel(m, threads=64) as bx:
            for j in T.Parallel(N):
                Y[bx, j] = X[bx, j] * alpha + n
            S[bx] = X[bx, 0]
        return S, Y

    kernel = scale_rows.compile(N=128)
    assert [(p.name, p.shape, p.is_scalar, p.is_output) for p in kernel.params] == [
        ("X", (None, 128), False, False), ("n", (), True, False),
        ("S", (None,), False, True), ("Y", (None, 128), False, True)]
    assert kernel.out_idx == [2, 3]
    assert "int n" in kernel.get_kernel_source()


def test_writing_into_a_passed_tensor_has_no_outputs():
    @tegula.jit(target="sm_80")
    def fill(X, value=1.0):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                X[bx * 128 + i] = value

    kernel = fill.compile(_tensor(1024))
    assert kernel.out_idx == [] and [p.name for p in kernel.params] == ["X"]


def test_mixed_positional_tensors_and_constants():
    @tegula.jit(target="sm_80")
    def gemm(A, B, block_M, block_N, block_K, dtype):
        M, N, K = T.const("M N K")
        A: T.Tensor((M, K), dtype)
        B: T.Tensor((K, N), dtype)
        C = T.empty((M, N), dtype)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_l)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])
        return C

    kernel = gemm.compile(_tensor(256, 64, dtype=H16), _tensor(64, 128, dtype=H16), 64, 64, 32, "float16")
    assert [p.shape for p in kernel.params] == [(256, 64), (64, 128), (256, 128)]
    assert "gemm_ss<" in kernel.get_kernel_source()


@T.macro
def _copy_rows(A, B):
    M, N = A.shape
    with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
        for i, j in T.Parallel(32, N):
            B[bx * 32 + i, j] = A[bx * 32 + i, j]


@T.macro
def _copy_of(A):
    M, N = A.shape
    B = T.empty(M, N, dtype=A.dtype)
    _copy_rows(A, B)
    return B


def test_signature_annotations_subscripts_and_macros():
    @tegula.jit(target="sm_80")
    def copy_sig(A: T.Tensor((128, 64), T.float32), B: T.Tensor((128, 64), T.float32)):
        _copy_rows(A, B)

    @tegula.jit(target="sm_80")
    def copy_body(A, B):
        N, M = T.const("N, M")
        A: T.Tensor[[N, M], T.float32]
        B: T.Tensor[[N, M], T.float32]
        _copy_rows(A, B)

    @tegula.jit(target="sm_80")
    def copy_out(A):
        N = T.dynamic("N")
        M = T.const("M")
        A: T.Tensor[[N, M], T.float32]
        return _copy_of(A)

    assert all(isinstance(f, EagerJITFunction) for f in (copy_sig, copy_body, copy_out))
    body = [line for line in copy_sig.compile().get_kernel_source().splitlines()[1:]]
    assert [line.replace("copy_body", "copy_sig") for line in
            copy_body.compile(N=128, M=64).get_kernel_source().splitlines()[1:]] == body
    kernel = copy_out.compile(M=64)
    assert [(p.name, p.shape, p.is_output) for p in kernel.params] == [("A", (None, 64), False),
                                                                    ("B", (None, 64), True)]


def test_several_kernels_and_a_workspace():
    @tegula.jit(target="sm_80")
    def two_pass(X, block=128):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        W = T.alloc_global((N,), "float32")
        Y = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                W[bx * block + i] = X[bx * block + i] * 2.0
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            for i in T.Parallel(block):
                Y[bx * block + i] = W[bx * block + i] + 1.0
        return Y

    kernel = two_pass.compile(N=1024)
    assert kernel.num_kernels == 2 and [w.name for w in kernel.prim_func.workspaces] == ["W"]
    assert [p.name for p in kernel.params] == ["X", "Y"] and kernel.out_idx == [1]


def test_lazy_functions_stay_lazy():
    def helper(N):
        @T.prim_func
        def k(X: T.Tensor((N,), "float32")):
            with T.Kernel(1) as bx:
                X[0] = 1.0

        return k

    def returns_a_built_one(N):
        return helper(N)

    assert isinstance(tegula.jit(helper), JITFunction)
    assert isinstance(tegula.jit(returns_a_built_one), JITFunction)
    assert not is_eager(returns_a_built_one) and is_eager(P.eager_gemm().fn)
    assert isinstance(tegula.jit(returns_a_built_one)(64).prim_func, tegula.language.PrimFunc)


# ---- the call path: one parse per constants and static sizes ----

class _Recorder:
    """Stands in for JITKernel (nothing can launch here): records each kernel made and
    each call, and returns the names of the outputs the launcher would return."""

    made: list = []

    def __init__(self, func, out_idx=None, **settings):
        self.func, self.out_idx, self.calls = func, out_idx or [], []
        _Recorder.made.append(self)

    def __call__(self, *inputs):
        self.calls.append(inputs)
        outs = [self.func.params[i].name for i in self.out_idx]
        return None if not outs else outs[0] if len(outs) == 1 else outs


@pytest.fixture
def made(monkeypatch):
    _Recorder.made = []
    monkeypatch.setattr(tegula.jit_eager, "JITKernel", _Recorder)
    return _Recorder.made


def test_calls_compile_once_per_constants_and_sizes(made):
    gemm = P.eager_gemm("sm_90a")
    a, b = _tensor(256, 128, dtype=H16), _tensor(128, 256, dtype=H16)
    assert gemm(a, b) == "C" and gemm(a, b) == "C" and gemm(a, B=b, block_M=128) == "C"
    assert len(made) == 1 and len(made[0].calls) == 3 and made[0].calls[0] == (a, b)
    gemm(a, b, block_M=64)  # another constant
    gemm(_tensor(256, 64, dtype=H16), _tensor(64, 256, dtype=H16))  # another K
    gemm(a, b)
    assert len(made) == 3 and len(made[0].calls) == 4
    assert [m.func.params[0].shape for m in made] == [(256, 128), (256, 128), (256, 64)]


def test_dynamic_sizes_share_one_kernel(made):
    rms_norm = P.eager_rms_norm("sm_80")
    w = _tensor(512, dtype=H16)
    for rows in (1, 7, 300):
        assert rms_norm(_tensor(rows, 512, dtype=H16), w) == "Y"
    assert len(made) == 1 and len(made[0].calls) == 3
    rms_norm(_tensor(3, 1024, dtype=H16), _tensor(1024, dtype=H16))  # another N
    assert len(made) == 2


def test_scalars_outputs_and_none(made):
    @tegula.jit(target="sm_80")
    def shift(X, n):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        n: T.int32
        Y = T.empty((N,), "float32")
        Z = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                Y[bx * 128 + i] = X[bx * 128 + i] + n
                Z[bx * 128 + i] = X[bx * 128 + i] - n
        return Z, Y

    @tegula.jit(target="sm_80")
    def zero(X):
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
            for i in T.Parallel(128):
                X[bx * 128 + i] = 0.0

    x = _tensor(1024)
    assert shift(x, 3) == ["Z", "Y"] and shift(x, 5) == ["Z", "Y"]  # a list, in `return` order (TileLang's)
    assert len(made) == 1 and made[0].calls == [(x, 3), (x, 5)]  # n is an argument, not a constant
    assert zero(x) is None and zero(x) is None and len(made) == 2


def test_compile_then_call_reuses_the_kernel(made):
    gemm = P.eager_gemm("sm_90a")
    kernel = gemm.compile(M=256, N=256, K=128)
    assert gemm.compile(M=256, N=256, K=128) is kernel
    gemm(_tensor(256, 128, dtype=H16), _tensor(128, 256, dtype=H16))
    assert len(made) == 1 and len(kernel.calls) == 1
    assert gemm.compile(_tensor(256, 128, dtype=H16), _tensor(128, 256, dtype=H16)) is kernel


def test_unhashable_constants_still_cache(made):
    @tegula.jit(target="sm_80")
    def tile_copy(X, tile=[64]):  # noqa: B006 - a list on purpose
        N = T.const("N")
        X: T.Tensor((N,), "float32")
        Y = T.empty((N,), "float32")
        with T.Kernel(T.ceildiv(N, tile[0]), threads=tile[0]) as bx:
            for i in T.Parallel(tile[0]):
                Y[bx * tile[0] + i] = X[bx * tile[0] + i]
        return Y

    x = _tensor(256)
    tile_copy(x, [64])
    tile_copy(x, tile=[64])
    tile_copy(x, [32])
    assert len(made) == 2 and len(made[0].calls) == 2


# ---- mistakes, named ----

def _add(target="sm_80"):
    @tegula.jit(target=target)
    def add(A, B, block=128):
        M, N = T.const("M N")
        A: T.Tensor((M, N), "float32")
        B: T.Tensor((M, N), "float32")
        C = T.empty((M, N), "float32")
        with T.Kernel(T.ceildiv(N, block), M, threads=block) as (bx, by):
            for i in T.Parallel(block):
                C[by, bx * block + i] = A[by, bx * block + i] + B[by, bx * block + i]
        return C

    return add


@pytest.mark.parametrize("args,pattern", [
    ((_tensor(8, 256), _tensor(8, 128)),
     r"argument 'B' dimension 1 is 128, but T.const 'N' is 256, from argument 'A' dimension 1"),
    ((_tensor(8, 256), _tensor(8, 256, 2)), r"argument 'B' has shape \(8, 256, 2\) .* declared with 2 dimension"),
    ((_tensor(8, 256), _tensor(8, 256, dtype=H16)),
     r"argument 'B' has dtype torch.float16, but it is declared float32"),
    ((_tensor(8, 256), 3), r"argument 'B' must be a tensor"),
])
def test_arguments_that_disagree_are_value_errors(args, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        _add().compile(*args)
    assert "B: T.Tensor((M, N)" in str(info.value)  # shown at the declaration


def test_call_with_a_disagreeing_shape_is_a_value_error(made):
    add = _add()
    add(_tensor(8, 256), _tensor(8, 256))
    with pytest.raises(ValueError, match=r"argument 'A' dimension 0 is 8, but T.const 'M' is 9, from the keyword M=9"):
        add(_tensor(8, 256), _tensor(8, 256), M=9)
    with pytest.raises(ValueError, match=r"argument 'B' dimension 0 is 4, but T.const 'M' is 8"):
        add(_tensor(8, 256), _tensor(4, 256))


def test_missing_and_unknown_sizes_are_named():
    with pytest.raises(ValueError, match=r"T.const 'M' has no value: give M=\.\.\. to \.compile\(\) or a tensor for "
                                         r"parameter 'A'"):
        _add().compile(block=64)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'X'"):
        _add().compile(M=8, N=256, X=3)
    with pytest.raises(TypeError, match=r"missing"):
        _add()(_tensor(8, 256))


def test_const_and_empty_outside_an_eager_function():
    with pytest.raises(RuntimeError, match=r"T.const can only be used in the body of an eager @tegula.jit"):
        T.const("M")
    with pytest.raises(RuntimeError, match=r"T.empty can only be used in the body of an eager @tegula.jit"):
        T.empty((4, 4), "float32")
    with pytest.raises(tegula.TegulaCompileError, match=r"T.const can only be used") as info:
        @T.prim_func
        def lazy_body(X: T.Tensor((4,), "float32")):
            with T.Kernel(1) as bx:
                X[0] = T.const("M")
    assert 'T.const("M")' in str(info.value)


def test_out_idx_is_refused_on_an_eager_function():
    with pytest.raises(ValueError, match=r"out_idx is for functions that return a T.prim_func"):
        @tegula.jit(out_idx=[-1])
        def f(A):
            A: T.Tensor((4,), "float32")
            with T.Kernel(1) as bx:
                A[0] = 1.0


def _compile_error(fn, pattern, **sizes):
    """The message of the compile error fn gives (which must match pattern)."""
    with pytest.raises(tegula.TegulaCompileError, match=pattern) as info:
        tegula.jit(target="sm_80")(fn).compile(**sizes)
    return str(info.value)


def test_body_mistakes_point_at_their_line():
    def not_returned(X):
        X: T.Tensor((64,), "float32")
        Y = T.empty((64,), "float32")
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                Y[i] = X[i]

    def returns_an_input(X):
        X: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                X[i] = 0.0
        return X

    def empty_in_kernel(X):
        X: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as bx:
            Y = T.empty((64,), "float32")

    def const_used_early(X):
        N = T.const("N")
        blocks = N // 64
        X: T.Tensor((N,), "float32")
        with T.Kernel(blocks, threads=64) as bx:
            X[bx] = 0.0

    def declared_in_kernel(X):
        with T.Kernel(1, threads=64) as bx:
            X: T.Tensor((64,), "float32")

    assert "Y = T.empty" in _compile_error(not_returned, r"T.empty tensor 'Y' is never returned")
    assert "return X" in _compile_error(returns_an_input, r"returns only tensors made by T.empty")
    assert "Y = T.empty" in _compile_error(empty_in_kernel, r"before the `with T.Kernel")
    assert "blocks = N // 64" in _compile_error(const_used_early, r"T.const 'N' has no value yet")
    assert "X: T.Tensor" in _compile_error(declared_in_kernel, r"declare parameter 'X' before the `with T.Kernel")


def test_a_tensor_for_an_undeclared_parameter_is_named(made):
    @tegula.jit(target="sm_80")
    def f(A, B):
        A: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as bx:
            for i in T.Parallel(64):
                A[i] = 0.0

    with pytest.raises(ValueError, match=r"argument 'B' is a tensor, but parameter 'B' is not declared"):
        f(_tensor(64), _tensor(64))


def test_a_const_may_be_used_before_the_annotation_that_gives_it():
    """TileLang's split-K example computes `K // split_k` ahead of `A: T.Tensor((M, K))`."""
    import torch
    from tegula.testing import reference

    @tegula.jit(target="sm_90a")
    def splitk(A, B, C, block_M, block_N, block_K, split_k):
        M, N, K = T.const("M, N, K")
        part = K // split_k
        A: T.Tensor((M, K), T.float16)
        B: T.Tensor((K, N), T.float16)
        C: T.Tensor((M, N), T.float32)
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), split_k, threads=128) as (bx, by, bz):
            a = T.alloc_shared((block_M, block_K), T.float16)
            b = T.alloc_shared((block_K, block_N), T.float16)
            c = T.alloc_fragment((block_M, block_N), T.float32)
            T.clear(c)
            for ko in T.Pipelined(T.ceildiv(part, block_K), num_stages=0):
                T.copy(A[by * block_M, bz * part + ko * block_K], a)
                T.copy(B[bz * part + ko * block_K, bx * block_N], b)
                T.gemm(a, b, c)
            for i, j in T.Parallel(block_M, block_N):
                T.atomic_add(C[by * block_M + i, bx * block_N + j], c[i, j])

    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(64, 128, generator=gen).half(), torch.randn(128, 64, generator=gen).half()
    c = torch.zeros(64, 64)
    kernel = splitk.compile(a, b, c, block_M=64, block_N=64, block_K=32, split_k=2)
    reference(kernel, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-4, atol=1e-4)


# ---- T.ptr, T.make_tensor and par_compile ----

def test_pointer_parameters_are_tensors_of_make_tensor():
    kernel = P.pointer_gemm(target="sm_90a").compile(T.ptr(), T.ptr(), T.ptr(), 128, 64, 64, T.float16, T.float32)
    assert [(p.name, p.shape, p.dtype_name) for p in kernel.params] == [
        ("A", (128, 64), "float16"), ("B", (64, 64), "float16"), ("C", (128, 64), "float32")]
    assert kernel.num_inputs == 3  # written in place: no output


@pytest.mark.parametrize("run", [tt.reference, tt.simulate], ids=["reference", "simulate"])
@pytest.mark.parametrize("n", [128, 200])
def test_pointer_kernel_agrees_with_torch(run, n):
    kernel = P.pointer_scale(target="sm_90a").compile(T.ptr(), T.ptr(), n)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    y = torch.zeros(n)
    run(kernel, x, y)
    torch.testing.assert_close(y, x * 2 + 1)


def test_pointer_gemm_agrees_with_torch_in_the_reference():
    kernel = P.pointer_gemm(target="sm_90a").compile(T.ptr(), T.ptr(), T.ptr(), 64, 64, 32, T.float16, T.float32)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(64, 32, generator=gen).half()
    b = torch.randn(32, 64, generator=gen).half()
    c = torch.zeros(64, 64)
    tt.reference(kernel, a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), atol=1e-3, rtol=1e-3)


def test_pointer_mistakes_are_named():
    @tegula.jit(target="sm_90a")
    def never_made(x: T.ptr, n: int):
        with T.Kernel(1, threads=32):
            T.evaluate(0)

    with pytest.raises(tegula.TegulaCompileError, match="'x' is a T.ptr that is never made a tensor"):
        never_made.compile(T.ptr(), 4)

    @tegula.jit(target="sm_90a")
    def used_early(x: T.ptr, n: int):
        with T.Kernel(1, threads=32):
            x[0] = 1.0

    with pytest.raises(tegula.TegulaCompileError, match="'x' is a T.ptr: make it a tensor first"):
        used_early.compile(T.ptr(), 4)

    @tegula.jit(target="sm_90a")
    def wrong_dtype(x: T.ptr(T.float16), n: int):
        x = T.make_tensor(x, (n,), T.float32)
        with T.Kernel(1, threads=32):
            x[0] = 1.0

    with pytest.raises(tegula.TegulaCompileError, match=r"T.ptr\(float16\), the tensor float32"):
        wrong_dtype.compile(T.ptr(), 4)
    with pytest.raises(ValueError, match="storage_scope"):
        T.ptr(storage_scope="shared")


def test_par_compile_builds_each_configuration():
    gemm = P.pointer_gemm(target="sm_90a")
    configs = [{"A": T.ptr(), "B": T.ptr(), "C": T.ptr(), "M": 128, "N": 128, "K": 64, "dtype": dtype,
                "out_dtype": T.float32} for dtype in (T.float16, T.bfloat16)]
    kernels = gemm.par_compile(configs, num_workers=2)
    assert [k.params[0].dtype_name for k in kernels] == ["float16", "bfloat16"]
    assert all(k.cubin() for k in kernels)
    assert gemm.compile(**configs[0]) is kernels[0]  # cached as the call would be
    with pytest.raises(ValueError, match=r"configs\[0\] must be a dict"):
        gemm.par_compile([[1, 2]])
    with pytest.raises(ValueError, match="num_workers"):
        gemm.par_compile(configs, num_workers=0)


def test_module_par_compile_takes_prim_funcs():
    funcs = [P.pointer_scale(target="sm_90a").get_tir(T.ptr(), T.ptr(), n) for n in (128, 300)]
    kernels = tegula.par_compile(funcs, target="sm_90a")
    assert [k.params[0].shape for k in kernels] == [(128,), (300,)]
    with pytest.raises(TypeError, match=r"funcs\[0\] must be a T.prim_func"):
        tegula.par_compile(["not a function"])
    with pytest.warns(UserWarning, match="failed to compile"):
        assert tegula.par_compile([funcs[0]], target="sm_70x", ignore_error=True) == [None]


def test_assert_on_one_dynamic_size_read_twice():
    @T.macro
    def copy_checked(A, B):
        M, N = A.shape
        M_, N_ = B.shape
        assert M == M_, f"M mismatch {M} {M_}"
        assert not (N != N_)
        with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
            for i in T.Parallel(32):
                for j in T.serial(N):
                    if bx * 32 + i < M:
                        B[bx * 32 + i, j] = A[bx * 32 + i, j]

    @tegula.jit(target="sm_90a")
    def copy(A, B):
        M = T.dynamic("M")
        N = T.const("N")
        A: T.Tensor[[M, N], T.float32]
        B: T.Tensor[[M, N], T.float32]
        copy_checked(A, B)

    kernel = copy.compile(T.Tensor((50, 4)), T.Tensor((50, 4)))
    a = torch.randn(50, 4)
    b = torch.zeros(50, 4)
    tt.reference(kernel, a, b)
    torch.testing.assert_close(b, a)

    @tegula.jit(target="sm_90a")
    def mismatched(A, B):
        M, K = T.dynamic("M, K")
        A: T.Tensor[[M], T.float32]
        B: T.Tensor[[K], T.float32]
        assert M == K
        with T.Kernel(1, threads=32):
            B[0] = A[0]

    with pytest.raises(tegula.TegulaCompileError, match="assert needs a Python value"):
        mismatched.compile(T.Tensor((8,)), T.Tensor((8,)))
