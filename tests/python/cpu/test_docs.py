"""The documentation site (docs/*.md, mkdocs.yml), on the CPU.

- Every python block of every page runs (docs/_examples.py: blocks of a page in order, in one
  namespace, compile-only with TEGULA_TARGET=sm_90a; `# gpu` blocks are left to
  tests/python/gpu/test_docs_gpu.py) and prints what the page's Output block shows.
- The language reference documents exactly the public names of `tegula.language`, each
  under a heading that names it, with the signature the function really has.
- The kernel library page lists exactly the registered `torch.ops.tegula` operators, and the
  pipeline page has a section for every stage the compiler runs.
- `mkdocs build --strict` passes: no broken link, anchor or reference (skipped, saying so,
  where mkdocs is not installed).
"""
import enum
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tegula
import tegula.language as T

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PAGES = sorted(page.name for page in DOCS.glob("*.md"))


def _load_examples():
    name = "tegula_docs_examples"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCS / "_examples.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


examples = _load_examples()


def _failures(results) -> list[str]:
    return [examples.describe(r) for r in results if r.error is not None or not r.matches]


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_print_what_the_page_shows(page, tmp_path):
    results = examples.run_page(DOCS / page, "cpu", str(tmp_path))
    assert not _failures(results), "\n\n".join(_failures(results))
    expected = [b for b in examples.blocks(DOCS / page) if b.runs_on("cpu")]
    assert len(results) == len(expected), f"{page}: {len(results)} of {len(expected)} blocks ran"


def test_examples_runner_compares_outputs_and_reports_errors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 6 * 7\nprint(x)\n```\n\n```text title=\"Output\"\n42\n```\n\n"
        "```python\nprint('took', 1.5, 'ms')\n```\n\n```text title=\"Output\"\ntook ... ms\n```\n\n"
        "```python\n# gpu\nprint(x + 1)\n```\n\n```text title=\"Output\"\n0\n```\n\n"
        "```python\nprint(x)\n```\n\n```text title=\"Output\"\n41\n```\n\n"
        "```bash\nexit 1\n```\n\n"
        "```python\nraise ValueError('the fourth block')\n```\n")
    results = examples.run_page(page, "cpu", str(tmp_path / "work"))
    assert [r.block.line for r in results] == [1, 10, 27, 39]  # the `# gpu` block skipped
    assert [r.matches for r in results[:3]] == [True, True, False]
    assert results[2].printed == "42"
    assert results[3].error is not None and "the fourth block" in results[3].error
    assert "page.md:27: the example printed\n42" in examples.describe(results[2])
    assert examples.update(page, results) == 1
    assert "```text title=\"Output\"\n42\n```\n\n```bash" in page.read_text()


def _headings(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def test_language_reference_documents_exactly_the_public_names():
    public = {name for name in dir(T) if not name.startswith("_")}
    documented = set()
    for heading in _headings((DOCS / "language.md").read_text()):
        documented.update(re.findall(r"\bT\.([A-Za-z_]\w*)", heading.split("{")[0]))
    assert not public - documented, f"tegula.language names without a heading in docs/language.md: " \
                                    f"{sorted(public - documented)}"
    assert not documented - public, f"docs/language.md headings naming no tegula.language name: " \
                                    f"{sorted(documented - public)}"


def _default(value) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


def _signature(name: str, obj) -> str:
    """`T.name(params)` as the reference writes it: defaults as repr, no annotations."""
    params = list(inspect.signature(obj).parameters.values())
    parts, star = [], False
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            parts.append(f"*{p.name}")
            star = True
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            if p.kind is p.KEYWORD_ONLY and not star:
                parts.append("*")
                star = True
            parts.append(p.name if p.default is p.empty else f"{p.name}={_default(p.default)}")
    return f"T.{name}({', '.join(parts)})"


def test_language_reference_shows_each_function_with_its_signature():
    text = (DOCS / "language.md").read_text()
    shown = set(re.findall(r"`(T\.\w+\([^`]*\))`", text))
    callables = {}
    for name in dir(T):
        obj = getattr(T, name)
        if name.startswith("_") or inspect.ismodule(obj) or isinstance(obj, str) or not callable(obj):
            continue
        if inspect.isclass(obj) and issubclass(obj, enum.Enum):
            continue
        callables.setdefault(id(obj), []).append(name)  # aliases (T.Serial, T.symbolic) share one
    missing = []
    for names in callables.values():
        wanted = {_signature(n, getattr(T, n)) for n in names}
        if not wanted & shown:
            missing.append(sorted(wanted)[0])
    assert not missing, "docs/language.md lacks these signatures (or shows them wrong):\n" + "\n".join(missing)


def test_kernel_page_lists_exactly_the_registered_operators():
    from tegula.kernels import _ops

    listed = set(re.findall(r"torch\.ops\.tegula\.(\w+)", (DOCS / "kernels.md").read_text()))
    registered = set(_ops.OPS)
    assert not registered - listed, f"operators missing from docs/kernels.md: {sorted(registered - listed)}"
    assert not listed - registered, f"docs/kernels.md names operators that do not exist: {sorted(listed - registered)}"


def test_pipeline_page_has_a_section_for_every_stage():
    @T.prim_func
    def one(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                A[i] = A[i] + 1.0

    stages = tegula.compile(one, target="sm_90a").stages
    sections = {h.lstrip("#").strip() for h in _headings((DOCS / "pipeline.md").read_text()) if h.startswith("## ")}
    assert not set(stages) - sections, f"stages without a section in docs/pipeline.md: {sorted(set(stages) - sections)}"


def _mkdocs_missing() -> str | None:
    """The first package the site build needs that is not installed, or None."""
    for module in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers", "material"):
        if importlib.util.find_spec(module) is None:
            return module
    return None


def test_site_builds_strict(tmp_path):
    missing = _mkdocs_missing()
    if missing:
        pytest.skip(f"{missing} is not installed (pip install mkdocs 'mkdocstrings[python]' mkdocs-material)")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = run.stdout + run.stderr
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert "WARNING" not in log, log
    reference = (site / "language" / "index.html").read_text()
    for name in ("T.copy", "T.gemm", "T.Pipelined", "T.Fragment"):
        assert f'id="{name}"' in reference, f"no anchor {name} in the built reference"
    assert "wgmma" in (site / "pipeline" / "index.html").read_text()
    kernels = (site / "kernels" / "index.html").read_text()
    assert "flash_attention_backward" in kernels and "H100" in kernels
