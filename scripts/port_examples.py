"""Runs TileLang's programs and language tests on Tegula with only the import changed, and
tells what happens to each.

    python scripts/port_examples.py CHECKOUT [--jobs 16] [--timeout 120] [--json tegula.json]
    python scripts/port_examples.py CHECKOUT --engine tilelang --json tilelang.json
    python scripts/port_examples.py --compare tilelang.json tegula.json

CHECKOUT is a TileLang checkout (any folder with examples/ and testing/python/language/;
`git -C MIRROR archive HEAD examples testing | tar -x -C build/tilelang-src` makes one), or
a folder of programs (its *.py files are run as examples). Two suites run, each file in its
own process, `--jobs` at a time:

- examples: every examples/**.py with a `__main__` block (test_*.py and regression_*.py
  left out: they call the same programs through pytest), run as `python FILE` in its folder
  with a per-program `--timeout`; folders and files of TileLang's AMD, Metal, Ascend, WebGPU
  and CuTe-DSL backends are not run (counted as "other backend");
- language tests: testing/python/language/*.py, one `python -m pytest -q -rA FILE` each
  (`--test-timeout` per file), with a small plugin that records every test's outcome and
  exception as it finishes, so a file that times out or crashes keeps the results before.

With `--engine tegula` (the default) the name `tilelang` is Tegula's package, its submodules
Tegula's of the same name (`tilelang.language` is `tegula.language`, `tilelang.utils.tensor`
is `tegula.utils.tensor`, ...): a submodule Tegula lacks is a ModuleNotFoundError, as it
would be after `import tegula as tilelang`. The files are not edited. `--engine tilelang`
runs them as they are, against the TileLang the environment imports. Each result is one of:

  pass         exit 0 (the programs check their own results against torch)
  wrong        the program's own check failed (an AssertionError outside the engine, a mismatch)
  text         a check of TileLang's own generated source or error wording failed (the test
               looks for `tl::MaxOpNan`, `__ldg(` or a message regex): no number is involved
  compile      a compile error, at the DSL line when the engine gives it
  missing      a tilelang / T name the engine lacks (AttributeError, ImportError, an unknown
               keyword argument), named
  dependency   a package other than tilelang is missing (`tvm` counts here), or the program's
               own CUDA extension (torch.utils.cpp_extension, nvcc) failed to build
  timeout      ran past its time
  crash        killed by a signal, a CUDA error, or a non-zero exit without a traceback
  error        any other exception (type and message given)
  skip         a test that skipped itself (no GPU, compute capability, package)

It prints one table (a row per example, a row per language test file; -v: per test) and
a summary line per suite; `--json FILE` writes every result (with the latency a program
prints for its own kernel, when it prints one) for `--compare A B`, which prints what B does
on every program and test A passes (each of A and B a file or a comma list of files).

`--jobs` processes run at once, on the one GPU (`--gpus 0,1` spreads them over several);
`--deadline SECONDS` bounds the whole run: what is still running then is stopped, and it and
what never started are reported as "not run". Suites alternate, so a deadline leaves both
partly done. An example that ran out of GPU memory beside the others runs again alone at the
end. `--compare` also counts the language tests that do not import `tvm` (a `tvm` dependency
in B, in the file or the test itself).

TileLang itself, for the side-by-side run on an offline GPU machine (Python 3.12):
`bash scripts/prepare_tilelang_wheels.sh` puts TileLang 0.1.15 and the wheels it needs in
.whl/ (about 38 MiB, trimmed to what its import and kernel builds read); carry .whl and the
checkout (build/tilelang-src) there, then

    python3 -m pip install -q --no-index --no-deps --target /tmp/tl .whl/*.whl
    PYTHONPATH=/tmp/tl python3 scripts/port_examples.py build/tilelang-src --engine tilelang --json /tmp/tl.json
    python3 scripts/port_examples.py build/tilelang-src --json /tmp/tg.json
    python3 scripts/port_examples.py --compare /tmp/tl.json /tmp/tg.json

The programs are not part of this repository: keep them in an ignored folder (build/).
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|out of memory")
STATUSES = ("pass", "wrong", "text", "compile", "missing", "dependency", "timeout", "crash", "error", "skip", "not run")
OTHER_BACKEND_DIRS = {"amd", "rocm", "hip", "metal", "ascend", "npu", "webgpu", "cutedsl", "cute_dsl"}
OTHER_BACKEND_SOURCE = re.compile(
    r"^\s*(from|import)\s+tilelang\.(rocm|metal|webgpu|ascend|contrib\.cutedsl)\b"
    r"|target\s*=\s*[\"'](hip|metal|rocm|cutedsl)", re.M)
ENGINE_DIRS = {"tegula", "tilelang", "tvm", "tvm_ffi"}

# ---------------------------------------------------------------- what runs in the child processes

# `tilelang` is Tegula's package and `tilelang.X.Y` Tegula's `tegula.X.Y`, the same module
# objects (no second copy of any state).
SHIM = '''
import importlib, importlib.abc, importlib.util, sys
import tegula


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("tilelang."):
            return None
        try:
            found = importlib.util.find_spec("tegula." + fullname[len("tilelang."):])
        except ModuleNotFoundError:
            return None
        return None if found is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module("tegula." + spec.name[len("tilelang."):])

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Alias())
sys.modules["tilelang"] = tegula
'''

# A pytest plugin: one JSON line per event, written as it happens.
PLUGIN = '''
import json, os, sys, traceback
import pytest

_OUT = os.environ["PORT_RESULTS"]
_ROOT = os.environ.get("PORT_CHECKOUT", "")


def _write(record):
    with open(_OUT, "a") as f:
        f.write(json.dumps(record) + "\\n")


def pytest_configure(config):
    # TileLang's testing/conftest.py puts the checkout first on sys.path, for its in-tree
    # package: the engine under test must be the one this run chose.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _ROOT]


def pytest_runtest_logstart(nodeid, location):
    _write({"event": "start", "id": nodeid})


def pytest_exception_interact(node, call, report):
    exc, tb = call.excinfo.value, call.excinfo.tb
    _write({"event": "exception", "id": report.nodeid, "when": report.when,
            "type": type(exc).__module__ + "." + type(exc).__qualname__,
            "message": "".join(traceback.format_exception_only(type(exc), exc)).strip(),
            "frames": [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(tb)][-12:]})


def _report(report):
    record = {"event": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome}
    if hasattr(report, "wasxfail"):
        record["xfail"] = True
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        record["reason"] = str(report.longrepr[2])
    elif report.outcome == "failed":
        record["text"] = str(report.longreprtext)[-1500:]
    _write(record)


pytest_runtest_logreport = _report


def pytest_collectreport(report):
    if report.outcome != "passed":
        _report(report)
'''


def write_helpers(root: str, engine: str, checkout: str) -> dict:
    """The child processes' environment: the plugin always, the shim for Tegula."""
    os.makedirs(os.path.join(root, "tilelang"), exist_ok=True)
    with open(os.path.join(root, "tegula_port_plugin.py"), "w") as f:
        f.write(PLUGIN)
    if engine == "tegula":
        with open(os.path.join(root, "tilelang", "__init__.py"), "w") as f:
            f.write(SHIM)
    else:
        shutil.rmtree(os.path.join(root, "tilelang"))
    env = dict(os.environ, PYTHONUNBUFFERED="1", PORT_CHECKOUT=checkout)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------- what to run

