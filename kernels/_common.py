"""What the shipped kernels share: argument checks with errors that name the argument, and
the plan that decides how a row-wise kernel spreads rows over a thread block.

The row plan is the whole performance story of the memory-bound kernels here, so the
reasoning is written once:

- A row is held entirely in registers (a fragment), so global memory is read once and
  written once. Each thread owns `per_thread` elements of a row, in 16-byte vectors; 8 to
  16 elements per thread keeps enough loads in flight without spilling.
- `threads_per_row` is a power of two, so the threads of a row form an aligned group that
  a warp shuffle (or a shuffle plus shared memory) can reduce.
- The fragment may be wider than the row (`n_pad >= n`): when n is not a multiple of
  `threads_per_row * vector` the tail columns are padding. Tile copies mask columns past
  the tensor's edge (loads give 0, stores are skipped), so padding costs registers and a
  little issue slot time, never memory traffic. Kernels whose math would be changed by a
  zero (max, variance) mask the padding explicitly.
- Short rows are stacked `blk_m` to a block so that one block moves at least
  `BLOCK_BYTES`: a block that moves 1 KiB spends more time starting than streaming.
- Any row length works. When the row length is not a multiple of the vector width, rows
  no longer start on 16-byte boundaries (the tensor base still does), and the copies are
  vectorised only as wide as the row stride allows: 8-byte accesses for a multiple of 4
  halves, 4-byte for even, element-wise for odd (the code generator derives the width
  from the static N).
- The fragments must fit the registers the block's threads get (tegula.registers: 64 a
  thread at 1024 threads, of which 40 are left for fragments). A forward kernel keeps
  about two float32 registers live per element it holds (a float32 working copy beside the
  input or the result), so at 1024 threads a thread holds at most 16 elements: N = 16384
  in a single pass, not 32768 (1024 x 32 spills).
- A row too long for registers (more than fits by the rule above, or the backward
  kernels' limit) is walked in `chunks` of `n_pad` columns by one block: one pass for the
  statistics, then a pass that re-reads the row (from L2 when the row is recent) and
  writes the result.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

import tegula.language as T
from tegula.registers import fragment_budget, register_limit

DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
FLOAT_DTYPES = tuple(DTYPE_NAMES)
FLOAT_DTYPES_TEXT = "float16/bfloat16/float32"

VECTOR_BYTES = 16          # widest global load/store a thread issues
BLOCK_BYTES = 8192         # what one block of a short-row kernel should move at least
MAX_THREADS = 1024
MULTI_ROW_THREADS = 256    # block size once several rows share a block
MAX_PER_THREAD = 32        # fragment elements per thread per buffer before registers spill
PREFERRED_PER_THREAD = 16
# Long rows (see plan_rows): a block of CHUNK_THREADS threads walks the row in chunks of
# CHUNK_THREADS x CHUNK_PER_THREAD columns (16 elements is a whole number of 16-byte
# vectors for every dtype here).
CHUNK_THREADS = 512
CHUNK_PER_THREAD = 16
# Float32 registers a forward kernel keeps live per element a thread holds, and what it
# keeps beside them (row statistics, reduction partials): see plan_rows.
FORWARD_REGISTERS_PER_ELEMENT = 2
ROW_SCALAR_REGISTERS = 4
# The backward kernels hold about twice the forward's fragments. Their single pass runs on
# at most 512 threads (128 registers each); up to 16 elements a thread for every kernel,
# more (up to 32) where the kernel's own registers per element allow (plan_backward_rows).
BACKWARD_MAX_THREADS = 512
BACKWARD_MAX_PER_THREAD = 16
BACKWARD_WIDE_PER_THREAD = 32


def wgmma_gpu() -> bool:
    """Whether the current GPU is an sm_90 part, where T.gemm runs on wgmma (tile choices
    differ from the mma.sync path's)."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES[dtype]


def elem_bytes(dtype: torch.dtype) -> int:
    return torch.finfo(dtype).bits // 8


def describe(t) -> str:
    """A short account of a tensor for error messages: dtype, shape, device, layout."""
    if not isinstance(t, torch.Tensor):
        return f"an object of type {type(t).__name__}"
    layout = "contiguous" if t.is_contiguous() else f"non-contiguous (strides {tuple(t.stride())})"
    dtype = str(t.dtype).replace("torch.", "")
    return f"a {dtype} tensor of shape {tuple(t.shape)} on {t.device}, {layout}"


def _dtype_text(dtypes) -> str:
    return "/".join(str(d).replace("torch.", "") for d in dtypes)


# The checks run in one order in every entry point: each tensor's type and dtype, then
# ranks and shapes, then devices (check_devices), so an error names the first argument
# that is wrong in itself, and structural errors show up even on a CPU tensor.
def refuse_grad(op: str, name: str, t) -> None:
    """The entry points have no backward yet: an output computed from a tensor that requires
    grad would be silently detached from the autograd graph (training would stop learning
    through it), so that call is an error naming the op and the argument."""
    if isinstance(t, torch.Tensor) and t.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{op}: {name} requires grad, but {op} has no backward yet: its output would be "
                           f"detached from the autograd graph. Call it under torch.no_grad() or "
                           f"torch.inference_mode(), or pass {name}.detach()")


