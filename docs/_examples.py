"""The executed examples of the documentation.

Every ```python block of a page in docs/ runs in the test suite
(tests/python/cpu/test_docs.py on the CPU tier, tests/python/gpu/test_docs_gpu.py on a GPU):

- The python blocks of one page run in order, in one namespace, each from its own file
  named `example.py` (so a DSL error reads `example.py:LINE:COL`, LINE counted from the
  block's first line).
- The CPU tier runs with TEGULA_TARGET=sm_90a: kernels compile (parse, passes, CUDA source),
  nothing launches. A block whose first line starts with `# gpu` launches kernels: only the
  GPU tier runs it, and that tier runs every block of the page in order but those whose
  first line starts with `# cpu` (they show what happens where no GPU is visible).
- A fence whose info string has `title="Output"`, right after a python block (blank lines
  between are fine), is what that block prints to stdout. It is compared line by line,
  trailing spaces ignored; `...` in it matches any text, as doctest's ELLIPSIS.
- A block whose first line is `# torchrun --nproc_per_node=N` is a script of its own: it
  is written to its own file and started by torchrun with N processes (NVLink multicast
  off in their environment), and what they print is its output (the script prints on
  rank 0). The CPU tier hides the GPUs from it; the GPU tier gives it the machine's, so on
  a machine with N GPUs it runs one process a GPU.
- Other fences (bash, text, cuda, diff without the title) are not run.

`python docs/_examples.py [--update] [page.md ...]` runs the CPU tier of the pages (all of
them by default) and reports mismatches; with --update it rewrites each Output block whose
text no longer matches with what the block printed now.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parent
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
OUTPUT_TITLE = 'title="Output"'
GPU_MARK = "# gpu"
CPU_MARK = "# cpu"
TORCHRUN = re.compile(r"^# torchrun --nproc_per_node=(\d+)\s*$")
# NVLink multicast stays off in every process the examples start.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
TORCHRUN_TIMEOUT_S = 600
FILE_NAME = "example.py"
COMPILE_ONLY_TARGET = "sm_90a"


@dataclass
class Fence:
    info: str
    start: int  # index of the opening fence line
    end: int  # index of the closing fence line
    text: str  # the content, dedented by the fence's indent


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence in the page
    code: str
    gpu: bool  # only the GPU tier runs it
    cpu: bool = False  # only the CPU tier runs it
    output: Fence | None = None
    ranks: int = 0  # a `# torchrun` script: its processes

    def runs_on(self, tier: str) -> bool:
        return not (self.gpu and tier == "cpu") and not (self.cpu and tier == "gpu")


@dataclass
class Result:
    block: Block
    printed: str
    error: str | None = None  # a traceback, when the block raised

    @property
    def matches(self) -> bool:
        return self.block.output is None or output_matches(self.block.output.text, self.printed)


def fences(text: str) -> list[Fence]:
    """The fenced code blocks of a markdown text, in order."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        j = i + 1
        while j < len(lines):
            close = FENCE.match(lines[j])
            if close and close["fence"].startswith(fence) and not close["info"].strip():
                break
            j += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        out.append(Fence(m["info"].strip(), i, j, "\n".join(body)))
        i = j + 1
    return out


def language(info: str) -> str:
    return info.split()[0].strip("{.}").lower() if info.split() else ""


def blocks(page: Path) -> list[Block]:
    """The python blocks of a page, each with the Output fence that follows it, if any."""
    text = page.read_text()
    lines = text.split("\n")
    found = fences(text)
    out = []
    for k, f in enumerate(found):
        if language(f.info) != "python":
            continue
        first = f.text.lstrip()
        block = Block(page.name, f.start + 1, f.text, first.startswith(GPU_MARK), first.startswith(CPU_MARK))
        launch = TORCHRUN.match(first.split("\n", 1)[0])
        if launch:
            block.ranks = int(launch[1])
        if k + 1 < len(found) and OUTPUT_TITLE in found[k + 1].info:
            nxt = found[k + 1]
            if all(not ln.strip() for ln in lines[f.end + 1:nxt.start]):
                block.output = nxt
        out.append(block)
    return out


def normalise(printed: str, files: list[str]) -> str:
    for path in sorted(files, key=len, reverse=True):
        printed = printed.replace(path, FILE_NAME)
    return "\n".join(ln.rstrip() for ln in printed.strip("\n").split("\n"))