def other_backend(path: str, root: str) -> bool:
    parts = set(os.path.relpath(path, root).lower().split(os.sep)[:-1])
    if parts & OTHER_BACKEND_DIRS:
        return True
    with open(path, errors="replace") as f:
        return bool(OTHER_BACKEND_SOURCE.search(f.read()))


def has_main(path: str) -> bool:
    with open(path, errors="replace") as f:
        return re.search(r"^if\s+__name__\s*==\s*[\"']__main__[\"']", f.read(), re.M) is not None


def discover(root: str, suites: set, only: str | None):
    """(examples, language test files, examples of other backends), as absolute paths."""
    examples, tests, other = [], [], []
    example_root = os.path.join(root, "examples")
    test_root = os.path.join(root, "testing", "python", "language")
    if not os.path.isdir(example_root) and not os.path.isdir(test_root):
        example_root, flat = root, True  # a plain folder of programs
    else:
        flat = False
    if "examples" in suites and os.path.isdir(example_root):
        for folder, dirs, files in os.walk(example_root):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")) and not flat)
            for name in sorted(files):
                path = os.path.join(folder, name)
                if not name.endswith(".py") or name.startswith(("test_", "regression_")) or name == "conftest.py":
                    continue
                if not flat and not has_main(path):
                    continue
                (other if other_backend(path, example_root) else examples).append(path)
    if "language" in suites and os.path.isdir(test_root):
        tests = sorted(os.path.join(test_root, n) for n in os.listdir(test_root)
                       if n.startswith("test_") and n.endswith(".py"))
    parts = [o for o in (only or "").split(",") if o]
    keep = (lambda p: any(o in os.path.relpath(p, root) for o in parts)) if parts else (lambda p: True)
    return [p for p in examples if keep(p)], [p for p in tests if keep(p)], [p for p in other if keep(p)]


