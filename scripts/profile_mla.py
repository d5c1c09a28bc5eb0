"""One MLA decode call to profile: python scripts/profile_mla.py [B] [S] [H]  (run under ncu)."""
import sys

import torch

from tegula.kernels.mla_decode import mla_decode

B, S, H = (int(a) for a in (sys.argv[1:] + ["64", "8192", "128"][len(sys.argv[1:]):]))
q = torch.randn(B, H, 576, device="cuda", dtype=torch.float16)
kv = torch.randn(B, S, 576, device="cuda", dtype=torch.float16)
lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
for _ in range(3):
    mla_decode(q, kv, lens)
torch.cuda.synchronize()
