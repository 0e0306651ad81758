"""PNG charts of a bench report: output tok/s and p99 ITL against concurrency, one line per profile, the spread as
error bars. matplotlib is optional (the ``[bench]`` extra): without it the charts are skipped and the report says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHARTS = (
    ("output_tok_s", "output throughput (tok/s)", "tok_s.png"),
    ("itl_p99_ms", "p99 inter-token latency (ms)", "itl_p99.png"),
)


def matplotlib_missing() -> str | None:
    """None when matplotlib can be imported, else why not (said on the terminal and in report.json)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (pip install 'kimi-serve[bench]')"
    return None


def series(report: dict[str, Any], figure: str) -> dict[str, list[tuple[int, float, float, float]]]:
    """Per profile: (concurrency, mean, min, max) of ``figure`` where it was measured. What the charts plot."""
    out: dict[str, list[tuple[int, float, float, float]]] = {}
    for p in report["profiles"]:
        points = []
        for c in report["concurrency"]:
            stat = (report["results"][p["name"]].get(str(c)) or {}).get(figure)
            if stat:
                points.append((c, stat["mean"], stat["min"], stat["max"]))
        out[p["name"]] = points
    return out


def draw(report: dict[str, Any], out_dir: Path) -> tuple[list[str], dict[str, Any]]:
    """Write the charts; (file names, the data each chart plotted: {file: {profile: points}})."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, plotted = [], {}
    label = " [MODEL numbers, not measurements]" if report["simulated"] else ""
    for figure, title, file_name in CHARTS:
        data = series(report, figure)
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        for name, points in data.items():
            if not points:
                continue
            xs = [p[0] for p in points]
            ys = [p[1] for p in points]
            err = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(report["concurrency"], [str(c) for c in report["concurrency"]])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(title)
        ax.set_title(f"{title} vs concurrency{label}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend()
        if report["simulated"]:
            fig.text(
                0.01,
                0.01,
                "kimi-serve simulator performance MODEL (docs/simulator.md), not a measurement",
                fontsize=7,
                color="firebrick",
            )
        fig.tight_layout()
        path = out_dir / file_name
        tmp = out_dir / (file_name + ".tmp")
        fig.savefig(tmp, format="png")
        plt.close(fig)
        tmp.replace(path)
        names.append(file_name)
        plotted[file_name] = data
    return names, plotted
