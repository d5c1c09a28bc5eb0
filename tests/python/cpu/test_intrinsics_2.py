"""TileLang's thread intrinsics and reduction options without a GPU: T.assume, T.Select,
T.align_up, T.sigmoid / T.tanh, T.clamp(min_val=, max_val=), T.__ldg, T.reduce_max /
reduce_min(nan_propagate=), T.any_of / T.all_of, warp votes and T.warp_reduce_*,
T.match_any_sync / T.match_all_sync, T.__fns, T.sync_threads(id, n), T.pdl_trigger /
T.pdl_sync. Each program compiles with NVRTC for
sm_80 and sm_90a, and the reference (where it can model the program) and the simulator
agree with torch on fresh random inputs, outputs poisoned."""
import math

import pytest
import torch

import tegula
import tegula.language as T
import tegula.testing as tt

TARGETS = ["sm_90a", "sm_80"]


def compiles(kernel):
    assert kernel.cubin()[:4] == b"\x7fELF"
    return kernel.get_kernel_source()


def both(kernel, *args, reference=True):
    """The simulator's outputs, and the reference's where it can run the program."""
    outs = [tt.simulate(kernel, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args])]
    if reference:
        outs.append(tt.reference(kernel, *[a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
    return outs


# ------------------------------------------------------------------ scalar names

def scalar_names(N, target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((N,), "float32"), Y: T.Tensor((6, N), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    j = bx * 128 + i
                    T.assume(j >= 0)
                    if j < N:
                        x = T.__ldg(X[j])
                        Y[0, j] = T.Select(x > 0, x, 0.5 * x)
                        Y[1, j] = T.sigmoid(x)
                        Y[2, j] = T.tanh(x)
                        Y[3, j] = T.clamp(x, min_val=-0.5, max_val=0.25)
                        Y[4, j] = T.clamp(x, max_val=0.0) + T.clamp(T.__ldg(X, j), min_val=1.0)
                        Y[5, j] = T.cast(T.align_up(j, 16), "float32")
        return f
    return program()


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_names(target):
    N = 300
    k = scalar_names(N, target)
    compiles(k)
    x = torch.randn(N) * 2
    j = torch.arange(N, dtype=torch.float64)
    xd = x.double()
    want = torch.stack([torch.where(xd > 0, xd, 0.5 * xd), torch.sigmoid(xd), torch.tanh(xd), xd.clamp(-0.5, 0.25),
                        xd.clamp(max=0.0) + xd.clamp(min=1.0), torch.ceil(j / 16) * 16])
    for out in both(k, x):
        torch.testing.assert_close(out.double(), want, rtol=2e-6, atol=2e-6)


def test_scalar_names_fold_in_python():
    assert T.align_up(100, 16) == 112
    assert T.Select(True, 1, 2) == 1
    assert T.clamp(5, min_val=0, max_val=3) == 3 and T.clamp(-1, min_val=0) == 0
    assert abs(T.sigmoid(0.0) - 0.5) < 1e-12 and abs(T.tanh(1.0) - math.tanh(1.0)) < 1e-12


# ------------------------------------------------------------------ nan_propagate

def reduce_program(kind, dtype, nan_propagate, clear, target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        fn = {"max": T.reduce_max, "min": T.reduce_min, "absmax": T.reduce_absmax}[kind]
        kwargs = {} if nan_propagate is None else {"nan_propagate": nan_propagate}

        @T.prim_func
        def f(A: T.Tensor((4, 64), dtype), Out: T.Tensor((4,), dtype)):
            with T.Kernel(1, threads=32):
                frag = T.alloc_fragment((4, 64), dtype)
                out = T.alloc_fragment((4,), dtype)
                T.copy(A, frag)
                if not clear:
                    T.fill(out, -1.0)
                fn(frag, out, dim=1, clear=clear, **kwargs)
                T.copy(out, Out)
        return f
    return program()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
@pytest.mark.parametrize("nan_propagate", [None, True, False])
def test_reduce_nan_propagate(target, dtype, kind, nan_propagate):
    tdt = getattr(torch, dtype)
    a = torch.randn(4, 64).to(tdt)
    a[0, 7] = float("nan")
    a[2, :] = float("nan")  # every element NaN: NaN either way
    for clear in (True, False):
        k = reduce_program(kind, dtype, nan_propagate, clear, target)
        if clear:
            src = compiles(k)
            assert ("max_num" in src or "min_num" in src) == (nan_propagate is False)
        d = a.double()
        if kind == "absmax":
            d = d.abs()
        red = {"max": torch.amax, "absmax": torch.amax, "min": torch.amin}[kind]
        if nan_propagate is False:
            fill = -math.inf if kind != "min" else math.inf
            want = red(torch.where(d.isnan(), torch.full_like(d, fill), d), dim=1)
            want[2] = {"max": -math.inf, "min": math.inf, "absmax": 0.0}[kind]  # the identity
        else:
            want = red(d, dim=1)
        if not clear:
            prev = torch.full_like(want, -1.0)
            if nan_propagate is False:
                want = torch.where(want.isnan(), prev, want)
            want = torch.maximum(want, prev) if kind != "min" else torch.minimum(want, prev)
        for out in both(k, a):
            torch.testing.assert_close(out.double(), want.to(tdt).double(), equal_nan=True, rtol=0, atol=0)


def test_nan_propagate_is_for_max_and_min():
    with pytest.raises(tegula.TegulaCompileError, match="unexpected keyword argument 'nan_propagate'"):
        @T.prim_func
        def f(A: T.Tensor((64,), "float32"), Out: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32):
                frag = T.alloc_fragment((64,), "float32")
                out = T.alloc_fragment((1,), "float32")
                T.copy(A, frag)
                T.reduce_sum(frag, out, nan_propagate=True)
                T.copy(out, Out)


# ------------------------------------------------------------------ any_of / all_of

def any_all_program(target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(Mask: T.Tensor((16, 8), "bool"), V: T.Tensor((16, 8), "int32"), Out: T.Tensor((16, 4), "int32")):
            with T.Kernel(16, threads=32) as bx:
                v = T.alloc_local((8,), "int32")
                for j in T.serial(8):
                    v[j] = V[bx, j]
                Out[bx, 0] = T.any_of(Mask[bx, :])
                Out[bx, 1] = T.all_of(Mask[bx, :])
                Out[bx, 2] = T.any_of(v)
                Out[bx, 3] = T.all_of(v[2:6])
        return f
    return program()


@pytest.mark.parametrize("target", TARGETS)
def test_any_of_all_of(target):
    k = any_all_program(target)
    compiles(k)
    mask = torch.rand(16, 8) < 0.2
    mask[3] = True
    mask[4] = False
    v = (torch.rand(16, 8) < 0.7).int() * torch.randint(1, 9, (16, 8), dtype=torch.int32)
    v[5] = 0
    v[6] = 3
    want = torch.stack([mask.any(1), mask.all(1), (v != 0).any(1), (v[:, 2:6] != 0).all(1)], dim=1).int()
    for out in both(k, mask, v):
        assert torch.equal(out, want)


# ------------------------------------------------------------------ warps

def warp_program(dtype, threads, target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((threads,), dtype), Y: T.Tensor((5, threads), dtype)):
            with T.Kernel(1, threads=threads):
                tx = T.get_thread_binding()
                x = T.alloc_var(dtype)
                x = X[tx]
                Y[0, tx] = T.warp_reduce_sum(x)
                Y[1, tx] = T.warp_reduce_max(x)
                Y[2, tx] = T.warp_reduce_min(x)
                if dtype == "int32":
                    Y[3, tx] = T.warp_reduce_bitand(x)
                    Y[4, tx] = T.warp_reduce_bitor(x)
                else:
                    Y[3, tx] = 0
                    Y[4, tx] = 0
        return f
    return program()


def butterfly_sum(w):
    """The device library's order: distances 16, 8, 4, 2, 1, in float32."""
    lanes = w.clone()
    for d in (16, 8, 4, 2, 1):
        lanes = lanes + lanes[torch.arange(32) ^ d]
    return lanes


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_warp_reduce(target, dtype):
    threads = 64
    k = warp_program(dtype, threads, target)
    src = compiles(k)
    assert "warp_reduce_sum(" in src
    if dtype == "float32":
        x = torch.randn(threads)
    else:
        x = torch.randint(0, 100, (threads,), dtype=torch.int32)
    out = tt.simulate(k, x)
    for w in range(threads // 32):
        part = x[32 * w:32 * w + 32]
        if dtype == "float32":
            torch.testing.assert_close(out[0, 32 * w:32 * w + 32], butterfly_sum(part), rtol=0, atol=0)
        else:
            assert torch.all(out[0, 32 * w:32 * w + 32] == part.sum())
            a, o = part[0].item(), part[0].item()
            for v in part.tolist():
                a, o = a & v, o | v
            assert torch.all(out[3, 32 * w:32 * w + 32] == a) and torch.all(out[4, 32 * w:32 * w + 32] == o)
        assert torch.all(out[1, 32 * w:32 * w + 32] == part.max())
        assert torch.all(out[2, 32 * w:32 * w + 32] == part.min())
    # The reference is one logical thread per block: it refuses, it does not guess.
    with pytest.raises(Exception, match="cannot run"):
        tt.reference(k, x)


def vote_program(target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((64,), "int32"), Y: T.Tensor((6, 64), "int64")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                p = X[tx] > 0
                Y[0, tx] = T.any_sync(p)
                Y[1, tx] = T.all_sync(p)
                if tx % 32 < 16:  # the callers of a masked vote are the mask's lanes
                    Y[2, tx] = T.ballot_sync(p, 0x0000FFFF)
                else:
                    Y[2, tx] = 7
                Y[3, tx] = T.ballot(X[tx])
                T.sync_warp()  # the warp runs converged again after the branch
                Y[4, tx] = T.activemask()
                Y[5, tx] = T.any_sync(X[tx] > 5, mask=0xFFFFFFFF)
        return f
    return program()


@pytest.mark.parametrize("target", TARGETS)
def test_warp_votes(target):
    k = vote_program(target)
    src = compiles(k)
    assert "((unsigned long long)__ballot_sync(" in src and "__any_sync(" in src and "tegula::any_sync" not in src
    x = torch.randint(-3, 8, (64,), dtype=torch.int32)
    x[32:64] = torch.randint(1, 8, (32,), dtype=torch.int32)  # warp 1: every predicate true
    out = tt.simulate(k, x)
    for w in range(2):
        part = x[32 * w:32 * w + 32]
        bits = sum(1 << l for l in range(32) if part[l] > 0)
        nonzero = sum(1 << l for l in range(32) if part[l] != 0)
        seg = slice(32 * w, 32 * w + 32)
        assert torch.all((out[0, seg] != 0) == bool((part > 0).any()))
        assert torch.all((out[1, seg] != 0) == bool((part > 0).all()))
        assert torch.all(out[2, 32 * w:32 * w + 16] == bits & 0xFFFF) and torch.all(out[2, 32 * w + 16:32 * w + 32] == 7)
        assert torch.all(out[3, seg] == nonzero)
        assert torch.all(out[4, seg] == 0xFFFFFFFF)
        assert torch.all((out[5, seg] != 0) == bool((part > 5).any()))


def match_program(target, dtype):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((64,), dtype), Y: T.Tensor((4, 64), "int64")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                Y[0, tx] = T.match_any_sync(X[tx])
                Y[1, tx] = T.match_all_sync(X[tx])
                if tx % 32 >= 8:  # a masked match: its callers are the mask's lanes
                    Y[2, tx] = T.match_any_sync(X[tx], 0xFFFFFF00)
                else:
                    Y[2, tx] = 5
                T.sync_warp()
                # the (tx % 5 + 1)-th set bit of the lanes holding X > 0, from bit tx % 7
                Y[3, tx] = T.__fns(T.cast(T.ballot_sync(X[tx] > 0), "uint32"), tx % 7, tx % 5 - 2)
        return f
    return program()


def expected_matches(x):
    """What match_program writes, lane by lane, from CUDA's definitions."""
    y = torch.zeros(4, 64, dtype=torch.int64)
    for w in range(2):
        part = [x[32 * w + l].item() for l in range(32)]
        for l in range(32):
            t = 32 * w + l
            peers = sum(1 << o for o in range(32) if part[o] == part[l])
            y[0, t] = peers
            y[1, t] = 0xFFFFFFFF if len(set(part)) == 1 else 0
            y[2, t] = peers & 0xFFFFFF00 if l >= 8 else 5
            mask = sum(1 << o for o in range(32) if part[o] > 0)
            base, offset = t % 7, t % 5 - 2
            found = 0xFFFFFFFF
            if offset == 0:
                found = base if mask >> base & 1 else found
            else:
                pos, count = base, abs(offset) - 1
                while 0 <= pos < 32:
                    if mask >> pos & 1:
                        if count == 0:
                            found = pos
                            break
                        count -= 1
                    pos += 1 if offset > 0 else -1
            y[3, t] = found
    return y


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int32", "float32", "int64", "float64"])
def test_warp_match_and_fns(target, dtype):
    k = match_program(target, dtype)
    src = compiles(k)
    assert "__match_any_sync(4294967295u, " in src and "__match_all_sync(4294967295u, " in src
    assert "&tegula_match_all)" in src and "__fns(" in src
    x = torch.randint(0, 3, (64,)).to(getattr(torch, dtype))
    x[32:64] = 2  # warp 1: every lane the same value
    torch.testing.assert_close(tt.simulate(k, x), expected_matches(x), rtol=0, atol=0)


def test_warp_match_refuses_a_16_bit_value():
    with pytest.raises(tegula.TegulaCompileError, match="32- or 64-bit integer or float"):
        @T.prim_func
        def f(X: T.Tensor((32,), "float16"), Y: T.Tensor((32,), "int32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                Y[tx] = T.match_any_sync(X[tx])

        tegula.compile(f, target="sm_80")


def test_ldg_reads_through_the_read_only_cache():
    src = scalar_names(300, "sm_80").get_kernel_source()
    assert "__ldg(&(X[" in src


def test_a_warp_call_with_lanes_missing_is_reported():
    @tegula.jit(out_idx=[-1], target="sm_80")
    def program():
        @T.prim_func
        def f(X: T.Tensor((32,), "float32"), Y: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                Y[tx] = 0.0
                if tx < 16:
                    Y[tx] = T.warp_reduce_sum(X[tx])
        return f

    with pytest.raises(tt.SimulationError, match="inactive or missing"):
        tt.simulate(program(), torch.randn(32))


def test_vote_predicates_must_be_integers():
    with pytest.raises(tegula.TegulaCompileError, match="requires an integer or boolean predicate"):
        @T.prim_func
        def f(X: T.Tensor((32,), "float32"), Y: T.Tensor((32,), "int32")):
            with T.Kernel(1, threads=32):
                tx = T.get_thread_binding()
                Y[tx] = T.any_sync(X[tx])


# ------------------------------------------------------------------ barriers and launch order

def barrier_program(target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                s = T.alloc_shared((128,), "float32")
                T.pdl_sync()
                for i in T.Parallel(128):
                    s[i] = X[i] * 2.0
                T.sync_threads(3)
                for i in T.Parallel(128):
                    Y[i] = s[127 - i]
                T.sync_threads(1, 128)
                T.sync_threads()
                T.pdl_trigger()
        return f
    return program()


@pytest.mark.parametrize("target", TARGETS)
def test_named_barriers_and_pdl(target):
    k = barrier_program(target)
    src = compiles(k)
    assert "barrier_sync(3, 128)" in src and "barrier_sync(1, 128)" in src
    # CUDA's own names (warp.h defines them for NVRTC); no __restrict__ where the kernel
    # waits on the one before it.
    assert "cudaGridDependencySynchronize()" in src and "cudaTriggerProgrammaticLaunchCompletion()" in src
    assert "__restrict__" not in src
    x = torch.randn(128)
    for out in both(k, x):
        torch.testing.assert_close(out, x.flip(0) * 2, rtol=0, atol=0)


@pytest.mark.parametrize("args,match", [((16,), "named barriers 0..15"), ((1, 48), "multiple of 32"),
                                        ((1, 256), "multiple of 32")])
def test_sync_threads_arguments_are_checked(args, match):
    with pytest.raises(tegula.TegulaCompileError, match=match):
        @T.prim_func
        def f(X: T.Tensor((128,), "float32")):
            with T.Kernel(1, threads=128):
                T.sync_threads(*args)


# ------------------------------------------------------------------ random numbers

def rand_program(M, seed, generator, target, draws=6, off=5):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(A: T.Tensor((M, draws), "uint32"), U: T.Tensor((M, draws), "float32")):
            with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
                tx = T.get_thread_binding()
                T.rng_init(seed, off=off, generator=generator)  # seq: tx + bx * 32
                for j in T.serial(draws):
                    if bx * 32 + tx < M:
                        A[bx * 32 + tx, j] = T.rng_rand()
                if bx * 32 + tx < M:
                    U[bx * 32 + tx, 0] = T.rng_rand_float()
                    U[bx * 32 + tx, 1] = T.rng_rand_float(dist="normal")
                    U[bx * 32 + tx, 2] = T.cast(T.rng_rand_float(bit=64), "float32")
                    U[bx * 32 + tx, 3] = T.cast(T.rng_rand_float(bit=64, dist="normal"), "float32")
                    for j in T.serial(draws - 4):
                        U[bx * 32 + tx, j + 4] = T.rng_rand_float()
        return f
    return program()


M32 = 0xFFFFFFFF


def philox_draws(seed, seq, off, count):
    """curand's Philox4x32-10 stream after curand_init(seed, seq, off), in Python."""
    out = []
    for m in range(off, off + count):
        ctr = (seq << 64) + m // 4
        c = [(ctr >> (32 * w)) & M32 for w in range(4)]
        k0, k1 = seed & M32, (seed >> 32) & M32
        for _ in range(10):
            p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
            c = [((p1 >> 32) ^ c[1] ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k1) & M32, p0 & M32]
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        out.append(c[m % 4])
    return out


def expected_draws(M, seed, off=5):
    """What rand_program's threads draw: A's six words, and U's uniforms (columns 0, 2, 4, 5)
    and normals (1, 3) as curand computes them from the same words."""
    A = torch.zeros(M, 6, dtype=torch.int64)
    U = torch.zeros(M, 6, dtype=torch.float64)
    inv32, inv53 = 2.3283064365386963e-10, 1.1102230246251565e-16
    for g in range(M):
        w = philox_draws(seed, g, off, 16)
        A[g] = torch.tensor(w[:6])
        U[g, 0] = w[6] * inv32 + inv32 / 2
        u, v = w[7] * inv32 + inv32 / 2, w[8] * inv32 * 6.2831855 + inv32 * 6.2831855 / 2
        U[g, 1] = math.sin(v) * math.sqrt(-2 * math.log(u))
        U[g, 2] = w[9] * inv32 + inv32 / 2
        zx, zy = w[10] ^ (w[11] << 21), w[12] ^ (w[13] << 21)
        u, v = zx * inv53 + inv53 / 2, zy * inv53 * 2 + inv53
        U[g, 3] = math.sin(math.pi * v) * math.sqrt(-2 * math.log(u))
        U[g, 4] = w[14] * inv32 + inv32 / 2
        U[g, 5] = w[15] * inv32 + inv32 / 2
    return A, U


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("generator", ["curandStatePhilox4_32_10_t", "curandStateMRG32k3a_t", "curandStateXORWOW_t"])
def test_random_numbers(target, generator):
    M, seed = 70, 42
    k = rand_program(M, seed, generator, target)
    src = compiles(k)
    assert "tegula::Philox tegula_rng;" in src and "tegula_rng.init(" in src and "tegula_rng.normal_double()" in src
    A = torch.full((M, 6), 7, dtype=torch.uint32)
    U = tt.simulate(k, A)
    want_a, want_u = expected_draws(M, seed)
    assert torch.equal(A.to(torch.int64), want_a)
    torch.testing.assert_close(U.double(), want_u, rtol=2e-6, atol=2e-6)
    with pytest.raises(tegula.TegulaCompileError, match="cannot run"):
        tt.reference(k, torch.empty(M, 6, dtype=torch.uint32))


def test_many_unrolled_draws_compile_in_seconds():
    """TileLang's rand test: one thread, five T.Parallel(128) loops of draws, so 640 draw
    sites once the slots are unrolled. With the draws inlined NVRTC took 75 to 130 s; they
    are calls (random.h), a few seconds. The bound leaves room for a loaded machine."""
    import time

    M, per = 256, 128

    @T.prim_func
    def many(A: T.Tensor((M,), "uint32"), B: T.Tensor((M,), "float32"), C: T.Tensor((M,), "float64"),
             D: T.Tensor((M,), "float32"), E: T.Tensor((M,), "float64")):
        with T.Kernel(T.ceildiv(M, per), threads=1) as bx:
            T.rng_init(7, 0, bx * per)
            for i, j in T.Parallel(1, per):
                A[bx * per + j] = T.rng_rand()
            for i, j in T.Parallel(1, per):
                B[bx * per + j] = T.rng_rand_float()
            for i, j in T.Parallel(1, per):
                C[bx * per + j] = T.rng_rand_float(bit=64)
            for i, j in T.Parallel(1, per):
                D[bx * per + j] = T.rng_rand_float(dist="normal")
            for i, j in T.Parallel(1, per):
                E[bx * per + j] = T.rng_rand_float(bit=64, dist="normal")

    tegula.disable_cache()
    try:
        start = time.perf_counter()
        assert tegula.compile(many, target="sm_90a").cubin()
        assert time.perf_counter() - start < 40
    finally:
        tegula.enable_cache()


def test_random_numbers_need_one_generator_and_an_init():
    @T.prim_func
    def no_init(A: T.Tensor((32,), "uint32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            A[tx] = T.rng_rand()

    with pytest.raises(tegula.TegulaCompileError, match="calls no T.rng_init"):
        tegula.compile(no_init, target="sm_80")

    @T.prim_func
    def two(A: T.Tensor((32,), "uint32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            T.rng_init(1)
            T.rng_init(2, generator="curandStateXORWOW_t")
            A[tx] = T.rng_rand()

    with pytest.raises(tegula.TegulaCompileError, match="one generator"):
        tegula.compile(two, target="sm_80")


# ------------------------------------------------------------------ T.assume

def assume_program(target, with_assume):
    N = T.dynamic("N")

    @tegula.jit(target=target)
    def program():
        @T.prim_func
        def f(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), l: T.int32, r: T.int32):
            with T.Kernel(1, threads=32):
                for i in T.serial(r - l + 1):
                    if with_assume:
                        T.assume(l + i >= 0 and l + i < N)
                    A[l + i] = 0
                if with_assume:
                    T.assume(l >= 0 and l < N)
                B[l] = 1.0
        return f
    return program()


@pytest.mark.parametrize("target", TARGETS)
def test_assume_drops_the_checks_it_implies(target):
    src = compiles(assume_program(target, True))
    assert "if (" not in src and "__builtin_assume(" in src
    assert "if (" in assume_program(target, False).get_kernel_source()
    k = assume_program(target, True)
    a, b = torch.randn(50), torch.randn(50)
    for run in (tt.simulate, tt.reference):
        a2, b2 = a.clone(), b.clone()
        run(k, a2, b2, 3, 17)
        want = a.clone()
        want[3:18] = 0
        assert torch.equal(a2, want) and b2[3] == 1 and torch.equal(b2[4:], b[4:])
    # Broken, the promise lets the kernel write past the tensor: the simulator says which.
    with pytest.raises(tt.SimulationError, match="does not hold"):
        tt.simulate(k, a.clone(), b.clone(), 40, 60)


# ------------------------------------------------------------------ shuffles, __syncwarp, __ffs

def shuffle_program(target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((64,), "float16"), Y: T.Tensor((6, 64), "float32")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                x = T.alloc_var("float16")
                x = X[tx]
                T.sync_warp()
                Y[0, tx] = T.shfl_sync(x, 5)
                Y[1, tx] = T.shfl_xor(x, 3, width=4)
                Y[2, tx] = T.shfl_down(x, 2, width=8)
                Y[3, tx] = T.shfl_up(x, delta=1)
                Y[4, tx] = T.shfl_sync(x, tx + 9, width=16)
                Y[5, tx] = T.__ffs(T.cast(tx * 12, "int32")) + T.__ffs(T.cast(tx, "int64") * 4294967296)
        return f
    return program()


def expected_shuffles(x):
    y = torch.zeros(6, 64, dtype=torch.float64)
    for t in range(64):
        lane, base = t % 32, t - t % 32

        def at(src):
            return float(x[base + src])
        y[0, t] = at(5)
        y[1, t] = at(lane ^ 3)
        y[2, t] = at(lane + 2 if lane % 8 + 2 < 8 else lane)
        y[3, t] = at(lane - 1 if lane >= 1 else lane)
        y[4, t] = at((lane & ~15) + (lane + 9) % 16)

        def ffs(v):
            return (v & -v).bit_length()
        y[5, t] = ffs(t * 12) + ffs(t << 32)
    return y


@pytest.mark.parametrize("target", TARGETS)
def test_shuffles_sync_warp_ffs(target):
    k = shuffle_program(target)
    src = compiles(k)
    assert "shfl_idx(" in src and "sync_warp(" in src and "__ffs((int)(" in src and "__ffsll((long long)(" in src
    x = torch.randn(64).half()
    torch.testing.assert_close(tt.simulate(k, x).double(), expected_shuffles(x), rtol=0, atol=0)


# ------------------------------------------------------------------ block votes, thread index helpers

def block_vote_program(target):
    @tegula.jit(out_idx=[-1], target=target)
    def program():
        @T.prim_func
        def f(X: T.Tensor((256,), "int32"), Y: T.Tensor((7, 256), "int32")):
            with T.Kernel(1, threads=256):
                tx = T.get_thread_binding()
                Y[0, tx] = T.syncthreads_count(X[tx] > 0)
                Y[1, tx] = T.syncthreads_and(X[tx] > -100)
                Y[2, tx] = T.syncthreads_or(X[tx] > 5)
                Y[3, tx] = T.get_lane_idx()
                Y[4, tx] = T.get_warp_idx() + T.get_warp_idx_sync(16) * 100
                Y[5, tx] = T.get_warp_group_idx()
                Y[6, tx] = T.get_warp_group_idx(32, 2)
        return f
    return program()


def expected_block_votes(x):
    t = torch.arange(256)
    n = int((x > 0).sum())
    return torch.stack([torch.full((256,), n), torch.full((256,), int(bool((x > -100).all()))),
                        torch.full((256,), int(bool((x > 5).any()))), t % 32, t // 32 + (t // 16) * 100,
                        t // 128, t // 64]).int()


@pytest.mark.parametrize("target", TARGETS)
def test_block_votes_and_thread_index_helpers(target):
    k = block_vote_program(target)
    src = compiles(k)
    assert "__syncthreads_count(" in src
    x = torch.randint(-10, 6, (256,), dtype=torch.int32)
    assert torch.equal(tt.simulate(k, x), expected_block_votes(x))


@pytest.mark.parametrize("extent,threads", [(64, 256), (0, 128), (32, 96)])
def test_shuffle_elect_picks_the_first_thread_of_each_group(extent, threads):
    from thread_index_programs import leaders_program

    out = tt.simulate(tegula.compile(leaders_program(extent, threads), out_idx=[0], target="sm_90a"))
    idx = torch.arange(threads)
    assert torch.equal(out, ((idx == 0) if extent == 0 else (idx % extent == 0)).to(torch.int32))


def test_hip_is_never_available():
    from tegula.rocm.target import check_hip_availability

    assert check_hip_availability() is False


def test_thread_binding_is_the_blocks_thread_index():
    from thread_index_programs import mark_program

    out = tt.simulate(tegula.compile(mark_program(), out_idx=[0], target="sm_90a"))
    assert torch.equal(out, torch.arange(128, dtype=torch.int32) * 2)

    def other_axis(thread):
        @T.prim_func
        def f(A: T.Tensor((128,), "int32")):
            with T.Kernel(1, threads=128) as bx:
                ty = T.thread_binding(128, thread=thread)
                A[ty] = 1

    # A one-dimensional block has one thread along y: the axis exists, with extent 1.
    with pytest.raises(tegula.TegulaCompileError, match=r"along threadIdx.y, \[0, 1\); got \[0, 128\)"):
        other_axis("threadIdx.y")
    with pytest.raises(tegula.TegulaCompileError, match="thread must be 'threadIdx.x', 'threadIdx.y' or 'threadIdx.z'"):
        other_axis("threadIdx.w")
