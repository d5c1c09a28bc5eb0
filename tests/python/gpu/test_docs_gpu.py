"""The documentation's examples on a GPU: every python block of every page runs, in order, in
one namespace per page (the `# gpu` blocks, which launch kernels, among the others; the
`# cpu` ones, which show what happens without a GPU, left out), and prints what the page's
Output block shows. docs/_examples.py runs them; tests/python/cpu/test_docs.py is the
CPU tier.

The Output blocks show what Tegula prints for sm_90a (the generated source, the IR), so
this runs on an sm_90 GPU (H100, H200) and skips, saying so, on others.
"""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

DOCS = Path(__file__).resolve().parents[3] / "docs"
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


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_on_gpu(page, tmp_path):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the pages show the output for sm_90a; this GPU is "
                    f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}")
    results = examples.run_page(DOCS / page, "gpu", str(tmp_path))
    failures = [examples.describe(r) for r in results if r.error is not None or not r.matches]
    assert not failures, "\n\n".join(failures)
    expected = [b for b in examples.blocks(DOCS / page) if b.runs_on("gpu")]
    assert len(results) == len(expected), f"{page}: {len(results)} of {len(expected)} blocks ran"