# ---------------------------------------------------------------- running

def run_process(cmd, cwd, env, timeout, log_stem):
    """(return code or None on timeout, seconds, stdout, stderr). The child gets its own
    session, so a timeout ends everything it started too."""
    start = time.monotonic()
    with open(log_stem + ".out", "w+") as out, open(log_stem + ".err", "w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
        out.seek(0)
        err.seek(0)
        return rc, time.monotonic() - start, out.read(), err.read()


class Runner:
    def __init__(self, args, root, env, logs):
        self.args, self.root, self.env, self.logs = args, root, env, logs
        self.stop_at = time.monotonic() + args.deadline if args.deadline else None
        self.gpus = [g for g in (args.gpus or "").split(",") if g]
        self.count = 0

    def _env(self, extra=None):
        env = dict(self.env, **(extra or {}))
        if self.gpus:
            self.count += 1
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[self.count % len(self.gpus)]
        return env

    def _budget(self, timeout):
        if self.stop_at is None:
            return timeout
        return min(timeout, self.stop_at - time.monotonic())

    def _stem(self, path):
        return os.path.join(self.logs, os.path.relpath(path, self.root).replace(os.sep, "__"))

    def example(self, path):
        rel = os.path.relpath(path, self.root)
        timeout = self._budget(self.args.timeout)
        if timeout <= 0:
            return [result("examples", rel, rel, "not run", "the deadline had passed")]
        rc, seconds, out, err = run_process([sys.executable, path], os.path.dirname(path), self._env(), timeout,
                                            self._stem(path))
        status, detail = classify(rc, parse_traceback(err), out + err, self.root, timeout)
        if rc is None and timeout < self.args.timeout:
            status, detail = "not run", f"stopped at the deadline, after {seconds:.0f} s"
        return [result("examples", rel, rel, status, detail, seconds, program_latency(out) if rc == 0 else None)]

    def test_file(self, path):
        rel = os.path.relpath(path, self.root)
        timeout = self._budget(self.args.test_timeout)
        if timeout <= 0:
            return [result("language", rel, rel, "not run", "the deadline had passed")]
        stem = self._stem(path)
        events = stem + ".jsonl"
        cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "tegula_port_plugin", path]
        rc, seconds, out, err = run_process(cmd, os.path.dirname(path), self._env({"PORT_RESULTS": events}), timeout,
                                            stem)
        records = []
        if os.path.exists(events):
            with open(events) as f:
                records = [json.loads(line) for line in f if line.strip()]
        results = test_results(rel, records, rc, seconds, out + err, self.root, timeout)
        if rc is None and timeout < self.args.test_timeout:
            for r in results:
                if r["status"] == "timeout":
                    r["status"], r["detail"] = "not run", f"stopped at the deadline, after {seconds:.0f} s"
        return results


def result(suite, rid, file, status, detail="", seconds=None, latency=None):
    record = {"suite": suite, "id": rid, "file": file, "status": status, "detail": detail}
    if seconds is not None:
        record["seconds"] = round(seconds, 2)
    if latency is not None:
        record["latency_ms"] = latency
    return record


