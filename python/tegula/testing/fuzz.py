"""Differential fuzzing: random tile programs, checked three ways.

    prog = fuzz.program_from_seed(7)              # or the hypothesis strategy fuzz.programs()
    print(prog.source)                            # a module with one @tegula.jit kernel
    fuzz.check(prog, seed=0)                      # compile, reference, simulate, compare

A generated program is the Python source of a `@tegula.jit(out_idx=..., target=...)`
function in the language plus the arguments it takes (shapes, dtypes, value ranges,
scalars). `check` compiles it (lower + NVRTC, no GPU), runs `tegula.testing.reference`
(the language's meaning) and `tegula.testing.simulate` (the lowered code) on the same
fresh random inputs, outputs poisoned, and compares them with tolerances by dtype; on a
GPU the real kernel is a third run (`run_gpu`, used by scripts/fuzz_gpu.py). An invalid
program carries the line its mistake is on: compiling it must raise TegulaCompileError
naming that line, and nothing else (no internal or NVRTC error, no crash).

Coverage (fuzz_gen.py draws each with some probability):
  * allocations in every scope: T.alloc_shared, T.alloc_fragment, T.alloc_local,
    T.alloc_var; 1-D and 2-D tiles of 1..64 per side; blocks of 32..256 threads;
  * T.copy between every pair of scopes (global, shared, fragment), corner form
    `T.copy(X[by * bm, bx * bn], s)` and slice form, on tensors whose sizes are not
    multiples of the tile (masked loads and stores), and masked T.Parallel loads;
  * T.Parallel loops of elementwise math: + - * /, T.exp/exp2/log/sqrt/rsqrt/abs/max/min,
    T.if_then_else, comparisons, casts among float32/float16/bfloat16/int32, integer
    // % & | ^ ~ << >>, reading and writing fragments, shared tiles and globals;
  * T.reduce_sum/max/min/abssum/absmax along either axis (and of 1-D tiles), with and
    without clear; the reduced (replicated) fragment written and read in later loops;
    shared tiles reduced directly into shared or fragment vectors (bitand/bitor/bitxor
    of integer tiles too, and TileLang's general T.reduce);
  * T.serial / range / T.Pipelined(num_stages=2..3) loops carrying accumulations (a
    fragment, a reduction with clear=False, a T.alloc_var), reusing a shared tile;
  * T.atomic_add of elements and of tiles into globals (integer-valued data, so sums are
    exact in any order);
  * T.gemm with fp16/bf16 operands and an fp32 accumulator, 32..64-wide tiles, either
    operand transposed, A and B from shared or from a fragment, on sm_80 and sm_90a;
    operand transposed, A from shared or from a fragment, on sm_80 and sm_90a;
  * T.gemm_sp (2:4 sparse A, fuzz_families_sparse.py) with valid metadata of every width;
  * conversions among float32/float16/bfloat16/float8_e4m3fn/float8_e5m2 by a T.copy of
    global tensors, between fragments in T.Parallel loops and in T.vectorized loops, with
    values past the 8-bit floats' range, on sm_80, sm_89 and sm_90a (pairs of conversions);
  * scalar arguments (int32, float32) and T.dynamic sizes; 1-D and 2-D grids of several
    blocks;
  * warp-group scopes (`with T.ws(g):`): producer and consumer groups ordered by explicit
    mbarriers (either written first in the loop body, in a T.Pipelined loop, or a loop in
    each scope; consumers of one group or of two, `T.ws(0, 1)`), and groups that each
    work on their own part of a tile or product; gemms with clear_accum=(k == 0),
    (k == last), k % 2 or a T.alloc_var flag (fuzz_families_ws.py);
  * one-kernel split-K products whose last block adds the slices (the decode GEMM's
    form): an acq_rel T.atomic_add(..., return_prev=True) by one thread between barriers,
    tile code under a branch on the shared count, the counter put back to zero
    (fuzz_families_lastblock.py);
  * barriers between blocks: T.sync_grid, and on sm_90+ T.ClusterKernel's cluster barrier
    (T.cluster_sync, or T.cluster_arrive ... T.cluster_wait), each block reading another's
    writes, the barrier between loops or inside a T.Parallel body;
  * warp shuffles (T.shfl_sync / up / down / xor and TileLang's T.tvm_warp_shuffle*) in
    groups of 1..32 lanes, checked against an oracle in torch (the reference cannot run a
    warp's lanes together);
  * programs of other families instrumented with tegula.tools.cuda.iket (marks at every
    depth, some with payloads, a range beside T.Kernel), parsed in a session: the events
    change nothing computed;
  * invalid programs: constant indices out of bounds of shared/fragment/local buffers,
    copies/reductions/gemms of mismatched shapes, bitwise operators on floats, a
    T.Kernel grid that the `as` names do not match or that is not positive.
"""
from __future__ import annotations

