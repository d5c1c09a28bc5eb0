"""The package's import structure, on the CPU: the layers of pyproject.toml's
[tool.importlinter] hold (no module imports a layer above its own), the import graph of
tegula (tegula.kernels included) has no cycle at all (a cycle inside one layer would pass
the layers contract), every module sits in a layer, and no module is hidden behind a
same-named attribute of its package (`import tegula.kernels.rope as r` once bound a
function).

The graph is grimp's, imports inside functions included. grimp reads a package from the
one folder it is installed in, while a develop install maps tegula.kernels to kernels/
beside python/tegula: so the checks run, in a subprocess, on a folder of links that puts
the package together as an installed copy has it.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import types
from collections import deque
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is not installed (scripts/setup_env.sh installs it)")
tegula = pytest.importorskip("tegula")
import tegula.kernels  # noqa: E402

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = ROOT / "pyproject.toml"


@pytest.fixture(scope="module")
def assembled(tmp_path_factory) -> Path:
    """A folder holding `tegula/` as installed: links to the package's entries, and
    `kernels` to the folder tegula.kernels is imported from."""
    top = tmp_path_factory.mktemp("assembled")
    package = top / "tegula"
    package.mkdir()
    source = Path(tegula.__path__[0])
    for entry in source.iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    kernels = Path(tegula.kernels.__path__[0])
    if not (package / "kernels").exists():
        (package / "kernels").symlink_to(kernels, target_is_directory=True)
    return top


def _run(assembled: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(assembled))
    return subprocess.run([sys.executable, *args], cwd=assembled, env=env, capture_output=True, text=True,
                          timeout=300)


_GRAPH = textwrap.dedent("""
    import json, grimp
    g = grimp.build_graph("tegula", cache_dir=None)
    edges = {}
    for m in sorted(g.modules):
        edges[m] = {}
        for d in sorted(g.find_modules_directly_imported_by(m)):
            edges[m][d] = [x["line_number"] for x in g.get_import_details(importer=m, imported=d)]
    print(json.dumps(edges))
""")


@pytest.fixture(scope="module")
def graph(assembled) -> dict:
    """importer -> {imported: [line numbers]}, over every module of tegula."""
    done = _run(assembled, "-c", _GRAPH)
    assert done.returncode == 0, done.stderr
    edges = json.loads(done.stdout)
    assert "tegula.kernels" in edges, "the assembled package lacks tegula.kernels"
    return edges


def _layers() -> list[list[str]]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    return [[m.strip() for m in layer.replace("|", ":").split(":")] for layer in contract["layers"]]


def test_the_layers_contract_holds(assembled):
    done = _run(assembled, "-c", "import sys; from importlinter.cli import lint_imports; "
                f"sys.exit(lint_imports(config_filename={str(PYPROJECT)!r}, no_cache=True))")
    assert done.returncode == 0, ("an import reaches a layer above its own (pyproject.toml, "
                                  f"[tool.importlinter]):\n{done.stdout}\n{done.stderr}")


def _cycle_through(edges: dict, start: str, members: set) -> list[str]:
    """The shortest import path from `start` back to itself inside `members`."""
    parent = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in edges.get(node, {}):
            if nxt not in members:
                continue
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return [start]


def _strongly_connected(edges: dict) -> list[set]:
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, {})))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, {}))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(members)
    return found


def test_no_module_imports_itself_through_others(graph):
    cycles = []
    for members in _strongly_connected(graph):
        path = _cycle_through(graph, min(members), members)
        steps = [f"{a} -> {b} (l.{', l.'.join(map(str, graph[a][b]))})" for a, b in zip(path, path[1:])]
        cycles.append(f"{len(members)} modules, e.g.\n    " + "\n    ".join(steps))
    assert not cycles, "import cycles among tegula's modules:\n  " + "\n  ".join(cycles)


def test_every_module_sits_in_a_layer(graph):
    placed = [name for layer in _layers() for name in layer]
    loose = sorted(m for m in graph if m != "tegula" and not any(m == p or m.startswith(p + ".") for p in placed))
    assert not loose, f"modules in no layer of pyproject.toml's [tool.importlinter]: {loose}"


# Modules that share their dotted name with a function on purpose: TileLang's own API has
# both under one name, and programs import from the module by that name (`from
# tilelang.jit import JITKernel`, `iket.session()` of `tilelang/tools/cuda/iket/session.py`).
TILELANG_NAMES = {"tegula.jit", "tegula.tools.cuda.iket.session"}


def test_no_module_hides_behind_an_attribute_of_its_package(graph):
    """`package.name` is the module package/name.py wherever both exist: an attribute of
    that name bound to anything else (a function re-exported over it) makes `import
    package.name as m` bind that instead."""
    hidden = []
    packages = {m.rpartition(".")[0] for m in graph if "." in m}
    for module in sorted(graph):
        parent, _, name = module.rpartition(".")
        if parent not in packages or module in TILELANG_NAMES:
            continue
        value = getattr(importlib.import_module(parent), name, None)
        if value is not None and not (isinstance(value, types.ModuleType) and value.__name__ == module):
            hidden.append(f"{module} (the package's `{name}` is {value!r})")
    assert not hidden, "modules hidden behind a same-named attribute:\n  " + "\n  ".join(hidden)
