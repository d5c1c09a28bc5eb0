"""Programs with global tensors stored in a T.Layout's order, shared by the CPU and GPU
tests (cpu/test_global_layout.py, gpu/test_global_layout_gpu.py)."""
import torch

import tegula.language as T


def fragment_order(dQ):
    """FlashAttention's dQ order: each 8 x 8 block of (row, column) stored as an mma
    fragment holds it (TileLang's backward examples)."""
    return T.Layout(dQ.shape, lambda b, l, h, d: [b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2])


def placed(t: torch.Tensor) -> torch.Tensor:
    """The logical (B, L, H, D) tensor read back from storage in fragment_order."""
    B, L, H, D = t.shape
    phys = t.reshape(B, L // 8, H, D // 8, 2, 32)
    b, l, h, d = torch.meshgrid(*[torch.arange(n) for n in t.shape], indexing="ij")
    return phys[b, l // 8, h, d // 8, d % 2, 4 * (l % 8) + (d % 8) // 2]


def accumulate_program(shape, block=32):
    """dQ += 2 * X by atomics, dQ in fragment order (the backward's accumulation)."""
    B, L, H, D = shape

    @T.prim_func
    def accumulate(X: T.Tensor(shape, "float32"), dQ: T.Tensor(shape, "float32")):
        with T.Kernel(T.ceildiv(L, block), H, B, threads=128) as (bx, by, bz):
            T.annotate_layout({dQ: fragment_order(dQ)})
            f = T.alloc_fragment([block, D], "float32")
            T.copy(X[bz, bx * block:(bx + 1) * block, by, :], f)
            for i, j in T.Parallel(block, D):
                T.atomic_add(dQ[bz, bx * block + i, by, j], f[i, j] * 2)

    return accumulate


def convert_program(shape, block=32):
    """dQ (fragment order, float32) to a float16 tensor in the usual order (the
    backward's post-processing)."""
    B, L, H, D = shape

    @T.prim_func
    def convert(dQ: T.Tensor(shape, "float32"), out: T.Tensor(shape, "float16")):
        with T.Kernel(T.ceildiv(L, block), H, B, threads=128) as (bx, by, bz):
            T.annotate_layout({dQ: fragment_order(dQ)})
            T.copy(dQ[bz, bx * block:(bx + 1) * block, by, :], out[bz, bx * block:(bx + 1) * block, by, :])

    return convert


def transposed_store_program():
    """Y = X + 1 with Y stored head-major ([h, l, d]) over a sequence length known only at
    launch, ragged against the 64-row tile."""
    L = T.dynamic("L")

    @T.prim_func
    def head_major(X: T.Tensor((L, 4, 32), "float32"), Y: T.Tensor((L, 4, 32), "float32")):
        with T.Kernel(T.ceildiv(L, 64), 4, threads=128) as (bx, by):
            T.annotate_layout({Y: T.Layout(Y.shape, lambda l, h, d: [h, l, d])})
            for i, j in T.Parallel(64, 32):
                if bx * 64 + i < L:
                    Y[bx * 64 + i, by, j] = X[bx * 64 + i, by, j] + 1

    return head_major
