"""Programs that read and write buffers through views (T.reshape, T.view,
T.Tensor(shape, dtype, buf.data)), shared by the CPU and GPU tests (cpu/test_views.py,
gpu/test_views_gpu.py). Each returns (prim_func, torch reference of the inputs)."""
import tegula.language as T


def global_reshape(N, M, dtype="float32"):
    """A 1-D global tensor copied out through a 2-D view of it."""

    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N // M, M), dtype)):
        with T.Kernel(1, threads=128):
            A_r = T.reshape(A, [N // M, M])
            T.copy(A_r, B)

    return main, lambda A: A.reshape(N // M, M)


def swizzled_shared_reshape(N, M, dtype="float32"):
    """A 2-D shared tile stored in the MMA swizzle (TileLang's make_mma_swizzle_layout from
    tilelang.cuda.intrinsics.layout.mma_layout; rows that cannot be swizzled stay row-major)
    copied out through a 1-D view of it: the swizzle moves elements in shared memory only."""
    from tegula.cuda.intrinsics.layout.mma_layout import make_mma_swizzle_layout

    @T.prim_func
    def main(A: T.Tensor((N // M, M), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32):
            A_shared = T.alloc_shared((N // M, M), dtype)
            T.annotate_layout({A_shared: make_mma_swizzle_layout(A_shared)})
            T.copy(A, A_shared)
            T.copy(T.reshape(A_shared, [N]), B)

    return main, lambda A: A.reshape(N)


def shared_1d_to_2d(N, M, dtype="float16"):
    @T.prim_func
    def main(A: T.Tensor((N,), dtype), B: T.Tensor((N // M, M), dtype)):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((N,), dtype)
            for i in T.Parallel(N):
                A_s[i] = A[i]
            T.copy(T.reshape(A_s, [N // M, M]), B)

    return main, lambda A: A.reshape(N // M, M)


def fragment_2d_to_1d(N, M, dtype="float32"):
    """A fragment read through a 1-D view into shared memory (TileLang's reshape test)."""

    @T.prim_func
    def main(A: T.Tensor((N // M, M), dtype), B: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=32):
            A_s = T.alloc_shared((N // M, M), dtype)
            A_f = T.alloc_fragment((N // M, M), dtype)
            B_s = T.alloc_shared((N,), dtype)
            T.copy(A, A_s)
            T.copy(A_s, A_f)
            T.copy(T.reshape(A_f, [N]), B_s)
            T.copy(B_s, B)

    return main, lambda A: A.reshape(N)


def view_writes_through(rows, cols, block=64):
    """Writes through a view land in the buffer: out = 2 * x + 1 computed on a 2-D view of
    a 1-D fragment, the view's shape from T.Tensor(shape, dtype, buf.data)."""

    @T.prim_func
    def main(X: T.Tensor((rows * cols,), "float32"), Y: T.Tensor((rows * cols,), "float32")):
        with T.Kernel(T.ceildiv(rows * cols, block * cols), threads=128) as bx:
            f = T.alloc_fragment((block * cols,), "float32")
            T.copy(X[bx * block * cols], f)
            g = T.Tensor((block, cols), "float32", f.data)
            for i, j in T.Parallel(block, cols):
                g[i, j] = g[i, j] * 2 + 1
            T.copy(f, Y[bx * block * cols])

    return main, lambda X: X * 2 + 1


def flattened_parameter(R, C, block_rows=16):
    """A 3-D parameter seen through a 2-D view of its storage (the convolution examples'
    `T.Tensor((KH * KW * C, F), dtype, kernel.data)`), rows of the view summed."""

    @T.prim_func
    def main(W: T.Tensor((R, 4, C), "float32"), S: T.Tensor((R * 4,), "float32")):
        with T.Kernel(T.ceildiv(R * 4, block_rows), threads=128) as bx:
            flat = T.Tensor((R * 4, C), "float32", W.data)
            tile = T.alloc_fragment((block_rows, C), "float32")
            sums = T.alloc_fragment((block_rows,), "float32")
            T.copy(flat[bx * block_rows, 0], tile)
            T.reduce_sum(tile, sums, dim=1)
            T.copy(sums, S[bx * block_rows])

    return main, lambda W: W.reshape(R * 4, C).sum(dim=1)


def convolution(N, C, H, W, F, K, S, D, P, block_M=64, block_N=64, block_K=32, dtype="float16"):
    """TileLang's implicit-GEMM convolution: T.im2col tiles of the NHWC image times the
    filter read as a (K*K*C, F) view, the output written through a (N*OH*OW, F) view."""
    OH = (H + 2 * P - D * (K - 1) - 1) // S + 1
    OW = (W + 2 * P - D * (K - 1) - 1) // S + 1

    @T.prim_func
    def main(data: T.Tensor((N, H, W, C), dtype), kernel: T.Tensor((K, K, C, F), dtype),
             out: T.Tensor((N, OH, OW, F), dtype)):
        with T.Kernel(T.ceildiv(F, block_N), T.ceildiv(N * OH * OW, block_M), threads=128) as (bx, by):
            data_shared = T.alloc_shared((block_M, block_K), dtype)
            kernel_shared = T.alloc_shared((block_K, block_N), dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
            kernel_flat = T.Tensor((K * K * C, F), dtype, kernel.data)
            out_flat = T.Tensor((N * OH * OW, F), dtype, out.data)
            T.clear(acc)
            for k_iter in T.Pipelined(T.ceildiv(K * K * C, block_K), num_stages=2):
                T.im2col(data, data_shared, by, k_iter, K, S, D, P)
                T.copy(kernel_flat[k_iter * block_K, bx * block_N], kernel_shared)
                T.gemm(data_shared, kernel_shared, acc)
            T.copy(acc, out_flat[by * block_M, bx * block_N])

    def ref(data, kernel):
        import torch

        x = data.permute(0, 3, 1, 2).double()
        w = kernel.permute(3, 2, 0, 1).double()
        return torch.nn.functional.conv2d(x, w, stride=S, padding=P, dilation=D).permute(0, 2, 3, 1)

    return main, ref


def reduce_over_view(M, groups, per, dtype="float32", threads=128):
    """The absolute maximum of each group of `per` columns: a reduction over the last
    dimension of a 3-D view of a 2-D fragment (TileLang's per-group quantisation scale)."""

    @T.prim_func
    def main(A: T.Tensor((M, groups * per), dtype), B: T.Tensor((M, groups), dtype)):
        with T.Kernel(1, threads=threads):
            A_f = T.alloc_fragment((M, groups * per), dtype)
            B_f = T.alloc_fragment((M, groups), dtype)
            T.copy(A, A_f)
            T.reduce_absmax(T.reshape(A_f, [M, groups, per]), B_f, dim=2)
            T.copy(B_f, B)

    return main, lambda A: A.abs().reshape(M, groups, per).amax(dim=2)


def gemm_result_through_view(M, N, K, heads):
    """A gemm's accumulator summed over groups of `heads` columns through a view (the
    shape of TileLang's DeepSeek indexer: logits = sum over heads of q k^T)."""

    @T.prim_func
    def main(Q: T.Tensor((M, K), "float16"), Kt: T.Tensor((N * heads, K), "float16"),
             L: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            q = T.alloc_shared((M, K), "float16")
            k = T.alloc_shared((N * heads, K), "float16")
            s = T.alloc_fragment((M, N * heads), "float32")
            logits = T.alloc_fragment((M, N), "float32")
            T.copy(Q, q)
            T.copy(Kt, k)
            T.gemm(q, k, s, transpose_B=True, clear_accum=True)
            T.reduce_sum(T.reshape(s, (M, N, heads)), logits, dim=-1, clear=True)
            T.copy(logits, L)

    def ref(Q, Kt):
        return (Q.double() @ Kt.double().T).reshape(M, N, heads).sum(-1)

    return main, ref


def indexer_logits(N, Q, H, D, dtype="float16"):
    """TileLang's DeepSeek indexer: s = K @ Q^T in a gemm accumulator (N, Q*H), scaled in a
    T.Parallel loop over its 3-D view (N, Q, H) by weights[q, h] (another fragment) and a
    per-row scale, then summed over the heads through the view."""

    @T.prim_func
    def main(Kt: T.Tensor((N, D), dtype), Qt: T.Tensor((Q * H, D), dtype), W: T.Tensor((Q, H), "float32"),
             Sc: T.Tensor((N,), "float32"), L: T.Tensor((N, Q), "float32")):
        with T.Kernel(1, threads=128):
            k_s = T.alloc_shared((N, D), dtype)
            q_s = T.alloc_shared((Q * H, D), dtype)
            s = T.alloc_fragment((N, Q * H), "float32")
            w = T.alloc_fragment((Q, H), "float32")
            sc = T.alloc_fragment((N,), "float32")
            logits = T.alloc_fragment((N, Q), "float32")
            T.copy(Kt, k_s)
            T.copy(Qt, q_s)
            T.copy(W, w)
            T.copy(Sc, sc)
            T.gemm(k_s, q_s, s, transpose_B=True, clear_accum=True, policy=T.GemmWarpPolicy.FullCol)
            s_r = T.reshape(s, (N, Q, H))
            for i, q, h in T.Parallel(N, Q, H):
                s_r[i, q, h] = T.max(s_r[i, q, h], 0) * w[q, h] * sc[i]
            T.reduce_sum(s_r, logits, dim=-1, clear=True)
            T.copy(logits, L)

    def ref(Kt, Qt, W, Sc):
        s = (Kt.double() @ Qt.double().T).reshape(N, Q, H).clamp_min(0)
        return (s * W.double()[None] * Sc.double()[:, None, None]).sum(-1)

    return main, ref


def shared_view_as_wider(R, C, dtype="bfloat16", as_dtype="float32", threads=128):
    """A shared tile of `dtype` seen as `as_dtype` (TileLang's sparse MLA backward reuses
    a bfloat16 KV tile as float32 scratch: T.view(KV_shared, shape, dtype=float32)): the
    view reads the bytes the buffer holds (A's bytes as as_dtype), and what is written
    through it is read back through it (B + 1)."""
    ratio = {"float32": 4, "int32": 4, "float64": 8}[as_dtype] // {"bfloat16": 2, "float16": 2, "int8": 1,
                                                                   "float32": 4, "uint8": 1}[dtype]

    @T.prim_func
    def main(A: T.Tensor((R, C), dtype), B: T.Tensor((R, C // ratio), as_dtype),
             Bits: T.Tensor((R, C // ratio), as_dtype), Out: T.Tensor((R, C // ratio), as_dtype)):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((R, C), dtype)
            v = T.view(s, shape=[R, C // ratio], dtype=as_dtype)
            T.copy(A, s)
            T.copy(v, Bits)
            for i, j in T.Parallel(R, C // ratio):
                v[i, j] = B[i, j] + 1
            T.copy(v, Out)

    def ref(A, B):
        import torch

        return A.contiguous().view(getattr(torch, as_dtype)), B + 1

    return main, ref


def global_view_as_wider(N, block=64):
    """A bfloat16 parameter read as float32 through a view of it (its bytes, two elements
    each), ragged: the last block is masked at the view's edge."""

    @T.prim_func
    def main(A: T.Tensor((2 * N,), "bfloat16"), Out: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=64) as bx:
            v = T.view(A, shape=[N], dtype="float32")
            for i in T.Parallel(block):
                if bx * block + i < N:
                    Out[bx * block + i] = v[bx * block + i]

    def ref(A):
        import torch

        return A.view(torch.float32)

    return main, ref
