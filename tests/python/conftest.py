"""Test tiers: a test marked `@pytest.mark.gpu` needs a CUDA GPU and driver, and is
skipped, with the reason shown in the summary (addopts -ra), where there is none; one
marked `@pytest.mark.gpu2` needs two, and is skipped where there are fewer. Every other
test must pass on a machine without a GPU.

This directory is on sys.path while the tests run (pytest puts a conftest's directory
there), so a test anywhere below imports the shared helpers as `import helpers`.
"""
import pytest

GPU_SKIP_REASON = "needs a CUDA GPU and driver (none here)"
GPU2_SKIP_REASON = "needs two CUDA GPUs ({} here)"


def pytest_configure(config):
    # pyproject.toml registers it too; this keeps `pytest some/file.py -c /dev/null` quiet.
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and driver")
    config.addinivalue_line("markers", "gpu2: needs two CUDA GPUs")


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config, items):
    count = _gpu_count()
    if count >= 2:
        return
    for item in items:
        if "gpu" in item.keywords and count == 0:
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))
        elif "gpu2" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=GPU2_SKIP_REASON.format(count)))
