"""Teardown by registry: used by ``Lab.down()``, ``aitb topo destroy`` and ``aitb clean``.

Only what a run's registry lists is touched: processes by pid *and* start time (a reused pid
is left alone), namespaces by their exact name (deleting one deletes its veths, bridge and
IFBs). Teardown goes in reverse order of creation, continues past failures and reports them
all at the end.

Scratch a process makes for itself outside any registry (a controller's socket directory, a
campaign worker's task folder, a probe namespace) carries its owner's pid and start time in its
name (models.owned): the clean of a dead owner's lab removes that owner's, and
:func:`sweep_orphans` (``aitb clean``) every one whose owner is dead.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models import owned
from models.errors import LabError
from testbed.lab.registry import Registry, unknown_name
from testbed.ns import netns
from testbed.ns.procs import end_process

__all__ = ["TeardownReport", "teardown", "clean", "raise_failures", "sweep_orphans"]


@dataclass
class TeardownReport:
    """What one teardown removed and what failed (sentences naming the object)."""

    run_id: str
    processes: list[int] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    scratch: list[str] = field(default_factory=list)  # the dead owner's (models.owned)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for ``--json``."""
        return {"run_id": self.run_id, "processes": self.processes,
                "namespaces": self.namespaces, "containers": self.containers,
                "scratch": self.scratch, "failures": self.failures}


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
    if boxes:  # container hosts (testbed/containers/hosts.py): removed before their namespaces
        from testbed.containers.hosts import remove_containers

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
# (FRR's /var/tmp/frr/<daemon>.<pid>); and, in the temporary directory, only names marked
# with the run id, aitb-<word>-<run id> (a cluster part's observation, /tmp/aitb-observe-<id>);
# a path record elsewhere is never removed
REMOVABLE_UNDER = (Path("/var/tmp/frr"),)


def _removable(path: Path, run_id: str | None) -> bool:
    if any(path.parent == base for base in REMOVABLE_UNDER):
        return True
    return run_id is not None and path.parent in owned.scratch_roots() and \
        re.fullmatch(rf"aitb-[a-z]{{1,16}}-{re.escape(run_id)}", path.name) is not None


def _remove_paths(records: list[dict[str, Any]], report: TeardownReport) -> None:
    """Remove the ``path`` records' files or directories (after their processes ended)."""
    run = next((r["run_id"] for r in records if r["kind"] == "run"), None)
    for r in [r for r in records if r["kind"] == "path"]:
        path = Path(r["path"])
        try:
            if not _removable(path, run):
                raise LabError(f"refusing to remove {path}: not under "
                               f"{', '.join(map(str, REMOVABLE_UNDER))} nor a temporary "
                               f"directory's aitb-<word>-<run id>")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
        except Exception as exc:  # noqa: BLE001 - collected and reported
            report.failures.append(f"path {path} (node {r.get('node')}): {exc}")


def _stop_dockerd(records: list[dict[str, Any]],
                  children: dict[int, subprocess.Popen[Any]] | None,
                  report: TeardownReport) -> None:
    """Stop a dockerd this run started (testbed/containers/dockerd.py), last, by pid and start
    time."""
    from testbed.containers.dockerd import DOCKERD_STOP_GRACE_S

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
    a detached/deployed run; ``force`` even if its owner lives). A dead owner's own scratch
    (models.owned, in the temporary directory, /tmp and ``state_dir``) goes with its lab, in
    the report's ``scratch``. Returns (reports, skipped) where skipped lists {run_id,
    reason}. Raises LabError for an unknown ``run_id``."""
    known = Registry.runs(state_dir)
    if run_id is not None and run_id not in known:
        raise unknown_name(f"unknown run id {run_id!r}; known runs: "
                           f"{', '.join(known) or 'none'}")
    reports, skipped = [], []
    for rid in [run_id] if run_id else known:
        reg = Registry(state_dir, rid)
        pid, start, detached = reg.owner()
        alive = reg.owner_alive()
        if alive and not force:
            skipped.append({"run_id": rid, "reason": f"owner pid {pid} is alive"})
        elif detached and run_id is None:
            skipped.append({"run_id": rid, "reason": "deployed with `aitb topo deploy`; "
                            f"remove with `aitb topo destroy {rid}`"})
        else:
            report = teardown(reg)
            if not alive and pid is not None:  # its owner's scratch, now that nothing runs
                where = list(dict.fromkeys([*owned.scratch_roots(), Path(state_dir)]))
                report.scratch = [str(p) for p in owned.sweep(where, owner=(pid, start))]
            reports.append(report)
    return reports, skipped


def sweep_orphans(state_dir: Path, roots: list[Path] | None = None) -> dict[str, list[str]]:
    """Remove every owned scratch entry (models.owned) whose owner is dead: directories and files
    in ``roots`` (default: the temporary directory and /tmp) and ``state_dir`` (a registry
    its owner was still writing, Registry.create), and namespaces under /var/run/netns
    (``aitb-probe-<pid>.<start>-<hex>``). Returns {"paths": [...], "namespaces": [...]}
    removed. Never touches a live owner's entry or any other name; an entry that cannot be
    removed is left for the next sweep."""
    where = [*(owned.scratch_roots() if roots is None else roots), Path(state_dir)]
    paths = [str(p) for p in owned.sweep(list(dict.fromkeys(where)))]
    gone = []
    try:
        names = sorted(os.listdir(netns.NETNS_DIR))
    except OSError:
        names = []
    for name in names:
        if owned.owner_dead(name):
            try:
                if netns.remove(name):
                    gone.append(name)
            except Exception:  # noqa: BLE001 - left for the next sweep
                continue
    return {"paths": paths, "namespaces": gone}

