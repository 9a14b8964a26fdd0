"""analysis layer of aitb (see ARCHITECTURE: layers): pure functions of a run directory, no
root. :func:`analyze_run` writes a run's tables, metrics.json and report.html."""

from analysis.run import analyze_run

__all__ = ["analyze_run"]
