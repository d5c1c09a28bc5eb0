"""Fuzz family of copies the program itself groups and waits for, as TileLang's sparse
attention prefetches its K and V tiles: a ring of `stages` shared tiles filled one step
ahead by `T.Parallel(..., prefer_async=True)` copies (sometimes with TileLang's
`parallel_async_without_async_commit_wait` annotation, sometimes a T.copy), each step's
copies closed by `T.ptx_commit_group()`, and the step read after `T.ptx_wait_group(n)`
with n the steps still in flight (1 inside the loop, 0 for the last). What the consumer
reads is summed into a fragment; the rows past the tensor are masked by the copy's
condition or left to T.copy, so the ring's stale contents must never be read."""
from __future__ import annotations

from .fuzz_gen import Kernel

_FLOATS = ["float32", "float16", "bfloat16"]


def gen_async_groups(k: Kernel) -> None:
    c = k.c
    k.target = c.choice(["sm_90a", "sm_80"])
    threads = c.choice([64, 128, 256])
    stages = c.int(2, 3)
    steps = c.int(1, 5)
    dt = c.choice(_FLOATS)
    bm, bn = c.choice([8, 16, 32]), c.choice([16, 32, 64])
    M = c.int(1, 2) * bm - (c.int(1, bm - 1) if c.flip(0.5) else 0)
    k.dtypes.update({dt, "float32"})
    k.features.update({"gen_async_groups", f"async_stages_{stages}", f"async_{k.target}"})
    X = k.tensor("X", [str(M), str(steps * bn)], [M, steps * bn], dt)
    O = k.tensor("O", [str(M), str(bn)], [M, bn], "float32", role="out")
    k.header = f"with T.Kernel(T.ceildiv({M}, {bm}), threads={threads}) as by:"
    ring = k.alloc("shared", (stages, bm, bn), dt, "ring")
    acc = k.alloc("fragment", (bm, bn), "float32", "acc")
    b = k.body
    mode = c.choice(["parallel", "annotated", "copy"])
    k.features.add(f"async_{mode}")

    def prefetch(step: str) -> None:
        stage = f"({step}) % {stages}"
        if mode == "copy":
            b.emit(f"T.copy({X}[by * {bm}:(by + 1) * {bm}, ({step}) * {bn}:({step} + 1) * {bn}], "
                   f"{ring}[{stage}, :, :])")
        else:
            extra = ", annotations={\"parallel_async_without_async_commit_wait\": True}" if mode == "annotated" else ""
            b.open(f"for i, j in T.Parallel({bm}, {bn}, prefer_async=True{extra}):")
            b.emit(f"{ring}[{stage}, i, j] = T.if_then_else(by * {bm} + i < {M}, "
                   f"{X}[by * {bm} + i, ({step}) * {bn} + j], T.cast(0, \"{dt}\"))")
            b.close()
        b.emit("T.ptx_commit_group()")

    def consume(step: str, in_flight: int) -> None:
        b.emit(f"T.ptx_wait_group({in_flight})")
        b.open(f"for i, j in T.Parallel({bm}, {bn}):")
        b.emit(f"{acc}[i, j] += T.cast({ring}[({step}) % {stages}, i, j], \"float32\")")
        b.close()

    b.emit(f"T.clear({acc})")
    prefetch("0")
    if steps > 1:
        b.open(f"for k in T.serial({steps - 1}):")
        prefetch("k + 1")
        consume("k", 1)
        b.close()
    consume(str(steps - 1), 0)
    b.open(f"for i, j in T.Parallel({bm}, {bn}):")
    b.open(f"if by * {bm} + i < {M}:")
    b.emit(f"{O}[by * {bm} + i, j] = {acc}[i, j]")
    b.close(2)


def invalid_wait_group(k: Kernel) -> None:
    """T.ptx_wait_group of something other than a constant count: its line errs."""
    c = k.c
    k.tensor("X", ["64"], [64], "float32")
    k.tensor("O", ["64"], [64], "float32", role="out")
    k.header = "with T.Kernel(1, threads=64) as bx:"
    k.body.emit("T.ptx_commit_group()")
    k.body.emit(f"T.ptx_wait_group({c.choice(['-1', 'bx', '1.5'])})", mark=True)
    k.body.open("for i in T.Parallel(64):")
    k.body.emit("O[i] = X[i]")
    k.body.close()


FAMILIES: list = [(gen_async_groups, 1)]
INVALID = {"wait_group_not_a_count": invalid_wait_group}
