"""A wgmma operand written only through views of another dtype (explicit-width shared
stores), for the proxy fence before the wgmma reads it (cpu/test_view_store_fence.py,
gpu/test_view_store_fence_gpu.py)."""
import tegula.language as T


def view_store_gemm(M=64, N=64, K=64):
    @T.prim_func
    def view_store_gemm(A: T.Tensor((M, K // 2), "uint32"), B: T.Tensor((K, N // 2), "uint32"),
                        C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            A_w = T.view(A_s, shape=[M, K // 2], dtype="uint32")
            B_w = T.view(B_s, shape=[K, N // 2], dtype="uint32")
            c = T.alloc_fragment((M, N), "float32")
            for i, j in T.Parallel(M, K // 2):
                A_w[i, j] = A[i, j]
            for i, j in T.Parallel(K, N // 2):
                B_w[i, j] = B[i, j]
            T.clear(c)
            T.gemm(A_s, B_s, c)
            T.copy(c, C)

    return view_store_gemm
