"""The built-in default experiment that ``aitb run`` runs when given no file."""

from __future__ import annotations

from pathlib import Path

__all__ = ["default_experiment"]

_HERE = Path(__file__).resolve().parent


def default_experiment() -> Path:
    """Path of the packaged quickstart experiment (orchestration/run/quickstart.yaml)."""
    return _HERE / "quickstart.yaml"