def test_results(rel, records, rc, seconds, output, root, timeout):
    """One result per test of the file (a file that fails to import is one result)."""
    by_id = collections.OrderedDict()
    for r in records:
        by_id.setdefault(r["id"], []).append(r)
    results = []
    for nodeid, events in by_id.items():
        rid = rel + ("::" + nodeid.split("::", 1)[1] if "::" in nodeid else "")
        failed = [e for e in events if e["event"] == "report" and e["outcome"] == "failed"]
        skipped = [e for e in events if e["event"] == "report" and e["outcome"] == "skipped"]
        passed = [e for e in events if e["event"] == "report" and e["when"] == "call" and e["outcome"] == "passed"]
        if failed:
            when = failed[0]["when"]
            exc = next((e for e in events if e["event"] == "exception" and e["when"] == when), None)
            if exc is None:
                text = failed[0].get("text", "").strip().splitlines()
                status, detail = "error", (text[-1] if text else f"failed in {when}")
            else:
                status, detail = classify(1, exc, "", root, timeout)
        elif skipped:
            reason = re.sub(r"^Skipped: ", "", skipped[0].get("reason", ""))
            status, detail = "skip", ("xfail: " if skipped[0].get("xfail") else "") + reason
        elif passed:
            status, detail = "pass", ""
        elif rc is None:
            status, detail = "timeout", f"the file ran past {timeout:.0f} s during this test"
        else:
            status, detail = "crash", f"the process ended during this test (exit status {rc})"
        results.append(result("language", rid, rel, status, detail))
    if not results or (rc is None and all(r["status"] != "timeout" for r in results)):
        status, detail = classify(rc, parse_traceback(output), output, root, timeout)
        if not results and rc == 5:
            status, detail = "skip", "no tests collected"
        elif not results and status == "pass":
            status, detail = "error", f"pytest exit status {rc} and no test results"
        results.append(result("language", rel, rel, status, detail))
    for r in results:
        r["seconds"] = round(seconds, 2)  # the file's time
    return results


def program_latency(stdout: str):
    """The latency the program prints for the engine's kernel ("TileLang: 0.52 ms",
    "Best latency: 0.41"), in its own unit (ms in TileLang's examples); None if none."""
    for line in stdout.splitlines():
        m = re.match(r"(?i)\s*(tile-?lang|best)[\w ]*?:\s*([0-9]*\.?[0-9]+(?:e[-+]?\d+)?)\s*(ms)?\s*$", line)
        if m:
            return float(m.group(2))
    return None


# ---------------------------------------------------------------- classification

def parse_traceback(stderr: str):
    """The last traceback of a process's stderr as {"type", "message", "frames"}; None if none."""
    at = stderr.rfind("Traceback (most recent call last):")
    if at < 0:
        return None
    lines = stderr[at:].splitlines()[1:]
    frames, i = [], 0
    # Frames are indented; a caret line of code the engine re-mapped may not be.
    while i < len(lines) and (not lines[i].strip() or lines[i][0].isspace() or re.fullmatch(r"[\s^~]+", lines[i])):
        m = re.match(r'\s+File "(.+)", line (\d+), in (.+)', lines[i])
        if m:
            frames.append([m.group(1), int(m.group(2)), m.group(3)])
        i += 1
    message = "\n".join(lines[i:i + 20]).strip()
    m = re.match(r"([A-Za-z_][\w.]*)(:|$)", message)
    return {"type": m.group(1) if m else "", "message": message, "frames": frames}


def engine_name(name: str) -> str:
    """A module or attribute as a TileLang program spells it: tegula.language -> T."""
    name = re.sub(r"^tegula\b", "tilelang", name)
    return re.sub(r"^tilelang\.language\b", "T", name)


def _is_engine_frame(path: str, root: str) -> bool:
    path = os.path.abspath(path)
    return not path.startswith(root + os.sep) and bool(set(path.split(os.sep)) & ENGINE_DIRS)


