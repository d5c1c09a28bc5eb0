"""Programs that use T.atomic_add(..., return_prev=True) as an expression (TileLang's
DeepSeek top-k selector: `pos = T.atomic_add(hist[b], 1, return_prev=True)` hands each
thread its own slot), shared by cpu/test_atomic_prev.py and gpu/test_atomic_prev_gpu.py.
Each returns (prim_func, check(inputs, outputs)) where check raises when the outputs are
wrong: the slots atomics hand out depend on the order the threads ran, so the checks
compare what must hold in every order."""
import torch

import tegula.language as T


def compact_shared(N, block=128, threads=128):
    """Each block writes the indices of its positive inputs into its row of Out, packed
    from column 0 through a shared counter; Count gets how many. Rows are compared as sets."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Out: T.Tensor((T.ceildiv(N, block), block), "int32"),
             Count: T.Tensor((T.ceildiv(N, block),), "int32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            counter = T.alloc_shared((1,), "int32")
            T.fill(counter, 0)
            for i in T.Parallel(block):
                if bx * block + i < N:
                    if X[bx * block + i] > 0:
                        pos = T.atomic_add(counter[0], 1, return_prev=True)
                        Out[bx, pos] = bx * block + i
            Count[bx] = counter[0]

    def check(X, Out, Count):
        nb = (N + block - 1) // block
        for b in range(nb):
            want = sorted(i for i in range(b * block, min(N, (b + 1) * block)) if X[i] > 0)
            assert int(Count[b]) == len(want), (b, int(Count[b]), len(want))
            assert sorted(Out[b, :len(want)].tolist()) == want
        return True  # every slot checked above

    return main, check


def compact_global(N, block=64, threads=64, dtype="int32"):
    """Every block packs its positive inputs' values into one global list through a global
    counter (TileLang's `pos = T.atomic_add(s_num_input[0], 1, return_prev=True)` with the
    counter in global memory); the position plus a base is used directly as an index."""

    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Counter: T.Tensor((1,), dtype), Out: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as bx:
            for i in T.Parallel(block):
                if bx * block + i < N:
                    if X[bx * block + i] > 0:
                        Out[T.atomic_add(Counter[0], 1, return_prev=True)] = X[bx * block + i]

    def check(X, Counter, Out):
        want = sorted(x for x in X.tolist() if x > 0)
        n = int(Counter[0])
        assert n == len(want), (n, len(want))
        assert sorted(Out[:n].tolist()) == want
        return True  # every slot checked above

    return main, check


def histogram_slots(N, bins=8, threads=128):
    """A thread-level loop (T.serial in each thread, TileLang's selector shape): every
    input bumps its bin's counter and gets back the count before it as its rank in the bin;
    Rank[i] < final count of its bin, and the ranks of one bin are 0..count-1 exactly."""

    @T.prim_func
    def main(B: T.Tensor((N,), "int32"), Rank: T.Tensor((N,), "int32"), Hist: T.Tensor((bins,), "int32")):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            hist = T.alloc_shared((bins,), "int32")
            if tx < bins:
                hist[tx] = 0
            T.sync_threads()
            for s in T.serial(T.ceildiv(N, threads)):
                idx = s * threads + tx
                if idx < N:
                    Rank[idx] = T.atomic_add(hist[B[idx]], 1, return_prev=True)
            T.sync_threads()
            if tx < bins:
                Hist[tx] = hist[tx]

    def check(B, Rank, Hist):
        for b in range(bins):
            members = [int(Rank[i]) for i in range(N) if int(B[i]) == b]
            assert int(Hist[b]) == len(members)
            assert sorted(members) == list(range(len(members)))
        return True  # every slot checked above

    return main, check


def inputs(name, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name == "histogram_slots":
        return [torch.randint(0, 8, (N,), generator=g, dtype=torch.int32)]
    return [torch.randn(N, generator=g)]