import math

import torch

from .fuzz_program import TOLERANCE, Arg, Program, tolerance_for  # noqa: F401 - the public names

__all__ = ["Arg", "Program", "Mismatch", "check", "check_invalid", "compare", "make_inputs", "program_from_seed",
           "programs", "invalid_programs", "invalid_program_from_seed", "interpreters_available"]

class Mismatch(AssertionError):
    """Two runs of one program disagree (or one failed); the message shows the program."""


# ---- inputs ----

def _draw(arg: Arg, gen: torch.Generator) -> torch.Tensor:
    dtype = getattr(torch, arg.dtype)
    shape = tuple(arg.shape)
    kind = arg.values
    if kind == "zeros":
        return torch.zeros(shape, dtype=dtype)
    if kind == "ints":  # small integers: exact in every dtype and in any order of summation
        return torch.randint(-8, 9, shape, generator=gen).to(dtype)
    if kind == "sparse_meta":  # T.gemm_sp metadata: 4 bits a group, two positions in increasing order
        bits = dtype.itemsize * 8
        # (0, 1) (0, 2) (0, 3) (1, 2) (1, 3) (2, 3), and now and then 0: read as (0, 1)
        codes = torch.tensor([0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110, 0b0000])
        weights = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.2])
        picks = codes[torch.multinomial(weights, math.prod(shape) * (bits // 4), True, generator=gen)]
        words = (picks.view(*shape, bits // 4) << (4 * torch.arange(bits // 4))).sum(-1)
        if not dtype.is_signed:
            return words.to(dtype)
        return torch.where(words >= 2 ** (bits - 1), words - 2 ** bits, words).to(dtype)
    if kind == "bits":  # every bit pattern of the integer type, uniformly (words of two 16-bit floats)
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max + 1, shape, generator=gen, dtype=torch.int64).to(dtype)
    if kind == "wide":  # magnitudes 2^-20 .. 2^15.9, either sign: past the 8-bit floats' range, inside float16's
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
        return (sign * torch.exp2(-20.0 + 35.9 * u)).to(dtype)
    if dtype.is_floating_point:
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        lo, hi = (0.5, 2.0) if kind == "positive" else (-1.0, 1.0)
        return (lo + (hi - lo) * u).to(dtype)
    lo, hi = (1, 40) if kind == "positive" else (-40, 40)
    return torch.randint(lo, hi + 1, shape, generator=gen).to(dtype)


def make_inputs(program: Program, seed: int) -> list:
    """The call's arguments (out_idx outputs left out), fresh for each seed."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for arg in program.args:
        if arg.role == "out":
            continue
        out.append(arg.scalar if arg.role == "scalar" else _draw(arg, gen))
    return out


def _results(program: Program, inputs: list, returned) -> dict:
    """name -> tensor of everything the kernel writes: outputs, and inout tensors."""
    outs = [a for a in program.args if a.role == "out"]
    if returned is None:
        returned = []
    elif isinstance(returned, torch.Tensor):
        returned = [returned]
    found = {a.name: t for a, t in zip(outs, returned)}
    given = iter(inputs)
    for arg in program.args:
        if arg.role == "out":
            continue
        value = next(given)
        if arg.role == "inout":
            found[arg.name] = value
    return found


# ---- comparison ----

def compare(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> str | None:
    """None when b matches a (the reference): NaN exactly where a has NaN, and
    ||b - a|| / ||a|| <= tolerance over the rest (exact equality at tolerance 0)."""
    a64 = a.detach().cpu().to(torch.float64)
    b64 = b.detach().cpu().to(torch.float64)
    if a64.shape != b64.shape:
        return f"shape {tuple(b64.shape)} != {tuple(a64.shape)}"
    na, nb = torch.isnan(a64), torch.isnan(b64)
    if not torch.equal(na, nb):
        where = (na != nb).nonzero()[:4].tolist()
        return f"NaN in {int(nb.sum())} elements where the reference has {int(na.sum())} (first differing {where})"
    ok = ~na
    inf_a, inf_b = torch.isinf(a64) & ok, torch.isinf(b64) & ok
    if not torch.equal(a64[inf_a], b64[inf_a]) or not torch.equal(inf_a, inf_b):
        return "infinities differ"
    ok &= ~inf_a
    x, y = a64[ok], b64[ok]
    if tolerance == 0.0:
        if not torch.equal(x, y):
            where = (a64 != b64).logical_and(ok).nonzero()[:4].tolist()
            return f"{int((x != y).sum())} elements differ (first at {where})"
        return None
    diff = (y - x).norm().item()
    scale = x.norm().item()
    err = diff / scale if scale > 0 else diff
    if not err <= tolerance:
        worst = int((y - x).abs().argmax()) if x.numel() else -1
        return f"relative error {err:.3e} > {tolerance:.1e} (worst element {worst}: {y[worst]:.6g} vs {x[worst]:.6g})"
    return None


def _compare_all(program: Program, ref: dict, other: dict, what: str) -> None:
    for name, expected in ref.items():
        problem = compare(expected, other[name], program.tolerance)
        if problem:
            raise Mismatch(f"{what} differs from the reference in '{name}': {problem}\n{program.describe()}")


# ---- the checks ----

_INTERPRETERS = None


def interpreters_available() -> bool:
    """False while tegula.testing.reference/simulate are stubs ("not written yet")."""
    global _INTERPRETERS
    if _INTERPRETERS is None:
        _INTERPRETERS = _probe()
    return _INTERPRETERS


def _probe() -> bool:
    from .. import env

    C = env.native()
    prog = program_from_seed(0)
    kernel = prog.build()
    try:
        from . import reference

        reference(kernel, *make_inputs(prog, 0))
    except C.InternalError as err:
        if "not written yet" in str(err):
            return False
        raise
    except Exception:  # noqa: BLE001 - a failure of a real interpreter is for check() to report
        return True
    return True


def run_reference(program: Program, kernel, seed: int) -> dict:
    """What the program must write: the reference's run, or its oracle's (see Program)."""
    from . import reference

    inputs = make_inputs(program, seed)
    if program.oracle is not None:
        return program.oracle(inputs)
    return _results(program, inputs, reference(kernel, *inputs))


def _check_written(program: Program, kernel) -> None:
    """The tensors the compiler says the kernel writes (what its torch operator declares
    mutated) are exactly the program's outputs and in-out tensors."""
    written = {kernel.prim_func.params[i].name for low in kernel._lowered_all for i in low.written_params}
    tensors = {a.name: a.role for a in program.args if a.role != "scalar"}
    wrong = sorted(n for n, role in tensors.items() if (role in ("out", "inout")) != (n in written))
    if wrong:
        raise Mismatch(f"written_params says {sorted(written)} are written, but the program writes "
                       f"{sorted(n for n, r in tensors.items() if r in ('out', 'inout'))} (differs at {wrong})\n"
                       f"{program.describe()}")


def _check_counts(program: Program, kernel, seed: int) -> None:
    """The compiler's work count of the program (tegula.tools.Analyzer, fed the call's
    inputs, whose contents may decide bounds and branches) runs, and stores into no tensor
    parameter but the program's outputs and in-out tensors (a view or a workspace counts
    under its own name, which is not checked)."""
    from ..tools import Analyzer

    try:
        result = Analyzer(kernel, *make_inputs(program, seed), compile=False).calculate()
    except ValueError as err:
        if "static count cannot follow" in str(err):  # a while loop, a break: refused by design
            return
        raise
    params = {a.name for a in program.args if a.role != "scalar"}
    writes = {a.name for a in program.args if a.role in ("out", "inout")}
    for k in result.kernels:
        stray = sorted((set(k.stores) & params) - writes)
        if stray:
            raise Mismatch(f"the work count stores into {stray}, which the program only reads "
                           f"(stores: {k.stores})\n{program.describe()}")


def check(program: Program, seed: int = 0, interpret: bool | None = None) -> str:
    """Compile (lower + cubin); the tensors it writes (_check_written) and its work count
    (_check_counts); then, when the interpreters exist, reference vs simulate.
    Raises Mismatch (with the program) on any failure; returns how far it went: "compiled"
    or "agreed" (reference and simulate compared)."""
    from . import SimulationError, simulate

    stage = "compile"
    try:
        kernel = program.build()
        kernel.cubin()
        stage = "written"
        _check_written(program, kernel)
        stage = "counted"
        _check_counts(program, kernel, seed)
        if interpret is None:
            interpret = interpreters_available()
        if not interpret:
            return "compiled"
        stage = "reference"
        ref = run_reference(program, kernel, seed)
        stage = "simulate"
        inputs = make_inputs(program, seed)
        sim = _results(program, inputs, simulate(kernel, *inputs))
    except Mismatch:
        raise
    except SimulationError as err:
        raise Mismatch(f"simulate: {err}\n{program.describe()}") from None
    except Exception as err:  # noqa: BLE001 - every failure of a valid program is a finding
        raise Mismatch(f"{stage} failed: {type(err).__module__}.{type(err).__name__}: {err}\n"
                       f"{program.describe()}") from None
    _compare_all(program, ref, sim, "simulate")
    return "agreed"


def check_invalid(program: Program) -> None:
    """An invalid program must fail to compile with TegulaCompileError at its line."""
    from ..frontend.errors import TegulaCompileError

    try:
        kernel = program.build()
        kernel.cubin()
    except TegulaCompileError as err:
        if err.line != program.error_line:
            raise Mismatch(f"{program.error_kind}: error at line {err.line}, expected line {program.error_line}: "
                           f"{err}\n{program.describe()}") from None
        for bad in ("InternalError", "IR verification", "NVRTC", "nvrtc"):
            if bad in err.message:
                raise Mismatch(f"{program.error_kind}: the user's error shows an internal one: {err}\n"
                               f"{program.describe()}") from None
        return
    except Exception as err:  # noqa: BLE001
        raise Mismatch(f"{program.error_kind}: {type(err).__name__} instead of TegulaCompileError: {err}\n"
                       f"{program.describe()}") from None
    raise Mismatch(f"{program.error_kind}: the invalid program compiled\n{program.describe()}")


# ---- generation (fuzz_gen.py) ----

def program_from_seed(seed: int) -> Program:
    from .fuzz_families import gen_valid
    from .fuzz_gen import RandomChooser

    return gen_valid(RandomChooser(seed))


def invalid_program_from_seed(seed: int) -> Program:
    from .fuzz_families import gen_invalid
    from .fuzz_gen import RandomChooser

    return gen_invalid(RandomChooser(seed))


def programs():
    """A hypothesis strategy of valid programs."""
    from .fuzz_families import gen_valid
    from .fuzz_gen import strategy

    return strategy(gen_valid)


def invalid_programs():
    """A hypothesis strategy of invalid programs."""
    from .fuzz_families import gen_invalid
    from .fuzz_gen import strategy

    return strategy(gen_invalid)
