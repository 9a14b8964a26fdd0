"""Teardown by registry: used by ``Lab.down()``, ``aitb topo destroy`` and ``aitb clean``.

Only what a run's registry lists is touched: processes by pid *and* start time (a reused pid
is left alone), namespaces by their exact name (deleting one deletes its veths, bridge and
IFBs). Teardown goes in reverse order of creation, continues past failures and reports them
all at the end.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitb.errors import LabError
from testbed import netns
from testbed.procs import end_process
from testbed.registry import Registry, unknown_name

__all__ = ["TeardownReport", "teardown", "clean", "raise_failures"]


@dataclass
class TeardownReport:
    """What one teardown removed and what failed (sentences naming the object)."""

    run_id: str
    processes: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for ``--json``."""
        return {"run_id": self.run_id, "processes": self.processes,
                "namespaces": self.namespaces, "containers": self.containers,
                "failures": self.failures}


def teardown(reg: Registry, children: dict[int, subprocess.Popen[Any]] | None = None,
             keep_owner: bool = False) -> TeardownReport:
    """Remove everything ``reg`` lists, newest first; delete the run directory if nothing
    failed (with ``keep_owner``, keep only its owner records instead: see
    :meth:`Registry.spend`). ``children`` maps pids to Popen objects of this process (to
    reap them). Never raises for a single object: failures are collected in the report."""
    report = TeardownReport(reg.run_id)
    records = reg.records()
    for r in reversed([r for r in records if r["kind"] == "process"]):
        try:
            first = getattr(signal, "SIG" + r.get("signal", "TERM"))
            if end_process(r["pid"], r["start"], (children or {}).get(r["pid"]), first=first):
                report.processes.append(r["pid"])
        except Exception as exc:  # noqa: BLE001 - collected and reported
            report.failures.append(f"process {r['pid']} ({' '.join(r['argv'])}) on node "
                                   f"{r['node']}: {exc}")
    boxes = [r for r in records if r["kind"] == "container"]
    if boxes:  # container hosts (testbed/containers.py): removed before their namespaces
        from testbed.containers import remove_containers

        removed, failed = remove_containers(boxes, reg.run_id)
        report.containers += removed
        report.failures += failed
    for r in reversed([r for r in records if r["kind"] == "netns"]):
        try:
            if netns.remove(r["name"]):
                report.namespaces.append(r["name"])
        except Exception as exc:  # noqa: BLE001 - collected and reported
            report.failures.append(f"namespace {r['name']} (node {r['node']}): {exc}")
    _stop_dockerd(records, children, report)
    _remove_paths(records, report)
    if not report.failures:
        reg.spend() if keep_owner else reg.remove()
    return report


# directories a process of the run leaves outside the state directory when it is killed
# (FRR's /var/tmp/frr/<daemon>.<pid>); a path record outside these is never removed
REMOVABLE_UNDER = (Path("/var/tmp/frr"),)


def _remove_paths(records: list[dict[str, Any]], report: TeardownReport) -> None:
    """Remove the ``path`` records' files or directories (after their processes ended)."""
    for r in [r for r in records if r["kind"] == "path"]:
        path = Path(r["path"])
        try:
            if not any(path.parent == base for base in REMOVABLE_UNDER):
                raise LabError(f"refusing to remove {path}: not under "
                               f"{', '.join(map(str, REMOVABLE_UNDER))}")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        except Exception as exc:  # noqa: BLE001 - collected and reported
            report.failures.append(f"path {path} (node {r.get('node')}): {exc}")


def _stop_dockerd(records: list[dict[str, Any]],
                  children: dict[int, subprocess.Popen[Any]] | None,
                  report: TeardownReport) -> None:
    """Stop a dockerd this run started (testbed/dockerd.py), last, by pid and start time."""
    from testbed.dockerd import DOCKERD_STOP_GRACE_S

    for r in [r for r in records if r["kind"] == "dockerd"]:
        try:
            if end_process(r["pid"], r["start"], (children or {}).get(r["pid"]),
                           grace_s=DOCKERD_STOP_GRACE_S):
                report.processes.append(r["pid"])
        except Exception as exc:  # noqa: BLE001 - collected and reported
            report.failures.append(f"dockerd {r['pid']}: {exc}")


def raise_failures(report: TeardownReport) -> None:
    """Raise one LabError listing every failure of ``report``, if any."""
    if report.failures:
        raise LabError(f"teardown of run {report.run_id} left {len(report.failures)} "
                       "object(s) behind:\n  " + "\n  ".join(report.failures))


def clean(state_dir: Path, run_id: str | None = None, force: bool = False
          ) -> tuple[list[TeardownReport], list[dict[str, Any]]]:
    """Tear down runs whose owner is dead: all of them, or only ``run_id`` (which may also be
    a detached/deployed run; ``force`` even if its owner lives). Returns (reports, skipped)
    where skipped lists {run_id, reason}. Raises LabError for an unknown ``run_id``."""
    known = Registry.runs(state_dir)
    if run_id is not None and run_id not in known:
        raise unknown_name(f"unknown run id {run_id!r}; known runs: "
                           f"{', '.join(known) or 'none'}")
    reports, skipped = [], []
    for rid in [run_id] if run_id else known:
        reg = Registry(state_dir, rid)
        pid, _, detached = reg.owner()
        if reg.owner_alive() and not force:
            skipped.append({"run_id": rid, "reason": f"owner pid {pid} is alive"})
        elif detached and run_id is None:
            skipped.append({"run_id": rid, "reason": "deployed with `aitb topo deploy`; "
                            f"remove with `aitb topo destroy {rid}`"})
        else:
            reports.append(teardown(reg))
    return reports, skipped

