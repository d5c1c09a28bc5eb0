"""A family of fuzz programs instrumented with tegula.tools.cuda.iket: a program of another
family (elementwise, accumulation, a serial alloc_var loop, a gemm) with a range beside
T.Kernel (`with T.Kernel(...) as bx, iket.range("kernel"):`) and marks between its
statements, at every depth (kernel level, loop bodies, T.Parallel bodies), some carrying
an int32, uint32 or float32 payload, parsed inside an iket session that records payloads.
Events must change nothing a program computes: the reference, the simulator and the GPU
agree as for the program without them, and the code compiles with them.
"""
from __future__ import annotations

from .fuzz_families import gen_accumulate, gen_elementwise, gen_gemm, gen_serial_var
from .fuzz_gen import Kernel

_PAYLOADS = ["", ", payload=7", ", payload=iket.payload(2.5)", ", payload=iket.payload(3, dtype=\"uint32\")",
             ", payload=iket.payload(-4, dtype=\"int32\")"]


def gen_instrumented(k: Kernel) -> None:
    c = k.c
    inner = c.choice([gen_elementwise, gen_elementwise, gen_accumulate, gen_serial_var, gen_gemm])
    inner(k)
    k.features.add(inner.__name__)
    lines = k.body.lines
    for number in range(c.int(1, 4)):
        # Before line `at` (at its depth), or at the end (kernel level); never before an
        # `else`, which must follow its `if`.
        spots = [i for i in range(len(lines) + 1) if i == len(lines) or not lines[i].lstrip().startswith(("else", "elif"))]
        at = c.choice(spots)
        indent = "" if at == len(lines) else lines[at][:len(lines[at]) - len(lines[at].lstrip())]
        lines.insert(at, f"{indent}iket.mark(\"m{number}\"{c.choice(_PAYLOADS)})")
        k.features.add("iket_mark_nested" if indent else "iket_mark")
    if k.header.endswith(":") and c.flip(0.7):
        k.header = k.header[:-1] + ", iket.range(\"kernel\"):"
        k.features.add("iket_range")
    k.module_lines.append("from tegula.tools.cuda import iket")
    k.make_context = "iket.session(runtime_payloads=True, disable_cache=False)"


FAMILIES = [(gen_instrumented, 1)]
