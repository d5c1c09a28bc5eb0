"""Runs TileLang programs on Tegula with only the import changed, and reports which run.

    python scripts/port_examples.py DIR [--jobs 6] [--timeout 240]

Every `*.py` file in DIR runs as `__main__` in its own process, with the name `tilelang`
(and its submodules language, layout, profiler, autotuner, jit, math, testing) bound to
Tegula's: the file itself is not edited. A file passes when it exits 0 (the programs
check their own results against torch). The last line of a failure's output says why.
The programs are not part of this repository: put them in an ignored folder (build/).
"""
import argparse
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

SHIM = '''
import importlib, sys
import tegula
_SUB = ("language", "layout", "profiler", "autotuner", "jit", "math", "testing", "transform", "env")
for _name in _SUB:
    try:
        sys.modules["tilelang." + _name] = importlib.import_module("tegula." + _name)
    except ImportError:
        pass


def __getattr__(name):
    return getattr(tegula, name)


from tegula import *  # noqa: F401,F403
language = tegula.language
'''


def run_one(path, shim_dir, timeout):
    env = dict(os.environ, PYTHONPATH=shim_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, path], cwd=os.path.dirname(path), env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return path, False, f"timed out after {timeout} s"
    lines = [l for l in (proc.stdout + proc.stderr).strip().splitlines() if l.strip()]
    errors = [l for l in lines if "Error" in l or "error" in l]
    return path, proc.returncode == 0, ((errors or lines or [""])[-1]).strip()[:300]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args()
    root = os.path.abspath(args.dir)
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".py"))
    with tempfile.TemporaryDirectory() as shim:
        os.makedirs(os.path.join(shim, "tilelang"))
        with open(os.path.join(shim, "tilelang", "__init__.py"), "w") as f:
            f.write(SHIM)
        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(lambda p: run_one(p, shim, args.timeout), files))
    passed = sum(ok for _, ok, _ in results)
    for path, ok, last in results:
        print(f"{'PASS' if ok else 'FAIL'}  {os.path.basename(path):60} {'' if ok else last}")
    print(f"{passed} of {len(results)} run and check out")


if __name__ == "__main__":
    main()