def _missing(message: str):
    """('missing'|'dependency', name) for an attribute or import the engine lacks, else None."""
    m = re.search(r"No module named '([\w.]+)'", message)
    if m:
        name = m.group(1)
        if name.split(".")[0] in ("tilelang", "tegula") and name != "tilelang":
            return "missing", engine_name(name)
        return "dependency", name.split(".")[0]
    m = re.search(r"cannot import name '(\w+)' from '([\w.]+)'", message)
    if m:
        what, module = m.groups()
        if module.split(".")[0] not in ("tilelang", "tegula"):
            return "dependency", module.split(".")[0]
        return ("dependency", "tvm") if what == "tvm" else ("missing", f"{engine_name(module)}.{what}")
    m = re.search(r"module '([\w.]+)' has no attribute '(\w+)'", message)
    if m:
        module, what = m.groups()
        if module.split(".")[0] in ("tilelang", "tegula"):
            return ("dependency", "tvm") if what == "tvm" else ("missing", f"{engine_name(module)}.{what}")
        return None
    m = re.search(r"'(\w+)' object has no attribute '(\w+)'", message)
    if m and m.group(1) not in ("NoneType", "int", "float", "str", "list", "dict", "tuple", "bool", "Tensor"):
        return "missing", f"{m.group(1)}.{m.group(2)}"
    m = re.search(r"([\w.]+)\(\) got an unexpected keyword argument '(\w+)'", message)
    if m:
        return "missing", f"{engine_name(m.group(1))}({m.group(2)}=)"
    m = re.fullmatch(r"AttributeError: (\w+)", message.strip())  # an enum's or a namespace's own lookup
    if m:
        return "missing", m.group(1)
    return None


# A program that compiles CUDA code of its own with torch.utils.cpp_extension (nvcc, ninja
# and a visible GPU's architecture) before any kernel of the engine runs: its failure there
# says nothing about the engine.
_EXTENSION = "torch.utils.cpp_extension: the program builds its own CUDA extension with nvcc"


def _builds_extension(path: str) -> bool:
    return path.replace(os.sep, "/").endswith("torch/utils/cpp_extension.py")


def classify(rc, exc, output: str, root: str, timeout: float = 0):
    """(status, detail) of one run: its return code (None: timed out), its exception as
    parse_traceback gives it (or None), and its output."""
    if rc is None:
        return "timeout", f"after {timeout:.0f} s"
    if exc is None:
        if rc == 0:
            return "pass", ""
        last = next((l.strip() for l in reversed(output.splitlines()) if l.strip()), "")
        if rc < 0:
            return "crash", f"killed by {signal.Signals(-rc).name}" + (f": {last[:200]}" if last else "")
        return "crash", f"exit status {rc} without a traceback" + (f": {last[:200]}" if last else "")
    kind = exc["type"].rsplit(".", 1)[-1]
    message = exc["message"]
    if kind == "CollectError":  # pytest's wrapper of an ImportError: its last "E   Type: message" line
        inner = re.findall(r"^E\s+([\w.]+): (.*)$", message, re.M)
        if inner:
            kind, message = inner[-1][0].rsplit(".", 1)[-1], ": ".join(inner[-1])
    text = re.sub(rf"^({re.escape(exc['type'])}|{kind}):\s*", "", message)
    first = text.splitlines()[0] if text else kind
    frames = exc.get("frames") or []
    if any(_builds_extension(f[0]) for f in frames):
        return "dependency", f"{_EXTENSION} ({kind}: {first[:160]})"
    if re.search(r"CUDA error|CUDA_ERROR|illegal memory access|misaligned address|unspecified launch failure", text):
        return "crash", f"{kind}: {first[:240]}"
    if kind.endswith(("CompileError", "CompilationError")):
        where = re.match(r"(\S+?):(\d+):(?:\d+:)?\s*(.*)", first)
        line = f"{os.path.basename(where.group(1))}:{where.group(2)}" if where else ""
        inner = where.group(3) if where else first
        missing = _missing(inner)
        if missing:
            return missing[0], f"{missing[1]} (at {line})" if line else missing[1]
        return "compile", f"{line}: {inner[:240]}" if line else inner[:240]
    if exc["type"].split(".")[0] in ("tvm", "tvm_ffi") or kind in ("TVMError", "InternalError"):  # TileLang's compiler
        return "compile", f"{kind}: {first[:240]}"
    if kind in ("ModuleNotFoundError", "ImportError", "AttributeError", "TypeError"):
        missing = _missing(f"{kind}: {first}")
        if missing:
            return missing
    if kind == "AssertionError" or re.search(r"(?i)mismatch|not close", first):
        last = frames[-1] if frames else None
        internal = last and _is_engine_frame(last[0], root) and not re.search(r"(?i)assert|close|compare", last[2])
        if not internal:
            # A check of printed code rather than of numbers: the generated CUDA, TileLang's
            # host code (its TVM FFI calls), or the printed IR (`kernel NAME(...)`).
            if re.search(r"Generated by Tegula|Regex pattern did not match|in (the generated CUDA )?source|TVMFFI|"
                         r"stack_ffi_any|in 'kernel \w+\(", text):
                return "text", first[:240]
            return "wrong", first[:240]
        return "error", f"AssertionError in {os.path.basename(last[0])}:{last[1]} ({last[2]}): {first[:200]}"
    return "error", f"{kind}: {first[:240]}"


