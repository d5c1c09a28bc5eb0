"""More families of valid programs for tegula.testing.fuzz: tensor-core programs: chained gemms, attention-shaped loops, warp policies.
Each family is a function of a fuzz_gen.Kernel, listed in FAMILIES with its weight
(fuzz_families.all_families() adds them to the others)."""
from __future__ import annotations

FAMILIES: list = []
