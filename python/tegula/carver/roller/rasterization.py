"""TileLang's rasterization plans, as a hint names them: the order blocks walk the output
tiles. `hint.rasterization_plan is not NoRasterization` is how programs read it (TileLang
compares with the class), so a hint holds the class or an instance of another plan."""
from __future__ import annotations


class Rasterization:
    panel_width_ = None

    @property
    def panel_width(self):
        return self.panel_width_


class NoRasterization(Rasterization):
    def __repr__(self) -> str:
        return "<NoRasterization>"


class Rasterization2DRow(Rasterization):
    """Blocks walk panels of `panel_width` rows (T.use_swizzle's order)."""

    def __init__(self, panel_width: int = 4) -> None:
        self.panel_width_ = panel_width

    def __repr__(self) -> str:
        return f"<Rasterization2DRow({self.panel_width_})>"


class Rasterization2DColumn(Rasterization2DRow):
    def __repr__(self) -> str:
        return f"<Rasterization2DColumn({self.panel_width_})>"
