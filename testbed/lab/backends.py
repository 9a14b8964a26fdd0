"""Which runtime realises a lab: ``native`` (:class:`testbed.lab.lab.Lab`, namespaces built by
aitb through netlink) or ``mininet`` (:class:`testbed.mininet.backend.MininetLab`, Mininet's
nodes and links with aitb's configuration). Both have the same interface and teardown, and a
lab of either is attached to, inspected and destroyed the same way (its namespaces carry the
same names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from models.errors import LabError
from models.plan import LabPlan
from testbed.lab.lab import Lab
from testbed.lab.registry import DEFAULT_STATE_DIR

__all__ = ["BACKENDS", "make_lab", "check_backend"]

BACKENDS: tuple[str, ...] = ("native", "mininet")


def check_backend(name: str, where: str = "backend") -> str:
    """``name`` if it is a known backend; else a LabError (exit code 2) naming ``where`` and
    listing the known ones."""
    if name not in BACKENDS:
        err = LabError(f"{where}: unknown backend {name!r}; known: {', '.join(BACKENDS)}")
        err.exit_code = 2
        raise err
    return name


def make_lab(plan: LabPlan, backend: str = "native", run_id: str | None = None,
             state_dir: Path = DEFAULT_STATE_DIR, **options: Any) -> Lab:
    """A (not yet started) lab of ``plan`` on ``backend``; ``options`` go to the backend's
    class (mininet: ``switch``, ``controller``; both: ``wire_packets``). Raises LabError for
    an unknown backend, or (mininet) when Mininet cannot be imported."""
    if check_backend(backend) == "mininet":
        from testbed.mininet.backend import MininetLab

        return MininetLab(plan, run_id, state_dir, **options)
    return Lab(plan, run_id, state_dir, **options)
