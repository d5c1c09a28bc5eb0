"""Programs for TileLang names of the language (T.isfinite / isinf / isnan, T.transpose,
T.annotate_safe_value, T.let, T.launch_thread, T.annotate_min_blocks_per_sm), shared by
cpu/test_language_names.py (reference, simulator, compile) and
gpu/test_language_names_gpu.py (against torch). Each returns (prim_func, reference
function of the inputs)."""
import torch

import tegula.language as T


def float_tests_program(n, dtype, threads=64):
    """Y[i] = (isfinite, isinf, isnan)(X[i]) as int32 columns."""

    @T.prim_func
    def float_tests(X: T.Tensor((n,), dtype), Y: T.Tensor((n, 3), "int32")):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            for i in T.Parallel(threads):
                x = X[bx * threads + i]
                Y[bx * threads + i, 0] = T.if_then_else(T.isfinite(x), 1, 0)
                Y[bx * threads + i, 1] = T.if_then_else(T.isinf(x), 1, 0)
                Y[bx * threads + i, 2] = T.if_then_else(T.isnan(x), 1, 0)

    def ref(x):
        return torch.stack([torch.isfinite(x), torch.isinf(x), torch.isnan(x)], 1).int()

    return float_tests, ref


def special_values(x):
    """x with infinities and a NaN at fixed places (where x is a float tensor)."""
    if x.is_floating_point():
        x = x.clone()
        x[3 % x.numel()] = float("inf")
        x[5 % x.numel()] = float("-inf")
        x[7 % x.numel()] = float("nan")
    return x


