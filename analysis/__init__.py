"""analysis, a middle package of aitb (layers: the import contracts in pyproject.toml): pure
functions of a run directory, no root. :func:`analyze_run` writes a run's tables, metrics.json and
report.html."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["analyze_run"]


def analyze_run(run_dir: Path) -> dict[str, Any]:
    """Analyse ``run_dir``; see :func:`analysis.run.analyze_run` (imported on first use, so
    that ``analysis.pcap`` and ``analysis.tcpflows`` load without pandas and matplotlib)."""
    from analysis.run import analyze_run as run

    return run(run_dir)
