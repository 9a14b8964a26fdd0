"""Print the comparison of examples/alto_ring_order.yaml from its run directory: per
workload, the DCI crossings of its ring collectives, the bytes per DCI link direction and
the iteration time (analysis.dci_usage).

    sudo .venv/bin/aitb run examples/alto_ring_order.yaml          # last line: RUN_DIR
    .venv/bin/python examples/alto_ring_order.py RUN_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from analysis.dci_usage import dci_usage


def table(run_dir: Path) -> str:
    """A Markdown table of :func:`analysis.dci_usage.dci_usage` (MB = 1e6 bytes)."""
    rows = dci_usage(run_dir)
    links = sorted({k for r in rows for k in r["bytes_per_dci_link"]})
    head = ["workload", "ring DCI crossings", "DCI MB", *links, "iteration s"]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["workload"], str(r["ring_crossings"]), f"{r['dci_bytes'] / 1e6:.1f}",
                 *(f"{r['bytes_per_dci_link'].get(k, 0) / 1e6:.1f}" for k in links),
                 f"{r['iteration_time_s']:.3f}"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: alto_ring_order.py RUN_DIR")
    print(table(Path(sys.argv[1])))