def transpose_program(M, N, block_M, block_N, dtype="float32", threads=128, via="shared"):
    """B = A.T, a tile at a time: T.copy into a tile, T.transpose into a tile of the
    transposed shape, T.copy out. `via` is the tiles' scope: shared or fragment."""

    @T.prim_func
    def transpose(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            if via == "shared":
                tile = T.alloc_shared((block_M, block_N), dtype)
                tile_t = T.alloc_shared((block_N, block_M), dtype)
            else:
                tile = T.alloc_fragment((block_M, block_N), dtype)
                tile_t = T.alloc_fragment((block_N, block_M), dtype)
            T.copy(A[by * block_M:(by + 1) * block_M, bx * block_N:(bx + 1) * block_N], tile)
            T.transpose(tile, tile_t)
            T.copy(tile_t, B[bx * block_N:(bx + 1) * block_N, by * block_M:(by + 1) * block_M])

    return transpose, lambda a: a.T.contiguous()


def safe_value_program(M, N, block_M, block_N, pad, shift=10, dtype="float32", copy=False):
    """B[r] = A[r - shift] (rows shifted down), with T.annotate_safe_value({A: pad}): the
    rows read past A's top edge are pad. The shifted tile comes in through a T.Parallel
    loop, or a T.copy of the shifted region."""

    @T.prim_func
    def safe_value(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            tile = T.alloc_shared((block_M, block_N), dtype)
            T.annotate_safe_value({A: pad})
            if copy:
                T.copy(A[by * block_M - shift:by * block_M - shift + block_M, bx * block_N:(bx + 1) * block_N], tile)
            else:
                for i, j in T.Parallel(block_M, block_N):
                    tile[i, j] = A[by * block_M + i - shift, bx * block_N + j]
            for i, j in T.Parallel(block_M, block_N):
                B[by * block_M + i, bx * block_N + j] = tile[i, j]

    def ref(a):
        out = torch.full_like(a, pad)
        out[shift:] = a[:-shift]
        return out

    return safe_value, ref


def let_program(n, block=64):
    """B[i] = A[i] + offset, offset = T.int32() bound by T.let to the tile's start."""

    @T.prim_func
    def let(A: T.Tensor((n,), "int32"), B: T.Tensor((n,), "int32")):
        with T.Kernel(T.ceildiv(n, block), threads=block) as bx:
            offset = T.int32()
            T.let(offset, bx * block)
            for i in T.Parallel(block):
                B[offset + i] = A[offset + i] + offset

    return let, lambda a: a + torch.arange(a.numel(), dtype=torch.int32) // block * block


def launch_thread_program(n, threads=128):
    """B[i] = A[i] * 2 with the thread index from T.launch_thread("threadIdx.x", threads)
    and the block's from T.launch_thread("blockIdx.x", ...)."""

    @T.prim_func
    def launch_thread(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, threads), threads=threads):
            tx = T.launch_thread("threadIdx.x", threads)
            bx = T.launch_thread("blockIdx.x", T.ceildiv(n, threads))
            if bx * threads + tx < n:
                B[bx * threads + tx] = A[bx * threads + tx] * 2.0

    return launch_thread, lambda a: a * 2


def ordered_pairs_program(n, dtype="int32"):
    """Y = X with each pair (X[2j], X[2j + 1]) put in increasing order by a tuple swap of two
    local elements, which T.device_assert checks; Z[2j] = (X[2j] << 3) >> 1 and
    Z[2j + 1] = X[2j + 1] << (j % 4) by T.shift_left / T.shift_right (n even)."""

    @T.prim_func
    def ordered_pairs(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype), Z: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, 128), threads=64) as bx:
            pair = T.alloc_local((2,), dtype)
            for j in T.Parallel(64):
                at = bx * 128 + 2 * j
                if at < n:
                    pair[0] = X[at]
                    pair[1] = X[at + 1]
                    if pair[0] > pair[1]:
                        pair[0], pair[1] = pair[1], pair[0]
                    T.device_assert(pair[0] <= pair[1], "a pair out of order")
                    Y[at] = pair[0]
                    Y[at + 1] = pair[1]
                    Z[at] = T.shift_right(T.shift_left(X[at], 3), 1)
                    Z[at + 1] = T.shift_left(X[at + 1], j % 4)

    def ref(x):
        pairs = x.view(-1, 2)
        y = torch.stack([pairs.min(1).values, pairs.max(1).values], 1).reshape(-1)
        z = torch.empty_like(x)
        z[0::2] = (x[0::2] << 3) >> 1
        z[1::2] = x[1::2] << (torch.arange(n // 2, device=x.device) % 64 % 4).to(x.dtype)
        return y, z

    return ordered_pairs, ref


def assert_program(n, bound):
    """Y = X, with T.device_assert(X[i] < bound) on every element."""

    @T.prim_func
    def checked(X: T.Tensor((n,), "int32"), Y: T.Tensor((n,), "int32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as bx:
            for i in T.Parallel(128):
                if bx * 128 + i < n:
                    T.device_assert(X[bx * 128 + i] < bound, "an element past the bound")
                    Y[bx * 128 + i] = X[bx * 128 + i]

    return checked


def thread_block_program(n, dims):
    """B[i] = A[i] + the index of the thread that wrote it along each of the block's
    dimensions (dims = (x, y, z), x * y * z threads): x + 100 y + 10000 z, read with
    T.get_thread_binding, T.launch_thread and T.thread_binding."""
    x, y, z = dims
    threads = x * y * z

    @T.prim_func
    def thread_block(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, threads), threads=dims) as bx:
            tx = T.get_thread_binding(0)
            ty = T.launch_thread("threadIdx.y", y)
            tz = T.thread_binding(0, z, thread="threadIdx.z")
            flat = (tz * y + ty) * x + tx
            if bx * threads + flat < n:
                B[bx * threads + flat] = A[bx * threads + flat] + T.cast(tx + 100 * ty + 10000 * T.get_thread_binding(2),
                                                                        "float32")

    def ref(a):
        i = torch.arange(n, device=a.device) % threads
        return a + (i % x + 100 * (i // x % y) + 10000 * (i // (x * y))).float()

    return thread_block, ref


def min_blocks_program(n, blocks, threads=128):
    """B = A + 1 in a kernel that asks for `blocks` blocks an SM."""

    @T.prim_func
    def min_blocks(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, threads), threads=threads) as bx:
            T.annotate_min_blocks_per_sm(blocks)
            for i in T.Parallel(threads):
                B[bx * threads + i] = A[bx * threads + i] + 1.0

    return min_blocks, lambda a: a + 1


def host_assumption_program(multiple=4, block=32):
    """A[i] = i with T.assume(N % multiple == 0) at the top of the kernel: a fact of the
    call's size, which the launcher (and the interpreters) check before launching."""
    N = T.dynamic("N")

    @T.prim_func
    def host_assumption(A: T.Tensor((N,), "float32"), scale: T.int32):
        with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
            T.assume(N % multiple == 0)
            T.assume(scale > 0)
            for i in T.Parallel(block):
                if bx * block + i < N:
                    A[bx * block + i] = T.cast((bx * block + i) * scale, "float32")

    return host_assumption, lambda n, scale: torch.arange(n, dtype=torch.float32) * scale


def int64_fill_program(dtype="bfloat16", block=512):
    """x[:] = 1 over a dynamic length declared int64 (TileLang's test_fill_symbolic): the
    kernel indexes in 64 bits."""
    n = T.symbolic("n", "int64")

    @T.prim_func
    def fill64(x: T.Tensor[n, dtype]):
        with T.Kernel(T.ceildiv(n, block), threads=128) as bx:
            for i in T.Parallel(block):
                x[bx * block + i] = 1.0

    return fill64
