"""Per-policy table and plot (TTFT, bootstrap bytes) of a run of examples/cats_selection.yaml (requests.jsonl):

    sudo .venv/bin/aitb run examples/cats_selection.yaml          # last line: RUN_DIR
    .venv/bin/python examples/cats_selection.py RUN_DIR           # table; RUN_DIR/cats_ttft.png

The plot (cats_ttft.png): TTFT CDF per policy beside the bootstrap MB per policy. TTFT
percentiles are nearest-rank over the requests that got a first token (ms); bootstrap
MB = bootstrap bytes / 1e6.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def per_policy(run_dir: Path) -> list[dict[str, Any]]:
    """One row per policy: requests, TTFT p50/p99 (s), bootstraps, bootstrap bytes, the
    share of requests each server got."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for line in (run_dir / "requests.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows.setdefault(r["policy"], []).append(r)
    out = []
    for policy, rs in rows.items():
        ttft = [r["ttft_s"] for r in rs if r["ttft_s"] is not None]
        servers: dict[str, int] = {}
        for r in rs:
            servers[r["server"]] = servers.get(r["server"], 0) + 1
        out.append({"policy": policy, "requests": len(rs), "ttft_s_p50": _pct(ttft, 50),
                    "ttft_s_p99": _pct(ttft, 99), "bootstraps": sum(r["bootstrap"] for r in rs),
                    "bootstrap_bytes": sum(r["bootstrap_bytes"] for r in rs),
                    "servers": dict(sorted(servers.items())), "ttft_s": ttft})
    return out


def table(run_dir: Path) -> str:
    """A Markdown table of :func:`per_policy`."""
    lines = ["| policy | requests | TTFT p50 ms | TTFT p99 ms | bootstraps | bootstrap MB | "
             "servers |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in per_policy(run_dir):
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1e3:.1f}"
        lines.append(f"| {r['policy']} | {r['requests']} | {ms(r['ttft_s_p50'])} | "
                     f"{ms(r['ttft_s_p99'])} | {r['bootstraps']} | "
                     f"{r['bootstrap_bytes'] / 1e6:.2f} | "
                     + ", ".join(f"{k} {v}" for k, v in r["servers"].items()) + " |")
    return "\n".join(lines)


def figure(run_dir: Path) -> Any:
    """A matplotlib Figure of two panels: the TTFT CDF of every policy (log ms) and the
    bootstrap MB each policy moved (bars, one per policy, in the table's order)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = per_policy(run_dir)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4), width_ratios=(3, 2))
    for r in rows:
        xs = sorted(v * 1e3 for v in r["ttft_s"])
        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post",
                label=r["policy"])
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("fraction of requests")
    ax.set_xscale("log")
    ax.legend()
    bx.bar([r["policy"] for r in rows], [r["bootstrap_bytes"] / 1e6 for r in rows])
    bx.set_ylabel("bootstrap MB (context moved to instances)")
    bx.tick_params(axis="x", labelrotation=30)
    return fig


def plot(run_dir: Path) -> Path:
    """:func:`figure` saved as ``run_dir/cats_ttft.png``; its path."""
    import matplotlib.pyplot as plt

    fig = figure(run_dir)
    path = run_dir / "cats_ttft.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: cats_selection.py RUN_DIR")
    print(table(Path(sys.argv[1])))
    print(plot(Path(sys.argv[1])))