# ---------------------------------------------------------------- reporting

def summary(results, suite: str) -> str:
    counts = collections.Counter(r["status"] for r in results if r["suite"] == suite)
    total = sum(counts.values())
    parts = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
    if suite == "language":
        files = {r["file"] for r in results if r["suite"] == suite}
        return f"language tests: {counts['pass']} pass of {total} ({parts}; {len(files)} files)"
    return f"{suite}: {parts or 'none'} (of {total})"


def missing_names(results) -> list:
    names = collections.Counter()
    for r in results:
        if r["status"] in ("missing", "dependency"):
            names[(r["status"], r["detail"].split(" (at ")[0])] += 1
    return names.most_common()


def print_table(results, verbose: bool):
    rows = []
    for suite in ("examples", "language"):
        chosen = [r for r in results if r["suite"] == suite]
        if suite == "language" and not verbose:
            chosen = file_rows(chosen)
        rows += chosen
    width = max([len(r["id"]) for r in rows] + [10])
    for r in rows:
        extra = f"  [{r['latency_ms']:.3g} ms]" if r.get("latency_ms") is not None else ""
        print(f"{r['status']:<10} {r['id']:<{width}}  {r['detail'][:160]}{extra}")


def file_rows(results) -> list:
    """One row per language test file: its counts and its commonest problem."""
    rows = []
    for file in dict.fromkeys(r["file"] for r in results):
        mine = [r for r in results if r["file"] == file]
        counts = collections.Counter(r["status"] for r in mine)
        problems = collections.Counter((r["status"], r["detail"]) for r in mine if r["status"] not in ("pass", "skip"))
        worst = problems.most_common(1)[0][0] if problems else None
        status = worst[0] if worst else ("pass" if counts["pass"] else "skip")
        detail = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
        rows.append({"id": file, "status": status, "detail": detail + (f"; {worst[1]}" if worst else "")})
    return rows


def load_runs(paths: str) -> dict:
    """One run from --json files (a comma list: say, one per suite or per device call)."""
    runs = []
    for path in paths.split(","):
        with open(path) as f:
            runs.append(json.load(f))
    return dict(runs[0], results=[r for run in runs for r in run["results"]])


def compare(path_a: str, path_b: str):
    """What B does on everything A passes (A: usually TileLang, B: Tegula)."""
    a, b = load_runs(path_a), load_runs(path_b)
    theirs = {r["id"]: r for r in a["results"]}
    ours = {r["id"]: r for r in b["results"]}
    rows = []
    for rid, r in theirs.items():
        if r["status"] != "pass":
            continue
        mine = ours.get(rid) or ours.get(r["file"]) or {"status": "not run", "detail": ""}
        speed = ""
        if r.get("latency_ms") and mine.get("latency_ms"):
            speed = f"  [{r['latency_ms']:.3g} -> {mine['latency_ms']:.3g} ms]"
        rows.append((r["suite"], rid, mine["status"], mine.get("detail", ""), speed))
    width = max([len(row[1]) for row in rows] + [10])
    print(f"{'':10} what {b['engine']} does on what {a['engine']} passes")
    for suite, rid, status, detail, speed in rows:
        print(f"{status:<10} {rid:<{width}}  {detail[:150]}{speed}")
    for suite in ("examples", "language"):
        mine = [row for row in rows if row[0] == suite]
        counts = collections.Counter(row[2] for row in mine)
        parts = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
        print(f"{suite}: {a['engine']} passes {len(mine)}; {b['engine']} on those: {parts or 'nothing'}")
    # The language tests that need TVM's own Python API (a `tvm` dependency, in the file or the test).
    own = [row for row in rows if row[0] == "language" and not (row[2] == "dependency" and "tvm" in row[3])]
    if own:
        passed = sum(row[2] == "pass" for row in own)
        print(f"language tests that do not import tvm: {b['engine']} passes {passed} of the {len(own)} "
              f"{a['engine']} passes ({100 * passed / len(own):.0f} %)")
    extra = [rid for rid, r in ours.items() if r["status"] == "pass" and theirs.get(rid, {}).get("status") != "pass"]
    if extra:
        print(f"{b['engine']} passes {len(extra)} that {a['engine']} does not: " + ", ".join(extra[:20]))