def output_matches(expected: str, printed: str) -> bool:
    want = "\n".join(ln.rstrip() for ln in expected.strip("\n").split("\n"))
    if "..." not in want:
        return want == printed
    pattern = ".*?".join(re.escape(part) for part in want.split("..."))
    return re.fullmatch(pattern, printed, re.DOTALL) is not None


@contextlib.contextmanager
def _environment(tier: str):
    saved = {k: os.environ.get(k) for k in ("TEGULA_TARGET", "TEGULA_JIT_INDEX")}
    if tier == "cpu":
        os.environ["TEGULA_TARGET"] = COMPILE_ONLY_TARGET
    os.environ["TEGULA_JIT_INDEX"] = "0"  # example files are temporary: nothing to index
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_page(page: Path, tier: str = "cpu", workdir: str | None = None) -> list[Result]:
    """Runs the blocks of `page` for `tier` ("cpu": all but the `# gpu` ones; "gpu": all but
    the `# cpu` ones), in order, in one namespace. Stops at the first block that raises."""
    own = None
    if workdir is None:
        own = tempfile.TemporaryDirectory(prefix="tegula-docs-")
        workdir = own.name
    namespace = {"__name__": "__main__"}
    files, results = [], []
    try:
        with _environment(tier):
            for n, block in enumerate(blocks(page)):
                if not block.runs_on(tier):
                    continue
                folder = Path(workdir) / f"{page.stem}-{n:03d}"
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / FILE_NAME
                path.write_text(block.code + "\n")
                files.append(str(path))
                if block.ranks:
                    printed, error = _torchrun(path, block.ranks, tier)
                    results.append(Result(block, normalise(printed, files), error))
                    if error is not None:
                        break
                    continue
                buffer, error = io.StringIO(), None
                with contextlib.redirect_stdout(buffer):
                    try:
                        exec(compile(block.code + "\n", str(path), "exec"), namespace)
                    except BaseException:  # reported with the block's place in the page
                        error = traceback.format_exc()
                results.append(Result(block, normalise(buffer.getvalue(), files), error))
                if error is not None:
                    break
    finally:
        if own is not None:
            own.cleanup()
    return results


def _torchrun(path: Path, ranks: int, tier: str) -> tuple[str, str | None]:
    """(stdout, None) of the script under torchrun, or (stdout, the failure)."""
    import subprocess

    env = dict(os.environ, **MULTICAST_OFF, OMP_NUM_THREADS="1")
    if tier == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", str(path)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT_S,
                              cwd=str(path.parent))
    except subprocess.TimeoutExpired as e:
        return (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
            f"torchrun did not finish in {TORCHRUN_TIMEOUT_S} s"
    if proc.returncode != 0:
        return proc.stdout, f"torchrun exited with {proc.returncode}:\n{proc.stderr[-6000:]}"
    return proc.stdout, None


def describe(result: Result) -> str:
    """A failure, as a test reports it."""
    where = f"{result.block.page}:{result.block.line}"
    if result.error is not None:
        return f"{where}: the example raised\n{result.error}"
    return (f"{where}: the example printed\n{result.printed}\n--- but the page shows ---\n"
            f"{result.block.output.text}")


def update(page: Path, results: list[Result]) -> int:
    """Rewrites the Output fences of `page` that no longer match; returns how many."""
    lines = page.read_text().split("\n")
    changed = 0
    for result in sorted(results, key=lambda r: -r.block.line):
        out = result.block.output
        if out is None or result.matches or result.error is not None:
            continue
        indent = FENCE.match(lines[out.start])["indent"]
        lines[out.start + 1:out.end] = [indent + ln if ln else ln for ln in result.printed.split("\n")]
        changed += 1
    if changed:
        page.write_text("\n".join(lines))
    return changed


def main(argv: list[str]) -> int:
    write = "--update" in argv
    names = [a for a in argv if not a.startswith("--")]
    pages = [Path(n) if "/" in n else DOCS / n for n in names] or sorted(DOCS.glob("*.md"))
    failed = 0
    for page in pages:
        results = run_page(page, "cpu")
        bad = [r for r in results if r.error is not None or not r.matches]
        for r in bad:
            print(describe(r), file=sys.stderr)
        if write:
            count = update(page, results)
            if count:
                print(f"{page.name}: {count} Output block(s) rewritten", file=sys.stderr)
        failed += sum(r.error is not None for r in bad) if write else len(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
