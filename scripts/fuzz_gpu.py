#!/usr/bin/env python
"""Differential fuzzing on a GPU: random programs (tegula.testing.fuzz), each compiled in a
worker process (lower + NVRTC, which also fills the kernel cache) and interpreted there by
tegula.testing.reference, then launched here on the GPU with poisoned outputs and compared
with the reference on the same inputs.

    python scripts/fuzz_gpu.py --count 2000 --seed 0 --out fuzz-failures/
    python scripts/fuzz_gpu.py --dry-run --count 20        # no GPU: compile + reference only
    python scripts/fuzz_gpu.py --count 300 --features view_,im2col_,attention_sm_90a
                                    # only programs with a feature starting with one of these

Prints one summary line last:
    fuzz_gpu: programs=2000 mismatches=0 errors=0 seconds=123.4
A mismatch is a GPU result the reference does not share; an error is a program that failed
to compile, interpret or launch. Each is written to --out as a runnable .py file with the
message at the top.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def _program(seed: int, index: int):
    from tegula.testing import fuzz

    return fuzz.program_from_seed(seed * 1_000_003 + index)


def _input_seed(seed: int, index: int) -> int:
    return (seed * 7_919 + index) & 0x7FFFFFFF


def _prepare(job):
    """In a worker: compile, and run the reference. Returns (index, reference or None, error)."""
    seed, index, interpret, target = job
    try:
        from tegula.testing import fuzz

        program = _program(seed, index)
        kernel = program.build(target)
        kernel.cubin()
        ref = fuzz.run_reference(program, kernel, _input_seed(seed, index)) if interpret else None
        return index, ref, None
    except Exception:  # noqa: BLE001 - reported per program
        return index, None, traceback.format_exc(limit=4)


def _launch(program, kernel, seed: int, index: int) -> dict:
    """The kernel on the GPU, every output poisoned first; the tensors it wrote, on the CPU."""
    import torch

    from tegula.testing import fuzz, poison

    inputs = iter(fuzz.make_inputs(program, _input_seed(seed, index)))
    args, written = [], {}
    for arg in program.args:
        if arg.role == "scalar":
            args.append(next(inputs))
            continue
        if arg.role == "out":
            t = poison(torch.empty(arg.shape, dtype=getattr(torch, arg.dtype), device="cuda"))
        else:
            t = next(inputs).cuda()
        if arg.role in ("out", "inout"):
            written[arg.name] = t
        args.append(t)
    kernel.launch(*args)
    torch.cuda.synchronize()
    return {name: t.cpu() for name, t in written.items()}


def _save(out_dir: str, index: int, program, message: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    text = "".join(f"# {line}\n" for line in message.rstrip().splitlines())
    with open(os.path.join(out_dir, f"fuzz_{index:05d}.py"), "w") as f:
        f.write(text + program.describe() + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="fuzz-failures")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--dry-run", action="store_true", help="compile and interpret only; no GPU")
    parser.add_argument("--features", help="comma list of feature prefixes: run only the programs (among the "
                        "first --count * 50 of the seed) with a feature starting with one, up to --count of them")
    opts = parser.parse_args(argv)

    from tegula.testing import fuzz

    start = time.time()
    interpret = fuzz.interpreters_available()
    if not interpret:
        print("fuzz_gpu: tegula.testing.reference is not available; compiling only", file=sys.stderr)
    if not opts.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("fuzz_gpu: no CUDA GPU (use --dry-run)", file=sys.stderr)
            return 2
    target = None
    if not opts.dry_run:
        from tegula import env

        target = env.resolve_target("auto")[0]  # every program runs on this GPU's architecture
    mismatches = errors = 0
    indices = range(opts.count)
    if opts.features:
        prefixes = tuple(p for p in opts.features.split(",") if p)
        wanted = (i for i in range(opts.count * 50)
                  if any(f.startswith(prefixes) for f in _program(opts.seed, i).features))
        indices = [i for _, i in zip(range(opts.count), wanted)]
    jobs = [(opts.seed, i, interpret, target) for i in indices]
    # Spawned workers: CUDA is never initialised in a forked child of this process.
    context = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=max(1, opts.workers), mp_context=context) as pool:
        for index, ref, error in pool.map(_prepare, jobs, chunksize=4):
            program = _program(opts.seed, index)
            if error is not None:
                errors += 1
                _save(opts.out, index, program, "compile/reference error:\n" + error)
                continue
            if opts.dry_run or not interpret:
                continue
            try:
                kernel = program.build(target)  # lowered again here; the cubin comes from the cache
                got = _launch(program, kernel, opts.seed, index)
            except Exception:  # noqa: BLE001
                errors += 1
                _save(opts.out, index, program, "launch error:\n" + traceback.format_exc(limit=4))
                continue
            for name, expected in ref.items():
                problem = fuzz.compare(expected, got[name], program.tolerance)
                if problem:
                    mismatches += 1
                    _save(opts.out, index, program, f"GPU differs from the reference in '{name}': {problem}")
                    break
    seconds = time.time() - start
    print(f"fuzz_gpu: programs={len(jobs)} mismatches={mismatches} errors={errors} seconds={seconds:.1f}")
    return 0 if mismatches == errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
