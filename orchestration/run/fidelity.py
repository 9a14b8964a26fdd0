"""The fidelity self-check of a run (contract 3): RTT probes before the workloads, host CPU
sampled during them, counter snapshots around them, and ``fidelity.json`` at the end.

    monitor = FidelityMonitor(plan, lab, progress).before()   # lab up; probes, CPU on
    ... replay the workloads ...
    monitor.after()                                           # CPU off, counters read
    monitor.write(run_dir)                                    # after the lab is down

``write`` reads ``counters/qdisc.parquet`` and ``counters/links.parquet`` (contract 2) when a
sampler wrote them and adds the two snapshots taken here, so loss is measured either way and
the rate (which needs samples while a queue was backlogged) where samples exist.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from aitb.plan import LabPlan
from analysis.fidelity import (
    DirectionRef,
    cpu_summary,
    expected_rtt_s,
    fidelity_report,
    samples_in_windows,
    traffic_windows,
)
from orchestration.run.rundir import write_json_atomic
from testbed.countersnap import LINK_COLUMNS, QDISC_COLUMNS, snapshot
from testbed.cpuload import CpuSampler
from testbed.lab import Lab
from testbed.layout import DIRECTIONS, Layout
from testbed.rttprobe import EchoProbe, probe_rtts

__all__ = ["FidelityMonitor", "direction_refs", "echo_probes", "PROBE_COUNT"]

PROBE_COUNT = 5  # echoes per link after the warm-up; the minimum is kept
_ARROW = {"a_to_b": "a->b", "b_to_a": "b->a"}


def direction_refs(plan: LabPlan, layout: Layout) -> list[DirectionRef]:
    """Every shaped direction of ``plan`` with the devices its counters live on."""
    refs = []
    for lk in plan.links:
        for d, other in zip(DIRECTIONS, reversed(DIRECTIONS), strict=True):
            shaping = getattr(lk, d)
            if not shaping.is_shaped:
                continue
            r = layout.recipes[(lk.name, d)]
            refs.append(DirectionRef(lk.name, _ARROW[d], r.tx_node, r.tx_dev, r.rx_node,
                                     r.rx_dev, r.ifb, shaping, getattr(lk, other)))
    return refs


def echo_probes(plan: LabPlan) -> list[EchoProbe]:
    """One echo probe per link with a shaped direction whose two ends both have an IPv4
    address (a switch port has none: such links are reported as not exercised)."""
    return [EchoProbe(lk.name, lk.a.node, lk.a.ifname, lk.a.ipv4.ip, lk.b.ipv4.ip)
            for lk in plan.links
            if (lk.a_to_b.is_shaped or lk.b_to_a.is_shaped)
            and lk.a.ipv4 is not None and lk.b.ipv4 is not None]


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...],
           parquet: Path) -> pd.DataFrame:
    frames = [pd.DataFrame(rows, columns=list(columns))]
    if parquet.exists():
        frames.insert(0, pd.read_parquet(parquet))
    return pd.concat(frames, ignore_index=True)


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


class FidelityMonitor:
    """The runtime half of the fidelity check for one lab (see the module docstring).
    Needs root; ``progress`` receives one line per step."""

    def __init__(self, plan: LabPlan, lab: Lab,
                 progress: Callable[[str], None] = lambda _m: None) -> None:
        self.plan, self.lab, self.progress = plan, lab, progress
        self.refs = direction_refs(plan, lab.layout)
        self.rtts: dict[str, float | None] = {}
        self.qdisc_rows: list[dict[str, Any]] = []
        self.link_rows: list[dict[str, Any]] = []
        self.cpu = CpuSampler()
        self.cpu_samples: list[tuple[float, float]] = []

    def _snap(self) -> None:
        q, ln = snapshot(self.lab)
        self.qdisc_rows += q
        self.link_rows += ln

    def before(self) -> FidelityMonitor:
        """Snapshot the counters, probe every link's RTT (all at once), start the CPU
        sampler. Raises LabError naming node and interface if a probe socket fails."""
        self._snap()
        probes = echo_probes(self.plan)
        if probes:
            worst = max(expected_rtt_s(lk.a_to_b, lk.b_to_a) for lk in self.plan.links)
            self.progress(f"fidelity: probing the RTT of {len(probes)} links")
            self.rtts = probe_rtts(self.lab, probes, PROBE_COUNT, 2 * worst + 0.5)
        self.cpu.start()
        return self

    def after(self) -> None:
        """Stop the CPU sampler and snapshot the counters (the lab must still be up)."""
        self.cpu_samples = self.cpu.stop()
        self._snap()

    def report(self, run_dir: Path) -> dict[str, Any]:
        """The fidelity.json document (contract 3) of this run; CPU samples count while
        the workloads' ops ran (``timeline.jsonl``), not while agents started."""
        counters = run_dir / "counters"
        qdisc = _frame(self.qdisc_rows, QDISC_COLUMNS, counters / "qdisc.parquet")
        links = _frame(self.link_rows, LINK_COLUMNS, counters / "links.parquet")
        windows = traffic_windows(_records(run_dir / "timeline.jsonl"))
        busy = samples_in_windows(self.cpu_samples, self.cpu.interval_s, windows)
        return fidelity_report(self.refs, qdisc, links, self.rtts, cpu_summary(busy))

    def write(self, run_dir: Path) -> dict[str, Any]:
        """Write ``run_dir/fidelity.json`` atomically and return it."""
        doc = self.report(run_dir)
        write_json_atomic(run_dir / "fidelity.json", doc)
        return doc
