"""Where the first call of a shipped entry point spends its time in a new process (cold
cache unless TEGULA_CACHE_DIR is warm): cProfile's top functions by cumulative time.

    python scripts/profile_first_call.py [flash_attention|add] [calls]
"""
import cProfile
import importlib
import pstats
import sys

import torch

import tegula
from tegula import env

env.native()
name = sys.argv[1] if len(sys.argv) > 1 else "flash_attention"
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 1
h = dict(dtype=torch.float16, device="cuda")
if name == "flash_attention":
    fa = importlib.import_module("tegula.kernels.flash_attention")
    q = torch.randn(2, 4096, 32, 128, **h)
    fn = lambda: fa.flash_attention(q, q, q, causal=True)  # noqa: E731
else:
    from tegula.kernels import add
    x = torch.randn(1, 1024, **h)
    add(x, x)
    fn = lambda: add(x, x)  # noqa: E731
torch.cuda.synchronize()
prof = cProfile.Profile()
prof.enable()
for _ in range(calls):
    fn()
torch.cuda.synchronize()
prof.disable()
pstats.Stats(prof).sort_stats("tottime" if calls > 1 else "cumulative").print_stats(22)
