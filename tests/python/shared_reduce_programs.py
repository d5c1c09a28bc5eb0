"""Reductions whose source or destination is shared memory (TileLang's meaning: the op
stages a shared side through a fragment), shared by cpu/test_shared_reduce.py and
gpu/test_shared_reduce_gpu.py, with torch references in float64."""
import torch

import tegula.language as T

KINDS = ("sum", "abssum", "max", "absmax", "min")


def alloc(scope, shape, dtype):
    return T.alloc_shared(shape, dtype) if scope == "shared" else T.alloc_fragment(shape, dtype)


def tile_program(M, N, dim, kind, src_scope, dst_scope, clear=True, threads=128, dtype="float32"):
    """B = C (op) the reduction of 2*A along dim, A staged in `src_scope`, the result in
    `dst_scope`; C only counts with clear=False. The source is written by a loop of its
    own and the result read back by another, each with its own layout, so a shared side is
    written by some threads and read by others (barriers)."""
    out_shape = (N,) if dim == 0 else (M,)
    R = N if dim == 0 else M

    @T.prim_func
    def tile(A: T.Tensor((M, N), dtype), C: T.Tensor(out_shape, dtype), B: T.Tensor(out_shape, dtype)):
        with T.Kernel(1, threads=threads):
            s = alloc(src_scope, (M, N), dtype)
            d = alloc(dst_scope, out_shape, dtype)
            for i, j in T.Parallel(M, N):
                s[i, j] = A[i, j] * 2
            if not clear:
                T.copy(C, d)
            T.reduce(s, d, kind, dim, clear)
            for r in T.Parallel(R):
                B[r] = d[r]

    return tile