def check_tensor(op: str, name: str, t, dtypes=FLOAT_DTYPES, like=None, like_name: str = "x") -> None:
    """TypeError when `t` is not a tensor; ValueError when its dtype is not one of `dtypes`,
    or (with `like`) not `like`'s dtype; RuntimeError when it requires grad (refuse_grad).
    Layout is free: see `launchable`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {describe(t)}")
    refuse_grad(op, name, t)
    if like is not None and t.dtype != like.dtype:
        want = str(like.dtype).replace("torch.", "")
        raise ValueError(f"{op}: {name} must be a {want} tensor (the dtype of {like_name}), got {describe(t)}")
    if t.dtype not in dtypes:
        raise ValueError(f"{op}: {name} must be a tensor of {_dtype_text(dtypes)}, got {describe(t)}")


def on_device(t: torch.Tensor) -> bool:
    """A CUDA tensor, or one being traced: the operators' fakes run the entry points'
    checks on what tracing gives them (a meta tensor, or a FakeTensor or other subclass),
    whose device stands for the real one; the eager call it traces checks that one. Only
    plain tensors reach an eager entry point (kernels/_ops.py's `_eager`)."""
    return t.device.type == "cuda" or t.is_meta or type(t) not in (torch.Tensor, torch.nn.Parameter)


def check_devices(op: str, *named) -> None:
    """Every (name, tensor) is a CUDA tensor (`on_device`) on the first one's device."""
    first_name, first = named[0]
    for name, t in named:
        refuse_grad(op, name, t)
        if not on_device(t):
            raise ValueError(f"{op}: {name} must be a CUDA tensor, got {describe(t)}")
        if t.device != first.device:
            raise ValueError(f"{op}: {name} must be on {first.device} (the device of {first_name}), "
                             f"got {describe(t)}")


def check_hidden(op: str, name: str, n: int) -> None:
    """Any row length of at least one element: short or ragged rows are masked by the
    copies, long ones walked in chunks (plan_rows). Rows of more than 2^31 - 1 elements
    would overflow the 32-bit column index."""
    if n <= 0:
        raise ValueError(f"{op}: the last dimension of {name} must be positive, got {n}")
    if n >= 2 ** 31:
        raise ValueError(f"{op}: the last dimension of {name} is {n}; columns are indexed with "
                         f"32-bit integers, so a row holds at most {2 ** 31 - 1} elements")


def check_grad_rows(op, name, x) -> None:
    """x, a tensor of a backward entry point: a float dtype and at least one dimension."""
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{op}: {name} must be a tensor of {FLOAT_DTYPES_TEXT}, got {describe(x)}")
    if x.dim() == 0:
        raise ValueError(f"{op}: {name} must have at least one dimension, got {describe(x)}")


def check_grad_args(op, dy, x, named, x_name: str = "x") -> None:
    """The arguments of a backward entry point: dy like x (dtype, shape, device); each
    (name, t, shape) of `named` with x's dtype and device and that shape. Errors name the
    argument. No grad checks: backward runs under autograd's no-grad mode. Devices are
    checked after the other arguments, by check_grad_devices."""
    tensors = (("dy", dy), (x_name, x)) + tuple((name, t) for name, t, _ in named)
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor, got {describe(t)}")
    check_grad_rows(op, x_name, x)
    if dy.dtype != x.dtype or dy.shape != x.shape:
        raise ValueError(f"{op}: dy must have the dtype and shape {tuple(x.shape)} of {x_name}, "
                         f"got {describe(dy)}")
    for name, t, shape in named:
        if t.dtype != x.dtype or tuple(t.shape) != tuple(shape):
            raise ValueError(f"{op}: {name} must have the dtype of {x_name} and shape {tuple(shape)}, "
                             f"got {describe(t)}")


def check_grad_devices(op, named) -> None:
    """Each (name, tensor) of a backward entry point on the first one's CUDA device (the
    last check, as check_devices is for the forwards, but without refuse_grad)."""
    first_name, first = named[0]
    if not on_device(first):
        raise ValueError(f"{op}: {first_name} must be a CUDA tensor, got {describe(first)}")
    for name, t in named:
        if t.device != first.device:
            raise ValueError(f"{op}: {name} must be on {first.device} (the device of {first_name}), "
                             f"got {describe(t)}")


def check_eps(op: str, eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0.0 \
            or eps == float("inf"):
        raise ValueError(f"{op}: eps must be a non-negative finite float, got {eps!r}")
    return float(eps)


def check_out(op: str, out, shape, like: torch.Tensor) -> None:
    """The optional preallocated output: x's dtype and device, the expected shape. Any
    layout: `Output` writes through a temporary when the kernel cannot write it directly."""
    check_tensor(op, "out", out, like=like)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{op}: out must have shape {tuple(shape)}, got {describe(out)}")
    if out.device != like.device:
        raise ValueError(f"{op}: out must be on {like.device} (the device of x), got {describe(out)}")


def is_launchable(t: torch.Tensor) -> bool:
    """Contiguous and starting on a 16-byte boundary: what the kernels' vector accesses
    assume of every tensor argument. A view such as x[1:] or x[:, 1:] is not."""
    return t.is_contiguous() and t.data_ptr() % VECTOR_BYTES == 0


def launchable(t: torch.Tensor) -> torch.Tensor:
    """t itself when the kernel can read it in place, else a contiguous copy (torch
    allocates aligned). Misaligned or strided views then work, as they do in torch's ops,
    at the cost of one copy."""
    return t if is_launchable(t) else t.clone(memory_format=torch.contiguous_format)


class Output:
    """Where a kernel writes a result: `out` itself when given and launchable, else a fresh
    tensor, copied into `out` by `result()`.

        dst = Output(op, out, shape, x)
        kernel(..., dst.tensor)
        return dst.result()
    """

    def __init__(self, op: str, out, shape, like: torch.Tensor):
        if out is not None:
            check_out(op, out, shape, like)
        self.out = out
        if out is not None and is_launchable(out):
            self.tensor = out
        else:
            self.tensor = torch.empty(tuple(shape), dtype=like.dtype, device=like.device)

    def result(self) -> torch.Tensor:
        if self.out is not None and self.out is not self.tensor:
            self.out.copy_(self.tensor)
            return self.out
        return self.tensor


def as_rows(op: str, x: torch.Tensor) -> torch.Tensor:
    """x viewed as (rows, hidden): the leading dimensions flatten into rows. x must be
    launchable (a reshape of a contiguous tensor is a view)."""
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension, got {describe(x)}")
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def check_rank(op: str, name: str, t: torch.Tensor, ndim: int, what: str = "") -> None:
    if t.dim() != ndim:
        raise ValueError(f"{op}: {name} must be {ndim}-D{f' ({what})' if what else ''}, got {describe(t)}")


def next_pow2(v: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, v))))


