"""`--plot`: the classic roofline chart of the kernels (log-log: arithmetic intensity against
GOP/s, the copy-bandwidth slope and each compute ceiling as lines, every Vulkan kernel record a
labelled point) beside the models against their peers (ms per call)."""
from __future__ import annotations

from .roofline import COMPUTE_ROOFS

BACKEND_STYLE = {("vulkan", "int8"): ("vkq int8 (Vulkan)", "#1f77b4"),
                 ("vulkan-dot", "int8"): ("vkq int8, integer dot product (Vulkan)", "#17becf"),
                 ("vulkan", "int8-dynamic"): ("vkq int8 dynamic (Vulkan)", "#6baed6"),
                 ("vulkan-dot", "int8-dynamic"): ("vkq int8 dynamic, integer dot product (Vulkan)", "#9edae5"),
                 ("vulkan", "int8-weight-only"): ("vkq int8 weight-only (Vulkan)", "#9ecae1"),
                 ("vulkan", "fp32"): ("vkq fp32 shader (Vulkan)", "#ff7f0e"),
                 ("ncnn-vulkan", "fp32"): ("ncnn fp32 (Vulkan, wall clock)", "#2ca02c"),
                 ("ncnn-cpu", "fp32"): ("ncnn fp32 (CPU)", "#98df8a"),
                 ("torch-cpu", "fp32"): ("torch fp32 (CPU)", "#7f7f7f"),
                 ("torch-cpu", "int8"): ("torch int8 (CPU)", "#c7c7c7")}
CEILING_STYLE = {"int32_gops": "--", "fp32_gflops": ":", "dot4_gops": "-."}


def plot(records, path, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    roof = {r["name"]: r["gops"] for r in records if r["suite"] == "roofline"}
    points = [r for r in records if r["suite"] == "kernels" and r.get("roof_gops") and r.get("gops")]
    models = [r for r in records if r["suite"] == "models"]
    panels = (["roofline"] if "copy_gbps" in roof else []) + (["models"] if models else [])
    if not panels:
        raise ValueError("nothing to plot: no roofline and no models in these records")
    ratios = [1.35 if p == "roofline" else 1.0 for p in panels]
    n_models = len({r["name"] for r in models})
    height = max(7.0, 1.2 + n_models * 1.6)
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * sum(ratios), height), squeeze=False,
                             gridspec_kw={"width_ratios": ratios})
    for ax, kind in zip(axes[0], panels):
        if kind == "roofline":
            _roofline(ax, roof, points)
        else:
            _models(ax, models)
    dev = next((r["device"] for r in records if r["backend"] == "vulkan"), "")
    fig.suptitle(title or f"vkq bench on {dev}", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _roofline(ax, roof, points):
    """Intensity (op/B) against GOP/s, both log: bandwidth slope, compute ceilings, kernels."""
    bw = roof["copy_gbps"]
    ceilings = {k: roof[k] for k in COMPUTE_ROOFS if k in roof}
    xs = [r["intensity"] for r in points] or [1.0]
    lo = min(min(xs), min(ceilings.values(), default=bw) / bw) / 4
    hi = max(max(xs), max(ceilings.values(), default=bw) / bw) * 4
    top = max(ceilings.values(), default=bw)
    ax.plot([lo, top / bw], [lo * bw, top], color="k", lw=1.2, label=f"copy bandwidth {bw:.3g} GB/s")
    for key, value in ceilings.items():
        ax.plot([value / bw, hi], [value, value], color="k", lw=1, ls=CEILING_STYLE.get(key, "-"),
                label=f"{COMPUTE_ROOFS[key]} roof {value:.3g} GOP/s")
    for (backend, dtype), (label, colour) in BACKEND_STYLE.items():
        rows = [r for r in points if (r["backend"], r["dtype"]) == (backend, dtype)]
        if not rows:
            continue
        ax.scatter([r["intensity"] for r in rows], [r["gops"] for r in rows], s=22, color=colour, label=label,
                   zorder=3, edgecolors="k", linewidths=0.3)
        for r in rows:
            ax.annotate(r["name"], (r["intensity"], r["gops"]), xytext=(3, 2), textcoords="offset points",
                        fontsize=5, color=colour if backend.startswith("vulkan") else "#555555")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys = [r["gops"] for r in points] + [lo * bw]
    ax.set_ylim(min(ys) / 2, top * 2)
    ax.set_xlabel("arithmetic intensity (ops per byte moved: inputs, weights, outputs once, packed)")
    ax.set_ylabel("GOP/s (2 x multiply-adds, or elements / taps, per second)")
    ax.set_title("kernels on the roofline (GPU time from timestamps; ncnn: wall clock)", fontsize=9)
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=6.5, loc="upper left")


def _models(ax, rows):
    """ms per call per model and backend (log), vkq's GPU time drawn inside its bar."""
    names = list(dict.fromkeys(r["name"] for r in rows))
    series = [k for k in BACKEND_STYLE if any((r["backend"], r["dtype"]) == k for r in rows)]
    height = 0.8 / max(1, len(series))
    for j, key in enumerate(series):
        label, colour = BACKEND_STYLE[key]
        for i, n in enumerate(names):
            r = next((r for r in rows if r["name"] == n and (r["backend"], r["dtype"]) == key), None)
            if r is None:
                continue
            y = i + (j - (len(series) - 1) / 2) * height
            ax.barh(y, r["median_ms"], height=height * 0.95, color=colour, label=label)
            if r.get("gpu_ms"):
                ax.barh(y, r["gpu_ms"], height=height * 0.45, color="k", alpha=0.35, label="vkq: GPU time of the call")
            ax.text(r["median_ms"], y, f" {r['median_ms']:.3g}", va="center", fontsize=6)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo, hi * 2.5)        # room for the value labels
    ax.set_xlabel("ms per call, median (wall clock, in-process, after warm-up; log scale)")
    ax.set_title("models end to end", fontsize=9)
    ax.grid(axis="x", which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles))      # one entry a series
    ax.legend(seen.values(), seen.keys(), fontsize=6.5, loc="lower right")