def three_d_program(P, M, N, dim, kind, keep_unit=False, threads=128):
    """B = the reduction of a shared (P, M, N) tile along dim into a shared tile, of the
    source's shape without dim or (keep_unit) with it as 1."""
    shape = [P, M, N]
    out_shape = tuple(1 if d == dim else e for d, e in enumerate(shape)) if keep_unit else \
        tuple(e for d, e in enumerate(shape) if d != dim)

    @T.prim_func
    def three_d(A: T.Tensor((P, M, N), "float32"), B: T.Tensor(out_shape, "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((P, M, N), "float32")
            d = T.alloc_shared(out_shape, "float32")
            T.copy(A, s)
            getattr(T, f"reduce_{kind}")(s, d, dim=dim)
            T.copy(d, B)

    return three_d


def vector_program(N, kind, dst_scope="shared", threads=64):
    """B[0] = the reduction of the shared vector A (one result)."""

    @T.prim_func
    def vector(A: T.Tensor((N,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((N,), "float32")
            d = alloc(dst_scope, (1,), "float32")
            T.copy(A, s)
            getattr(T, f"reduce_{kind}")(s, d, dim=0)
            T.copy(d, B)

    return vector


def region_program(M, N, lo, rows, kind, threads=128):
    """B[lo:lo+rows] = the reduction along 1 of A[lo:lo+rows, :], reduced from a region of a
    shared tile into a region of a shared vector; the rest of B keeps A[:, 0]."""

    @T.prim_func
    def region(A: T.Tensor((M, N), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((M, N), "float32")
            d = T.alloc_shared((M,), "float32")
            T.copy(A, s)
            for i in T.Parallel(M):
                d[i] = s[i, 0]
            getattr(T, f"reduce_{kind}")(s[lo:lo + rows, :], d[lo:lo + rows], dim=1)
            T.copy(d, B)

    return region


def rows_then_scale_program(M, N, threads=128):
    """B[i, j] = exp(2*A[i, j] - max_j A[i, :]): a shared source reduced into a fragment
    whose layout a wider loop (over (M, 2N)) decides first, so the rows reach it through an
    exchange."""

    @T.prim_func
    def rows(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, 2 * N), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((M, N), "float32")
            x = T.alloc_fragment((M, 2 * N), "float32")
            r = T.alloc_fragment((M,), "float32")
            T.copy(A, s)
            for i, j in T.Parallel(M, 2 * N):
                x[i, j] = A[i, j % N] + A[i, j % N]
            T.reduce_max(s, r, dim=1)
            for i, j in T.Parallel(M, 2 * N):
                x[i, j] = T.exp(x[i, j] - r[i])
            T.copy(x, B)

    return rows


def substitution_program(n, steps, pipelined=False, threads=128):
    """v <- v + 0.5 * (Mᵀ v) (each entry masked to the rows < t + 1 in step t), step after
    step, the product of a shared vector and a shared matrix reduced along dim 0 into a
    shared vector inside the loop: TileLang's kda forward substitution pattern, each step
    reading what the one before wrote."""

    @T.prim_func
    def substitution(Mat: T.Tensor((n, n), "float32"), V: T.Tensor((n,), "float32"),
                     Out: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads):
            m = T.alloc_shared((n, n), "float32")
            v = T.alloc_shared((n,), "float32")
            prod = T.alloc_shared((n, n), "float32")
            r = T.alloc_shared((n,), "float32")
            T.copy(Mat, m)
            T.copy(V, v)
            loop = T.Pipelined(steps, num_stages=1) if pipelined else T.serial(steps)
            for t in loop:
                for i, j in T.Parallel(n, n):
                    prod[i, j] = T.if_then_else(i <= t, v[i] * m[i, j], 0.0)
                T.reduce_sum(prod, r, dim=0, clear=True)
                for j in T.Parallel(n):
                    v[j] += 0.5 * r[j]
            T.copy(v, Out)

    return substitution


def guarded_program(M, N, dim, dst_scope, kind="max", threads=128):
    """B = the reduction of A along dim, by the upper half of the block alone (a thread
    guard): the staged fragments are laid out over the guard's threads."""
    out = (M,) if dim == 1 else (N,)

    @T.prim_func
    def guarded(A: T.Tensor((M, N), "float32"), B: T.Tensor(out, "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((M, N), "float32")
            r = alloc(dst_scope, out, "float32")
            if T.get_thread_binding() >= threads // 2:
                T.copy(A, s)
                getattr(T, f"reduce_{kind}")(s, r, dim=dim)
                for i in T.Parallel(out[0]):
                    B[i] = r[i]

    return guarded


def bits_program(M, N, kind, src_scope="shared", dst_scope="shared", threads=128):
    """B = the bitwise reduction of int32 A along 1."""

    @T.prim_func
    def bits(A: T.Tensor((M, N), "int32"), B: T.Tensor((M,), "int32")):
        with T.Kernel(1, threads=threads):
            s = alloc(src_scope, (M, N), "int32")
            d = alloc(dst_scope, (M,), "int32")
            T.copy(A, s)
            getattr(T, f"reduce_{kind}")(s, d, dim=1)
            T.copy(d, B)

    return bits


# ---- torch references, in float64 ----

def reduce_ref(x: torch.Tensor, kind: str, dim: int) -> torch.Tensor:
    x = x.double()
    if kind == "sum":
        return x.sum(dim)
    if kind == "abssum":
        return x.abs().sum(dim)
    if kind == "max":
        return x.amax(dim)
    if kind == "absmax":
        return x.abs().amax(dim)
    return x.amin(dim)


def combine_ref(old: torch.Tensor, new: torch.Tensor, kind: str) -> torch.Tensor:
    old = old.double()
    if kind in ("sum", "abssum"):
        return old + new
    if kind in ("max", "absmax"):
        return torch.maximum(old, new)
    return torch.minimum(old, new)


def tile_ref(A, C, dim, kind, clear):
    r = reduce_ref(2 * A.double(), kind, dim)
    return r if clear else combine_ref(C, r, kind)


def substitution_ref(Mat, V, steps):
    m, v = Mat.double(), V.double().clone()
    for t in range(steps):
        mask = (torch.arange(v.numel(), device=v.device) <= t).double()
        v = v + 0.5 * ((v * mask) @ m)
    return v


def bits_ref(A, kind):
    out = A[:, 0].clone()
    for j in range(1, A.shape[1]):
        out = {"bitand": torch.bitwise_and, "bitor": torch.bitwise_or, "bitxor": torch.bitwise_xor}[kind](out, A[:, j])
    return out