# ---------------------------------------------------------------- main

def out_of_memory(r) -> bool:
    return r["status"] in ("error", "crash") and bool(OUT_OF_MEMORY.search(r.get("detail") or ""))


def rerun_out_of_memory(runner, root: str, results: list) -> list:
    """Examples that ran out of GPU memory while others shared the card, run again alone."""
    again = [r for r in results if r["suite"] == "examples" and out_of_memory(r)]
    for r in again:
        rerun = runner.example(os.path.join(root, r["file"]))
        if rerun and rerun[0]["status"] != "not run":
            rerun[0]["detail"] = (rerun[0].get("detail") or "") + " (run again alone: out of memory beside others)"
            results[results.index(r)] = rerun[0]
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", nargs="?", help="a TileLang checkout (examples/, testing/python/language/)")
    ap.add_argument("--engine", choices=("tegula", "tilelang"), default="tegula")
    ap.add_argument("--suite", choices=("all", "examples", "language"), default="all")
    ap.add_argument("--only", help="run only the files whose path contains this (or one of a comma list); "
                    "with --jobs 1, the latencies the programs print are a speed table (--compare shows both)")
    ap.add_argument("--jobs", type=int, default=min(os.cpu_count() or 4, 16))
    ap.add_argument("--timeout", type=float, default=120, help="seconds per example program")
    ap.add_argument("--test-timeout", type=float, default=300, help="seconds per language test file")
    ap.add_argument("--deadline", type=float, default=0, help="start nothing after this many seconds (0: no limit)")
    ap.add_argument("--gpus", help="comma list of CUDA devices to spread the processes over (e.g. 0,1)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--logs", help="keep every process's output in this folder")
    ap.add_argument("--list", action="store_true", help="print what would run, run nothing")
    ap.add_argument("-v", "--verbose", action="store_true", help="one row per language test, not per file")
    ap.add_argument("--compare", nargs=2, metavar=("A_JSON", "B_JSON"), help="each a --json file, or a comma list")
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return 0
    if not args.checkout:
        ap.error("a checkout is needed (or --compare A B)")
    root = os.path.abspath(args.checkout)
    suites = {"examples", "language"} if args.suite == "all" else {args.suite}
    examples, tests, other = discover(root, suites, args.only)
    if args.list:
        for path in tests + examples:
            print(os.path.relpath(path, root))
        print(f"{len(examples)} examples, {len(tests)} language test files; {len(other)} examples of other backends")
        return 0
    helpers = tempfile.mkdtemp(prefix="port-")
    logs = os.path.abspath(args.logs) if args.logs else os.path.join(helpers, "logs")
    os.makedirs(logs, exist_ok=True)
    try:
        runner = Runner(args, root, write_helpers(os.path.join(helpers, "env"), args.engine, root), logs)
        # Alternate the suites, so a deadline leaves both partly run rather than one not at all.
        work = [w for pair in itertools.zip_longest([(runner.test_file, p) for p in tests],
                                                    [(runner.example, p) for p in examples]) for w in pair if w]
        with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
            results = [r for part in pool.map(lambda w: w[0](w[1]), work) for r in part]
        results = rerun_out_of_memory(runner, root, results)
    finally:
        shutil.rmtree(helpers, ignore_errors=True)
    print_table(results, args.verbose)
    for suite in ("examples", "language"):
        if any(r["suite"] == suite for r in results):
            print(summary(results, suite))
    if other:
        print(f"not run: {len(other)} examples of other backends (AMD, Metal, Ascend, WebGPU, CuTe DSL)")
    names = missing_names(results)
    if names:
        print("missing, by how many results need it: " + ", ".join(f"{n} {c}" for (_, n), c in names[:25]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"engine": args.engine, "checkout": root, "python": sys.version.split()[0],
                       "created": time.strftime("%Y-%m-%d %H:%M:%S"), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
