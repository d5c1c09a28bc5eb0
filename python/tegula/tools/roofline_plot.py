"""The roofline picture: log-log, FLOPs per DRAM byte across, TFLOP/s up; the device's
compute roofs (fp16/bf16 tensor core, fp32 CUDA core) level, the memory roof rising with
the copy bandwidth (and the datasheet's HBM bandwidth, dotted, when it differs); one point
per kernel, labeled.

A timed result sits at its measured TFLOP/s. An untimed one (a dry run without a GPU) sits
on the roof at its arithmetic intensity, where the roofline says it could be at best,
drawn hollow. A kernel without FLOPs (a transpose) has no place on a log axis: it is
listed under the plot with its share of copy bandwidth instead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    intensity: float       # FLOPs per DRAM byte
    tflops: float          # measured, or the roof's at that intensity when `measured` is False
    measured: bool
    bound: str


@dataclass(frozen=True)
class RooflinePlot:
    points: list           # RooflinePoint, in the order given
    unplotted: list        # (label, reason) of the results without FLOPs
    roofs: dict            # "tensor TFLOP/s", "fp32 TFLOP/s", "copy GB/s", "HBM GB/s"
    path: str | None
    figure: object         # the matplotlib Figure


def attainable_tflops(intensity: float, peak_tflops: float, gbs: float) -> float:
    """The roofline: min(peak, bandwidth x intensity), in TFLOP/s."""
    return min(peak_tflops, gbs * 1e-3 * intensity)


def roofline_points(results, labels=None):
    """(points, unplotted): each result's place on the roofline (see the module note)."""
    labels = list(labels) if labels is not None else [r.name for r in results]
    if len(labels) != len(results):
        raise ValueError(f"labels: {len(labels)} given for {len(results)} results")
    points, unplotted = [], []
    for label, r in zip(labels, results):
        if r.flops == 0 or r.dram_bytes == 0:
            share = f", {r.bandwidth_fraction:.0%} of copy bandwidth" if r.time_ms is not None else ""
            unplotted.append((label, f"no FLOPs{share}" if r.flops == 0 else "no DRAM traffic"))
            continue
        if r.time_ms is not None:
            points.append(RooflinePoint(label, r.arithmetic_intensity, r.tflops, True, r.bound))
        else:
            peak = r.flops / (r.compute_ms * 1e-3) / 1e12
            points.append(RooflinePoint(label, r.arithmetic_intensity,
                                        attainable_tflops(r.arithmetic_intensity, peak, r.copy_gbs), False, r.bound))
    return points, unplotted


def plot_roofline(results, out=None, labels=None, title=None) -> RooflinePlot:
    """Draws the results (AnalysisResult, all for one device and copy bandwidth: the first
    one's are the roofs) and writes a PNG to `out` when given. Returns the plotted data
    with the figure."""
    results = list(results)
    if not results:
        raise ValueError("plot_roofline: no results to plot")
    first = results[0]
    if first.device is None:
        raise ValueError("plot_roofline: the results carry no device; use result.with_time(..., device=...)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d, copy = first.device, first.copy_gbs
    points, unplotted = roofline_points(results, labels)
    xs = [p.intensity for p in points]
    ridge = d.tensor_tflops / (copy * 1e-3)
    lo = 10 ** math.floor(math.log10(min(xs + [0.1]) / 2))
    hi = 10 ** math.ceil(math.log10(max(xs + [ridge]) * 4))
    fig, ax = plt.subplots(figsize=(9, 6))
    grid = [lo * (hi / lo) ** (i / 400) for i in range(401)]
    ax.plot(grid, [attainable_tflops(x, d.tensor_tflops, copy) for x in grid], color="black",
            label=f"fp16/bf16 tensor core {d.tensor_tflops:g} TFLOP/s; copy {copy:.0f} GB/s ({first.copy_source})")
    ax.plot(grid, [attainable_tflops(x, d.fp32_tflops, copy) for x in grid], color="gray", linestyle="--",
            label=f"fp32 CUDA core {d.fp32_tflops:g} TFLOP/s")
    if abs(d.hbm_gbs - copy) > 1e-6 * copy:
        ax.plot(grid, [attainable_tflops(x, d.tensor_tflops, d.hbm_gbs) for x in grid], color="gray",
                linestyle=":", label=f"HBM datasheet {d.hbm_gbs:.0f} GB/s")
    for measured in (True, False):
        chosen = [p for p in points if p.measured == measured]
        if chosen:
            ax.scatter([p.intensity for p in chosen], [p.tflops for p in chosen], zorder=3, s=40,
                       color="tab:blue", facecolors="tab:blue" if measured else "none",
                       label="measured" if measured else "roofline bound (not timed)")
    for i, p in enumerate(points):  # alternately above and below, so neighbours' labels do not overlap
        ax.annotate(p.label, (p.intensity, p.tflops), textcoords="offset points", xytext=(5, 5 if i % 2 == 0 else -12),
                    fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys = [p.tflops for p in points] + [d.fp32_tflops]
    ax.set_ylim(min(ys + [attainable_tflops(lo, d.tensor_tflops, copy)]) / 2, d.tensor_tflops * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per DRAM byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or f"Roofline, {d.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if unplotted:
        fig.text(0.01, 0.01, "not on the plot: " + "; ".join(f"{label} ({why})" for label, why in unplotted),
                 fontsize=8)
    if out:
        fig.savefig(out, dpi=120, bbox_inches="tight")
    roofs = {"tensor TFLOP/s": d.tensor_tflops, "fp32 TFLOP/s": d.fp32_tflops, "copy GB/s": copy,
             "HBM GB/s": d.hbm_gbs}
    return RooflinePlot(points, unplotted, roofs, out, fig)
