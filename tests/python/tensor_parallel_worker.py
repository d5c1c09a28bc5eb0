"""One rank of a tensor-parallel check, started by torchrun (tests/python/cpu/test_tensor_parallel.py
with gloo on the CPU, tests/python/gpu/test_tensor_parallel_gpu.py with NCCL, one GPU a
rank):

    torchrun --standalone --nproc_per_node=2 tensor_parallel_worker.py FAMILY OPS [--graph]
    torchrun --standalone --nproc_per_node=2 tensor_parallel_worker.py mla       (GPUs only)
    torchrun --standalone --nproc_per_node=2 tensor_parallel_worker.py overlap   (GPUs only)

Every rank builds the same small model (seeded, on the CPU, then moved), computes the
unsharded model's logits alone, then shards its attention and MLP with torch's
tensor-parallel API (q/k/v and gate/up ColwiseParallel, o_proj and down_proj
RowwiseParallel), patches it with `apply(ops=OPS)` and runs the same prefill and decode
steps (fed the same tokens) on a KVCache: through GraphDecoder with --graph. Rank 0 prints
one JSON line: the relative error of each step's logits against the float32 unsharded
model, and the same for the unsharded model in the run's dtype (the error the dtype
itself makes), and the message of a sharding `apply` must refuse."""
import faulthandler
import gc
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import transformers

import tegula.integrations.transformers as tt

FAMILIES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),   # biases on q, k, v
}
SHAPE = dict(vocab_size=256, hidden_size=256, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)
PLAN = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
BATCH, PROMPT, STEPS = 2, 24, 4


def _rel(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def _model(family, device, dtype):
    config_cls, model_cls = FAMILIES[family]
    torch.manual_seed(0)
    model = model_cls(config_cls(**SHAPE))      # float32 on the CPU: the same weights on every rank
    if family == "qwen2":
        with torch.no_grad():                   # transformers zeroes biases: give them values
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.02)
    return model.to(device, dtype).eval()


def _run(model, tokens, steps, cache):
    """[prefill's last logits, each decode step's], the decode fed `steps` (B, n)."""
    with torch.no_grad():
        out = [model(tokens, past_key_values=cache, use_cache=True).logits[:, -1].float()]
        for i in range(steps.shape[1]):
            out.append(model(steps[:, i:i + 1], past_key_values=cache, use_cache=True).logits[:, -1].float())
    return out


def _graphed(model, cache, tokens, steps):
    """Prefill, then every step replayed by a GraphDecoder that is dropped on return."""
    with torch.no_grad():
        out = [model(tokens, past_key_values=cache, use_cache=True).logits[:, -1].float()]
        decoder = tt.GraphDecoder(model, cache)
        for i in range(steps.shape[1]):
            out.append(decoder.step(steps[:, i:i + 1]).float().clone())
    del decoder
    return out


def _mla_reference(q, kv, lens, scale):
    """float32 multi-head latent attention: q (B, H, 576), kv (B, S, 576), values the first 512."""
    s = torch.einsum("bhd,bsd->bhs", q.float(), kv.float()) * scale
    valid = torch.arange(kv.shape[1], device=kv.device)[None, :] < lens[:, None].long()
    p = torch.softmax(s.masked_fill(~valid[:, None, :], float("-inf")), dim=-1)
    return torch.einsum("bhs,bsd->bhd", p, kv[..., :512].float())


def mla(rank, world, device):
    """MLA decode with the heads split across the ranks, as a tensor-parallel DeepSeek layer
    runs it: every rank holds the whole latent cache and its own heads of q; the gathered
    outputs are the one-GPU call's."""
    from tegula.kernels.mla_decode import mla_decode

    out = {}
    for heads in (128, 16):
        g = torch.Generator(device=device).manual_seed(heads)
        B, S = 4, 1000
        q = torch.randn(B, heads, 576, device=device, generator=g).to(torch.bfloat16)
        kv = torch.randn(B, S, 576, device=device, generator=g).to(torch.bfloat16)
        lens = torch.tensor([1000, 1, 517, 64], dtype=torch.int32, device=device)
        part = heads // world
        local = mla_decode(q[:, rank * part:(rank + 1) * part].contiguous(), kv, lens)
        pieces = [torch.empty_like(local) for _ in range(world)]
        dist.all_gather(pieces, local)
        gathered = torch.cat(pieces, dim=1)
        alone = mla_decode(q, kv, lens)
        ref = _mla_reference(q, kv, lens, 576 ** -0.5)
        out[heads] = {"split": _rel(gathered, ref), "alone": _rel(alone, ref),
                      "equal": bool(torch.equal(gathered, alone)), "local_shape": list(local.shape)}
    return out


