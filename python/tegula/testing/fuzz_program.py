"""What a generated program is (fuzz.py's public Arg and Program), apart from generating
and checking them, so that the generators (fuzz_gen.py, fuzz_families*.py) and the
checker (fuzz.py) both import it and not each other."""
from __future__ import annotations

import itertools
import linecache
from dataclasses import dataclass, field

# Relative error ||out - ref|| / ||ref|| allowed for a program whose least precise value
# is of this dtype (float16 / bfloat16 round every intermediate the GPU keeps in them;
# the tensor cores add 8-bit products with fewer bits than float32 keeps).
TOLERANCE = {"float32": 1e-5, "float16": 5e-3, "bfloat16": 4e-2, "int32": 0.0, "float8_e4m3fn": 1e-3,
             "float8_e5m2": 1e-3}


@dataclass
class Arg:
    """One parameter. role: "in" (given), "out" (an out_idx output), "inout" (given,
    written in place), "scalar". values: how inputs are drawn (see make_inputs)."""

    name: str
    role: str
    dtype: str
    shape: tuple = ()
    values: str = "signed"
    scalar: float | int | None = None


@dataclass
class Program:
    source: str
    args: list
    target: str
    tolerance: float = 1e-5
    error_line: int | None = None  # invalid programs: the line the error must name
    error_kind: str = ""
    features: set = field(default_factory=set)
    name: str = "fuzz"
    # For a program the reference cannot run (a warp's lanes together): the call's inputs
    # (make_inputs' list) -> name -> the tensor it must write, computed in torch.
    oracle: object = None

    _counter = itertools.count()

    def build(self, target: str | None = None):
        """Exec the source as a module (registered in linecache, so the frontend can read
        the kernel's source) and compile its kernel: a JITKernel, nothing launched.
        `target` overrides the program's (a GPU run compiles for the GPU it runs on)."""
        source = self.source
        if target is not None:
            source = source.replace(f'TARGET = "{self.target}"', f'TARGET = "{target}"', 1)
        filename = f"<tegula-fuzz-{next(Program._counter)}-{self.name}>"
        lines = source.splitlines(keepends=True)
        linecache.cache[filename] = (len(source), None, lines, filename)
        namespace = {"__name__": f"tegula_fuzz_{self.name}", "__file__": filename}
        # dont_inherit: this module's `from __future__ import annotations` must not turn
        # the program's annotations into strings.
        exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # noqa: S102 - our own generated source
        self.filename = filename
        return namespace["make"]()

    def describe(self) -> str:
        args = ", ".join(f"{a.name}:{a.role}:{a.dtype}{list(a.shape) if a.role != 'scalar' else '=' + str(a.scalar)}"
                         for a in self.args)
        return f"# target={self.target} tolerance={self.tolerance} args: {args}\n{self.source}"


def tolerance_for(dtypes) -> float:
    """The loosest tolerance among the dtypes a program computes in."""
    return max((TOLERANCE.get(d, 1e-5) for d in dtypes), default=1e-5)

