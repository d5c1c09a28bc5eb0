"""A recommended GEMM tiling under TileLang's Hint names."""
from __future__ import annotations

from .rasterization import NoRasterization


class Hint:
    """`block` (block_M, block_N), `warp` (each warp's share of the block), `rstep`
    (block_K,), `pipeline_stage`, `rasterization_plan`, `use_tc`."""

    def __init__(self, block, warp, rstep, pipeline_stage, rasterization_plan=NoRasterization, use_tc=True):
        self.block = list(block)
        self.warp = list(warp)
        self.rstep = list(rstep)
        self.pipeline_stage = pipeline_stage
        self.rasterization_plan = rasterization_plan
        self.use_tc = use_tc

    @property
    def thread(self) -> list:
        return [self.block[0] // self.warp[0], self.block[1] // self.warp[1]]

    def __repr__(self) -> str:
        return (f"Hint(block={self.block}, warp={self.warp}, rstep={self.rstep}, "
                f"pipeline_stage={self.pipeline_stage}, rasterization_plan={self.rasterization_plan!r})")