def overlap(rank, world, device):
    """all_gather_matmul and matmul_reduce_scatter against NCCL then the product, on ragged
    shapes, every chunk count and both GEMMs; each rank's inputs differ."""
    from tegula.integrations.distributed import all_gather_matmul, matmul_reduce_scatter

    out = []
    for m, K, N in ((37, 96, 130), (256, 512, 384), (5, 64, 72)):
        g = torch.Generator(device=device).manual_seed(1000 * rank + m)
        a = torch.randn(m, K, device=device, generator=g).to(torch.bfloat16)
        b = torch.randn(K, N, device=device, generator=torch.Generator(device=device).manual_seed(m)).to(
            torch.bfloat16) * K ** -0.5
        pieces = [torch.empty_like(a) for _ in range(world)]
        dist.all_gather(pieces, a)
        gathered = torch.cat(pieces)
        ag_ref = gathered.float() @ b.float()
        h = torch.randn(world * m, K, device=device, generator=g).to(torch.bfloat16)     # this rank's columns
        partial = h.float() @ b.float()
        dist.all_reduce(partial)
        rs_ref = partial[rank * m:(rank + 1) * m]
        for chunks in (1, 3, 8):
            for policy in ("torch", "tegula"):
                for transport in ("copy", "nccl"):
                    ag = all_gather_matmul(a, b, chunks=chunks, matmul=policy, transport=transport)
                    again = all_gather_matmul(a, b, chunks=chunks, matmul=policy, transport=transport)
                    rs = matmul_reduce_scatter(h, b, chunks=chunks, matmul=policy)
                    torch.cuda.synchronize()
                    out.append({"shape": [m, K, N], "chunks": chunks, "matmul": policy, "transport": transport,
                                "ag": max(_rel(ag, ag_ref), _rel(again, ag_ref)), "rs": _rel(rs, rs_ref),
                                "ag_shape": list(ag.shape), "rs_shape": list(rs.shape)})
    return out


def main():
    faulthandler.dump_traceback_later(100, exit=True)    # a hung collective shows where it hangs
    if sys.argv[1] in ("mla", "overlap"):
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
        result = (mla if sys.argv[1] == "mla" else overlap)(rank, world, device)
        if rank == 0:
            print(json.dumps({"world": world, sys.argv[1]: result}), flush=True)
        return
    family, ops = sys.argv[1], sys.argv[2]
    graph = "--graph" in sys.argv
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.is_available() and torch.cuda.device_count() >= world
    device = torch.device("cuda", rank) if gpus else torch.device("cpu")
    if gpus:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if gpus else "gloo", device_id=device if gpus else None)
    mesh = init_device_mesh(device.type, (world,))
    dtype = torch.bfloat16 if gpus else torch.float32
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, SHAPE["vocab_size"], (BATCH, PROMPT), generator=g).to(device)
    steps = torch.randint(0, SHAPE["vocab_size"], (BATCH, STEPS), generator=g).to(device)
    transformers_cache = transformers.DynamicCache

    exact = _run(_model(family, device, torch.float32), tokens, steps, transformers_cache())
    alone = _run(_model(family, device, dtype), tokens, steps, transformers_cache())

    model = _model(family, device, dtype)
    for layer in model.model.layers:
        parallelize_module(layer, mesh, PLAN)
    report = tt.apply(model, ops=ops)
    cache = tt.KVCache(model, BATCH, PROMPT + STEPS + 1)
    if graph:
        sharded = _graphed(model, cache, tokens, steps)
        # The decoder's graph, NCCL's all-reduces in it, is gone before the process group is
        # destroyed (a captured collective left alive makes the teardown wait forever).
        torch.cuda.synchronize()
    else:
        sharded = _run(model, tokens, steps, cache)

    # A sharding the patched forwards cannot follow: o_proj split like q_proj.
    wrong = _model(family, device, dtype)
    for layer in wrong.model.layers:
        parallelize_module(layer, mesh, dict(PLAN, **{"self_attn.o_proj": ColwiseParallel()}))
    try:
        tt.apply(wrong, ops=ops)
        refused = None
    except ValueError as e:
        refused = str(e)

    local_heads = model.model.layers[0].self_attn._tegula_heads
    if rank == 0:
        print(json.dumps({
            "world": world, "device": device.type, "dtype": str(dtype), "report": dict(report),
            "local_heads": local_heads, "kv_heads": cache.layers[0].keys.shape[2],
            "sharded": [_rel(a, b) for a, b in zip(sharded, exact)],
            "alone": [_rel(a, b) for a, b in zip(alone, exact)],
            "refused": refused,
        }), flush=True)


if __name__ == "__main__":
    main()
    # The models, meshes and graphs are gone (main's locals) before the teardown: gloo's
    # threads otherwise may be destroyed at exit still running, which aborts the process.
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
