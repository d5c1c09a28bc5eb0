"""Tensor parallelism on two GPUs (NCCL, one process a GPU, torchrun): a small Llama and
Qwen2 model sharded with torch's tensor-parallel API and patched by `apply` run Tegula's
kernels on each rank's heads and columns; prefill and every decode step, eager and replayed
from a CUDA graph (GraphDecoder, the all-reduces inside the graph), are as close to the
float32 unsharded model as the unsharded model in bfloat16 is; MLA decode with its heads
split across the ranks gathers to the one-GPU call's result; the overlapped all-gather and
reduce-scatter products (tegula.integrations.distributed) equal NCCL then the GEMM. The worker is
tests/python/tensor_parallel_worker.py; the CPU tier runs it on gloo."""
from pathlib import Path

import pytest

from helpers import torchrun

pytestmark = [pytest.mark.gpu, pytest.mark.gpu2]

WORKER = Path(__file__).resolve().parents[1] / "tensor_parallel_worker.py"


@pytest.mark.parametrize("family,graph,all_reduce", [("llama", False, "auto"), ("llama", True, "auto"),
                                                     ("llama", True, "nccl"), ("qwen2", False, "auto"),
                                                     ("qwen2", True, "auto")])
def test_two_gpus_match_the_unsharded_model_within_its_own_bf16_error(family, graph, all_reduce):
    """all_reduce "auto": decode's small partial sums through torch's symmetric memory
    (one kernel), "nccl": every all-reduce through NCCL."""
    r = torchrun(WORKER, family, "tegula", *(["--graph"] if graph else []), gpus=True,
                 env={"TEGULA_ALL_REDUCE": all_reduce}, timeout=300)
    assert r["world"] == 2 and r["device"] == "cuda" and r["dtype"] == "torch.bfloat16"
    assert r["local_heads"] == 2 and r["kv_heads"] == 1
    for step, (ours, alone) in enumerate(zip(r["sharded"], r["alone"])):
        # Each step's logits within the unsharded bf16 model's own error of float32, with room
        # for a different (equally valid) rounding order.
        assert ours <= 2.0 * alone + 2e-3, (step, r["sharded"], r["alone"])
    assert "o_proj is column" in r["refused"]


def test_mla_decode_with_its_heads_split_across_two_gpus():
    r = torchrun(WORKER, "mla", gpus=True, timeout=300)
    for heads, m in r["mla"].items():
        assert m["local_shape"] == [4, int(heads) // 2, 512]
        assert m["split"] < 1e-2 and m["split"] <= 1.5 * m["alone"] + 1e-3, (heads, m)


def test_overlapped_all_gather_and_reduce_scatter_products_match_nccl_then_gemm():
    r = torchrun(WORKER, "overlap", gpus=True, timeout=300)
    assert len(r["overlap"]) == 3 * 3 * 2 * 2      # shapes, piece counts, GEMMs, all-gather transports
    for case in r["overlap"]:
        m, K, N = case["shape"]
        assert case["ag_shape"] == [2 * m, N] and case["rs_shape"] == [m, N], case
        assert case["ag"] < 1e-2 and case["rs"] < 1e-2, case       # bf16 products against float32
