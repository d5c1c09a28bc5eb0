"""Test tiers: a test marked `@pytest.mark.gpu` needs a CUDA GPU and driver, and is
skipped, with the reason shown in the summary (addopts -ra), where there is none. Every
other test must pass on a machine without a GPU.

This directory is on sys.path while the tests run (pytest puts a conftest's directory
there), so a test anywhere below imports the shared helpers as `import helpers`.
"""
import pytest

GPU_SKIP_REASON = "needs a CUDA GPU and driver (none here)"


def pytest_configure(config):
    # pyproject.toml registers it too; this keeps `pytest some/file.py -c /dev/null` quiet.
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and driver")


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _gpu_available():
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
