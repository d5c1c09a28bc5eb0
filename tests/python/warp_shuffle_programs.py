"""Programs of TileLang's T.tvm_warp_shuffle / T.tvm_warp_shuffle_up / T.tvm_warp_shuffle_down
(TVM's argument order: mask, value, lane or offset, width, warp_size), with what they compute
in torch; shared by cpu/test_warp_shuffle.py and gpu/test_warp_shuffle_gpu.py. N may be
ragged: every lane of the last block still shuffles (a read past X's end gives 0), and the
stores past Y's end are skipped."""
import math

import torch

import tegula.language as T


def moves_program(N, width, dtype, up, down, threads=128, warp_size=32):
    """Y[0] from lane (7 * lane + 3) of each group of `width` lanes (modulo width), Y[1] from
    `up` lanes below, Y[2] from `down` lanes above (a lane whose partner is outside its group
    keeps its own value)."""

    @T.prim_func
    def moves(X: T.Tensor((N,), dtype), Y: T.Tensor((3, N), dtype)):
        with T.Kernel(T.ceildiv(N, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            lane = tx % 32
            i = bx * threads + tx
            v = T.alloc_var(dtype)
            a = T.alloc_var(dtype)
            b = T.alloc_var(dtype)
            c = T.alloc_var(dtype)
            v = X[i]
            a = T.tvm_warp_shuffle(0xFFFFFFFF, v, lane * 7 + 3, width, warp_size)
            b = T.tvm_warp_shuffle_up(0xFFFFFFFF, v, up, width, warp_size)
            c = T.tvm_warp_shuffle_down(0xFFFFFFFF, v, down, width, warp_size)
            Y[0, i] = a
            Y[1, i] = b
            Y[2, i] = c

    return moves


def _warps(x: torch.Tensor, N: int, threads: int) -> torch.Tensor:
    blocks = math.ceil(N / threads)
    padded = torch.zeros(blocks * threads, dtype=x.dtype, device=x.device)
    padded[:N] = x
    return padded.view(-1, 32)


def expected_moves(x: torch.Tensor, N, width, up, down, threads=128) -> torch.Tensor:
    w = _warps(x, N, threads)
    lane = torch.arange(32, device=x.device)
    base, pos = lane - lane % width, lane % width
    src = [base + (lane * 7 + 3) % width,
           torch.where(pos >= up, lane - up, lane),
           torch.where(pos + down < width, lane + down, lane)]
    return torch.stack([w[:, s].reshape(-1)[:N] for s in src])


def butterfly_program(N, width, threads=128):
    """The Walsh-Hadamard transform of each group of `width` lanes' values, in float32: at
    round r each lane takes its partner's value (lane ^ 2^r, by index) and keeps the sum
    (lower lane) or the difference (upper lane), as TileLang's hadamard example does."""
    rounds = int(math.log2(width))

    @T.prim_func
    def butterfly(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, threads), threads=threads) as bx:
            tx = T.get_thread_binding()
            i = bx * threads + tx
            v = T.alloc_var("float32")
            other = T.alloc_var("float32")
            v = X[i]
            for r in T.serial(rounds):
                other = T.tvm_warp_shuffle(0xFFFFFFFF, v, (tx ^ (1 << r)) % width, width, width)
                v = T.if_then_else(((tx >> r) & 1) == 0, v + other, other - v)
            Y[i] = v

    return butterfly


def hadamard(n: int) -> torch.Tensor:
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def expected_butterfly(x: torch.Tensor, N, width, threads=128) -> torch.Tensor:
    groups = _warps(x.double(), N, threads).reshape(-1, width)
    return (groups @ hadamard(width).to(x.device).T).reshape(-1)[:N]
