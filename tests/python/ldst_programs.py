"""Programs of T.reinterpret and the explicit-width accesses (T.ldg64, T.sts128, ...),
shared by cpu/test_ldst.py and gpu/test_ldst_gpu.py. N may be ragged: a block whose access
runs past the end is masked whole (a load gives 0, a store is skipped)."""
import tegula.language as T

RAW = {32: T.uint32, 64: T.uint32x2, 128: T.uint32x4, 256: T.uint32x8}
LOADS = {32: T.ldg32, 64: T.ldg64, 128: T.ldg128, 256: T.ldg256}
STORES = {32: T.stg32, 64: T.stg64, 128: T.stg128, 256: T.stg256}
SHARED = {32: (T.lds32, T.sts32), 64: (T.lds64, T.sts64), 128: (T.lds128, T.sts128)}


def copy_program(N, bits, dtype="float32", pred_half=False):
    """Y[i*n : i*n+n] = X[...] through one load and one store of `bits`, the loaded bits
    reinterpreted as n elements of dtype (n = bits / element bits); with pred_half, only the
    first half of the blocks load (the others store 0)."""
    n = bits // (8 * T.dtype(dtype).itemsize)
    vec = T.dtype(dtype) if n == 1 else getattr(T, f"{dtype}x{n}")
    ldg = LOADS[bits]
    blocks = (N + n - 1) // n

    @T.prim_func
    def copy(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(blocks, threads=32) as i:
            if pred_half:
                v = ldg(X[i * n: i * n + n], pred=i < blocks // 2)
            else:
                v = ldg(X[i * n: i * n + n])
            if n == 1:
                Y[i] = T.reinterpret(v, vec)
            else:
                Y[i * n: i * n + n] = T.reinterpret(v, vec)

    return copy


def store_program(N, bits, dtype="float32", pred_half=False):
    """Y[...] = X[...] through a global load and an explicit store (T.stg*)."""
    n = bits // (8 * T.dtype(dtype).itemsize)
    ldg, stg = LOADS[bits], STORES[bits]
    blocks = (N + n - 1) // n

    @T.prim_func
    def store(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(blocks, threads=32) as i:
            v = ldg(X[i * n: i * n + n])
            if pred_half:
                stg(Y[i * n: i * n + n], v, pred=i < blocks // 2)
            else:
                stg(Y[i * n: i * n + n], v)

    return store


def shared_program(N, bits, dtype="float32"):
    """X -> shared (T.sts*) -> barrier -> reversed block order read back (T.lds*) -> Y, one
    thread per piece of `bits`."""
    n = bits // (8 * T.dtype(dtype).itemsize)
    lds, sts = SHARED[bits]
    pieces = N // n

    @T.prim_func
    def shared(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=pieces) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((N,), dtype)
            sts(S[tx * n: tx * n + n], LOADS[bits](X[tx * n: tx * n + n]))
            T.sync_threads()
            r = pieces - 1 - tx
            STORES[bits](Y[tx * n: tx * n + n], lds(S[r * n: r * n + n]))

    return shared


def bits_program(N):
    """The bit tricks of TileLang's examples: B = bits of A as uint32; C = a float32 from
    integer bits ((e + 127) << 23 is 2^e); H = bits of A as float16 as uint16."""

    @T.prim_func
    def bits(A: T.Tensor((N,), "float32"), E: T.Tensor((N,), "int32"), B: T.Tensor((N,), "uint32"),
             C: T.Tensor((N,), "float32"), H: T.Tensor((N,), "uint16")):
        with T.Kernel(N, threads=32) as i:
            B[i] = T.reinterpret(A[i], T.uint32)
            C[i] = T.reinterpret((E[i] + 127) << 23, "float32")
            H[i] = T.reinterpret(T.cast(A[i], T.float16), T.uint16)

    return bits


def offset_program(N):
    """ldg64 at an offset the compiler cannot prove even (a scalar argument): the
    unaligned form, correct for any offset."""

    @T.prim_func
    def shifted(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), k: T.int32):
        with T.Kernel(N // 2 - 1, threads=32) as i:
            Y[i * 2: i * 2 + 2] = T.reinterpret(T.ldg64(X[i * 2 + k: i * 2 + k + 2]), T.float32x2)

    return shifted


def shared_serial_program(N, bits, dtype="float32"):
    """shared_program in one thread (pieces in a serial loop), which the reference runs too."""
    n = bits // (8 * T.dtype(dtype).itemsize)
    lds, sts = SHARED[bits]
    pieces = N // n

    @T.prim_func
    def shared_serial(X: T.Tensor((N,), dtype), Y: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=1) as _:
            S = T.alloc_shared((N,), dtype)
            for j in T.serial(pieces):
                sts(S[j * n: j * n + n], LOADS[bits](X[j * n: j * n + n]))
            for j in T.serial(pieces):
                r = pieces - 1 - j
                STORES[bits](Y[j * n: j * n + n], lds(S[r * n: r * n + n]))

    return shared_serial
