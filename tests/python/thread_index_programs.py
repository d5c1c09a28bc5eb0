"""Programs of the thread-index intrinsics T.shuffle_elect and T.thread_binding, shared by
cpu/test_intrinsics_2.py and gpu/test_intrinsics_2_gpu.py."""
import tegula.language as T


def leaders_program(extent, threads):
    """A[tx] = T.shuffle_elect(extent)."""

    @T.prim_func
    def leaders(A: T.Tensor((threads,), "int32")):
        with T.Kernel(1, threads=threads) as bx:
            tx = T.get_thread_binding()
            A[tx] = T.shuffle_elect(extent)

    return leaders


def mark_program():
    """A[tx] = 2 * tx, tx from T.thread_binding."""

    @T.prim_func
    def mark(A: T.Tensor((128,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            tx = T.thread_binding(0, 128, thread="threadIdx.x")
            A[tx] = tx * 2

    return mark
