"""Tensor parallelism through torch.distributed on the CPU: two ranks (gloo) shard a small
Llama and Qwen2 model with torch's tensor-parallel API, `apply(ops="torch")` patches them
(the patched structure with torch's ops: local shards, the row-parallel all-reduce, the
cache's local key heads), and every rank's prefill and decode logits equal the unsharded
model's in float32; a sharding the forwards cannot follow is refused by name.
tests/python/gpu/test_tensor_parallel_gpu.py runs the same worker on two GPUs with Tegula's
kernels and CUDA graphs."""
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from helpers import torchrun  # noqa: E402

WORKER = Path(__file__).resolve().parents[1] / "tensor_parallel_worker.py"


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_two_ranks_on_gloo_match_the_unsharded_model(family):
    r = torchrun(WORKER, family, "torch")
    assert r["world"] == 2 and r["device"] == "cpu"
    assert r["report"] == {"rms_norm": 5, "rope": 2, "attention": 2, "mlp": 2}
    assert r["local_heads"] == 2 and r["kv_heads"] == 1       # 4 heads and 2 key heads, halved
    assert len(r["sharded"]) == 5                              # prefill and four decode steps
    assert max(r["sharded"]) < 1e-5, r["sharded"]              # float32: only the summation order differs
    assert "o_proj is column" in r["refused"] and "RowwiseParallel" in r["refused"], r["refused"]


def test_overlapped_products_name_a_bad_argument():
    import torch

    from tegula.integrations.distributed import all_gather_matmul, matmul_reduce_scatter

    a = torch.ones(4, 8)
    with pytest.raises(TypeError, match=r"all_gather_matmul: a_shard must be a torch.Tensor, got list"):
        all_gather_matmul([1.0], a)
    with pytest.raises(ValueError, match=r"all_gather_matmul: a_shard must be a CUDA tensor, got one on cpu"):
        all_gather_matmul(a, a.t())
    with pytest.raises(ValueError, match=r"matmul_reduce_scatter: a must be 2-D, got shape \(8,\)"):
        matmul_reduce_scatter(torch.ones(8), a)