@dataclass(frozen=True)
class RowPlan:
    blk_m: int            # rows per block
    threads: int          # threads per block (= blk_m * threads_per_row)
    n_pad: int            # fragment width: n rounded up to threads_per_row * per_thread,
                          # or, with chunks > 1, the width of one chunk
    threads_per_row: int
    per_thread: int       # elements of one row held by one thread
    chunks: int = 1       # > 1: the row is walked in chunks of n_pad columns


def fits_registers(threads: int, per_thread: int, registers_per_element: float) -> bool:
    """Whether a thread of a `threads`-thread block can hold `per_thread` row elements at
    `registers_per_element` live registers each, beside ROW_SCALAR_REGISTERS, within the
    fragment budget of tegula.registers (the rule its RegisterPressureWarning applies)."""
    return per_thread * registers_per_element + ROW_SCALAR_REGISTERS <= fragment_budget(register_limit(threads))


def plan_rows(n: int, elem_bytes: int, max_per_thread: int = MAX_PER_THREAD,
              max_threads: int = MAX_THREADS,
              registers_per_element: float = FORWARD_REGISTERS_PER_ELEMENT) -> RowPlan:
    """The row tiling for hidden size n. Worked examples (float16, vector = 8 elements):

    n=4096 → 256 threads × 16 elements, one row per block (8 KiB);
    n=512  → 32 threads a row × 16 elements, 8 rows per block (256 threads, 8 KiB);
    n=4104 → 256 threads a row × 24 elements, n_pad=6144 (4104 = 8·513 has no power-of-two
             split, so the least padding within 32 elements a thread wins);
    n=13   → 2 threads a row × 8 elements, n_pad=16, 128 rows per block;
    n=16384 → 1024 threads × 16 elements, the most a single pass holds: 1024 × 32 (n=32768)
             would need 2 × 32 + 4 registers a thread for fragments, past the 40 of a
             1024-thread block (fits_registers), so
    n=32768 → one row per block of 512 threads, walked in 4 chunks of 8192 columns;
    n=100003 → 13 chunks of 8192 columns (the last one ragged).

    `registers_per_element` is what the kernel keeps live per element a thread holds
    (float32 registers); plans whose fragments would not fit are never chosen.
    """
    vector = VECTOR_BYTES // elem_bytes
    vectors = -(-n // vector)
    best = None
    for k in range(1, max_per_thread // vector + 1):
        per_row = next_pow2(-(-vectors // k))
        per_thread = k * vector
        if per_row > max_threads or not fits_registers(max(per_row, 32), per_thread, registers_per_element):
            continue
        n_pad = per_row * per_thread
        # Least padding first; among equal padding, closest to 16 elements a thread.
        key = (n_pad, abs(math.log2(per_thread / PREFERRED_PER_THREAD)), -per_thread)
        if best is None or key < best[0]:
            best = (key, per_row, per_thread, n_pad)
    if best is None:
        chunk = CHUNK_THREADS * CHUNK_PER_THREAD
        return RowPlan(1, CHUNK_THREADS, chunk, CHUNK_THREADS, CHUNK_PER_THREAD, -(-n // chunk))
    _, per_row, per_thread, n_pad = best
    blk_m = 1
    row_bytes = n_pad * elem_bytes
    while blk_m * per_row < MULTI_ROW_THREADS and blk_m * row_bytes < BLOCK_BYTES:
        blk_m *= 2
    while blk_m * per_row < 32:  # a block is at least one full warp
        blk_m *= 2
    return RowPlan(blk_m, blk_m * per_row, n_pad, per_row, per_thread)


def chunk_loop(chunks: int):
    """What a row kernel iterates its chunks with: a serial loop, or for a single chunk the
    Python list [0], which the parser unrolls, so the one-pass kernels carry no loop and
    no chunk offset (c * n_pad folds to 0)."""
    return [0] if chunks == 1 else T.serial(chunks)


def check_chunks(program: str, n: int, n_pad: int, chunks: int) -> None:
    """A row program's fragment covers the row: n_pad x chunks >= n."""
    if chunks < 1 or n_pad * chunks < n:
        raise ValueError(f"{program}: {chunks} chunk(s) of n_pad={n_pad} columns do not cover a row of "
                         f"N={n}; take the tiling from plan_rows")


def plan_backward_rows(n: int, elem_bytes: int, registers_per_element: float | None = None) -> RowPlan:
    """plan_rows within the backward kernels' register budget: up to 512 threads × 16
    elements (n <= 8192), and, for a kernel that states its `registers_per_element`, longer
    rows in one pass while its fragments fit a 512-thread block (fits_registers): at 4
    registers an element (rms_norm's backward; layer_norm's in float16) 24 elements a
    thread, so n = 12288 stays in registers instead of being walked in chunks."""
    plan = plan_rows(n, elem_bytes, BACKWARD_MAX_PER_THREAD, BACKWARD_MAX_THREADS)
    if plan.chunks == 1 or registers_per_element is None:
        return plan
    wide = plan_rows(n, elem_bytes, BACKWARD_WIDE_PER_THREAD, BACKWARD_MAX_THREADS, registers_per_element)
    return wide if wide.chunks == 1 else plan


def persistent_grid(sms: int, threads: int, rows: int, blk_m: int) -> int:
    """Blocks of a backward kernel that loops over its rows (a block accumulates the weight
    gradient of its rows in registers, so the grid is sized to the machine, not to M):
    about 2 blocks of 256 threads an SM, never more blocks than row groups (a power of two
    at least that, so that a new batch size seldom needs a new kernel)."""
    per_sm = max(1, 512 // threads)
    return max(1, min(sms * per_sm, next_pow2(-(-rows // blk_m))))


@dataclass(frozen=True)
class TilePlan:
    block_m: int
    block_n: int
    threads: int


def plan_tile(n: int, elem_bytes: int) -> TilePlan:
    """A 2-D tile of about BLOCK_BYTES for purely elementwise kernels: rows of up to 64
    vectors (1 KiB), as many rows as fill the tile, 256 threads so each owns two vectors."""
    vector = VECTOR_BYTES // elem_bytes
    tile_elems = BLOCK_BYTES // elem_bytes
    block_n = min(next_pow2(n), 64 * vector)
    block_m = max(1, tile_elems // block_n)
    threads = max(32, min(MULTI_ROW_THREADS, block_m * block_n // (2 * vector)))
    return TilePlan(block_m, block_n, threads)


@functools.lru_cache(maxsize=None)
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of `device`: read once, not on every launch."""
    return torch.cuda.get_device_properties(device).multi_processor_count
