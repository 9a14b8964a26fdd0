"""The fidelity self-check of a run (analysis/fidelity/report.py): RTT probes before the
workloads, host CPU sampled during them, counter snapshots around them, and ``fidelity.json``
at the end.

    monitor = FidelityMonitor(plan, lab, progress).before()   # lab up; probes, CPU on
    ... replay the workloads ...
    monitor.after()                                           # CPU off, counters read
    monitor.write(run_dir)                                    # after the lab is down

``write`` reads ``counters/qdisc.parquet`` and ``counters/links.parquet``
(models/counter_columns.py) when a sampler wrote them and adds the two snapshots taken here, so loss
is measured either way and
the rate (which needs samples while a queue was backlogged) where samples exist.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.fidelity import (
    DirectionRef,
    LineCounts,
    cpu_summary,
    expected_rtt_s,
    fidelity_report,
    samples_in_windows,
    traffic_windows,
)
from analysis.fidelity.checks import configured_loss_pct, interface_drops
from analysis.fidelity.effects import event_effects
from analysis.fidelity.run_checks import rto_stalls, sampler_gaps, scaled_paths
from models.errors import LabError
from models.plan import LabPlan
from models.rundir import read_jsonl, write_json_atomic
from testbed.counters.cpuload import CpuSampler
from testbed.counters.rttprobe import EchoProbe, probe_rtts
from testbed.counters.snapshot import LINK_COLUMNS, QDISC_COLUMNS, snapshot
from testbed.counters.tcpstats import tcp_ext
from testbed.delay import native
from testbed.host.capabilities import in_vm
from testbed.lab.lab import Lab
from testbed.lab.layout import DIRECTIONS, Layout

__all__ = ["FidelityMonitor", "direction_refs", "echo_probes", "PROBE_COUNT"]

PROBE_COUNT = 5  # echoes per link after the warm-up; the minimum is kept
_ARROW = {"a_to_b": "a->b", "b_to_a": "b->a"}
_DIRECTION = {v: k for k, v in _ARROW.items()}


def direction_refs(plan: LabPlan, layout: Layout) -> list[DirectionRef]:
    """Every shaped direction of ``plan`` with the devices its counters live on."""
    refs = []
    traced = {(t.link, t.direction) for t in plan.traces}
    for lk in plan.links:
        for d, other in zip(DIRECTIONS, reversed(DIRECTIONS), strict=True):
            shaping = getattr(lk, d)
            if not shaping.is_shaped:
                continue
            if (lk.name, d) in traced and any(s.rate_bps is not None for t in plan.traces
                                               if (t.link, t.direction) == (lk.name, d)
                                               for s in t.steps):
                # the rate follows a trace: no one rate to compare with (link_trace.jsonl
                # records the steps), so the rate check says not_exercised
                shaping = dataclasses.replace(shaping, rate_bps=None)
            r = layout.recipes[(lk.name, d)]
            refs.append(DirectionRef(lk.name, _ARROW[d], r.tx_node, r.tx_dev, r.rx_node,
                                     r.rx_dev, r.ifb, shaping, getattr(lk, other),
                                     mtu=lk.mtu, tx_host=plan.node(r.tx_node).kind == "host"))
    return refs


def echo_probes(plan: LabPlan) -> list[EchoProbe]:
    """One echo probe per link with a shaped direction whose two ends both have an IPv4
    address (a switch port has none: such links are reported as not exercised); each busy-polls
    from shortly before the expected RTT less both jitters (:func:`expected_rtt_s`)."""
    return [EchoProbe(lk.name, lk.a.node, lk.a.ifname, lk.a.ipv4.ip, lk.b.ipv4.ip,
                      max(0.0, expected_rtt_s(lk.a_to_b, lk.b_to_a)
                          - lk.a_to_b.jitter_s - lk.b_to_a.jitter_s))
            for lk in plan.links
            if (lk.a_to_b.is_shaped or lk.b_to_a.is_shaped)
            and lk.a.ipv4 is not None and lk.b.ipv4 is not None]


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...],
           parquet: Path) -> pd.DataFrame:
    frames = [pd.DataFrame(rows, columns=list(columns))]
    if parquet.exists():
        frames.insert(0, pd.read_parquet(parquet))
    return pd.concat(frames, ignore_index=True)


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
        self.cpu = CpuSampler(without=getattr(lab, "line_cpu", None))
        self.cpu_samples: list[tuple[float, float]] = []
        self.lines_before: dict[str, dict[str, Any]] = {}
        self.lines_after: dict[str, dict[str, Any]] = {}
        self.dead_lines: list[native.DeadLine] = []  # after(): lines whose helper had died
        self.hosts = [n.name for n in plan.nodes if n.kind == "host"]
        self.tcp_before: dict[str, dict[str, int]] = {}  # TcpExt counters per host
        self.tcp_after: dict[str, dict[str, int]] = {}

    def _snap(self) -> None:
        q, ln = snapshot(self.lab)
        self.qdisc_rows += q
        self.link_rows += ln

    def before(self) -> FidelityMonitor:
        """Snapshot the counters, probe every link's RTT (all at once), start the CPU
        sampler. Raises LabError naming node and interface if a probe socket fails."""
        self._snap()
        self.lines_before = native.stats(self.lab)
        self.tcp_before = tcp_ext(self.lab, self.hosts)
        probes = echo_probes(self.plan)
        if probes:
            worst = max(expected_rtt_s(lk.a_to_b, lk.b_to_a) for lk in self.plan.links)
            self.progress(f"fidelity: probing the RTT of {len(probes)} links")
            self.rtts = probe_rtts(self.lab, probes, PROBE_COUNT, 2 * worst + 0.5)
        self.cpu.start()
        return self

    def after(self) -> None:
        """Stop the CPU sampler and snapshot the counters (the lab must still be up),
        the native delay lines' ones too. Raises LabError naming link and direction when a
        native line's helper died (its direction dropped everything since)."""
        self.cpu_samples = self.cpu.stop()
        self._snap()
        self.tcp_after = tcp_ext(self.lab, self.hosts)
        self.lines_after = native.stats(self.lab)
        self.dead_lines = native.dead_lines(self.lab)
        if self.dead_lines:
            raise LabError("; ".join(d.why for d in self.dead_lines))

    def report(self, run_dir: Path, windows: list[tuple[float, float]] | None = None,
               t0_unix_s: float | None = None, scale: float | None = None
               ) -> dict[str, Any]:
        """The fidelity.json document (shape: analysis/fidelity/report.py) of this run; CPU
        samples count while the workloads' ops ran (``windows``, (start s, end s) on this
        machine's clock; by default those of ``timeline.jsonl``), not while agents
        started. ``t0_unix_s``: the run's t0 that ``events.jsonl`` times count from, and
        ``scale``: the experiment's scale (both by default from ``manifest.json``): each
        direction is judged against the values the events set, and a scale that shrank
        paths to a few packets is warned of (analysis/fidelity/run_checks.py)."""
        counters = run_dir / "counters"
        qdisc = _frame(self.qdisc_rows, QDISC_COLUMNS, counters / "qdisc.parquet")
        links = _frame(self.link_rows, LINK_COLUMNS, counters / "links.parquet")
        if windows is None:
            windows = traffic_windows(read_jsonl(run_dir / "timeline.jsonl"))
        busy = samples_in_windows(self.cpu_samples, self.cpu.interval_s, windows)
        precise = in_vm() is None  # a host kernel, not software emulation
        manifest = _manifest(run_dir)
        t0 = t0_unix_s if t0_unix_s is not None else (manifest.get("events") or {}).get(
            "t0_unix_s")
        effects = event_effects(read_jsonl(run_dir / "events.jsonl"), t0) \
            if t0 is not None and (run_dir / "events.jsonl").exists() else {}
        refs = [dataclasses.replace(r, precise=precise, line=line_counts(
            self.lines_before, self.lines_after, r), effects=effects.get((r.link, r.direction)))
            for r in self.refs]
        cpu = cpu_summary(busy)
        cpu["without_cpu"] = self.cpu.without  # the delay line's own CPU, busy by design
        doc = fidelity_report(refs, qdisc, links, self.rtts, cpu, self._run_checks(
            run_dir, refs, qdisc, windows, scale if scale is not None
            else float(manifest.get("scale") or 1)))
        doc["delay_line_helpers"] = helper_cpu(self.lines_after)
        doc["capture"] = capture_completeness(run_dir)
        if self.dead_lines:  # its direction dropped everything since: no check can pass
            dead = {(d.link, _ARROW[d.direction]) for d in self.dead_lines}
            for entry in doc["links"]:
                if (entry["link"], entry["direction"]) in dead:
                    entry["checks"]["delay"], entry["ok"] = "off", False
            doc["trustworthy"] = False
            doc["reasons"] = [*doc["reasons"], *(d.why for d in self.dead_lines)]
        return doc

    def _run_checks(self, run_dir: Path, refs: list[DirectionRef], qdisc: pd.DataFrame,
                    windows: list[tuple[float, float]], scale: float
                    ) -> dict[str, dict[str, Any]]:
        """The whole-run checks of analysis/fidelity/run_checks.py on this run's data."""
        network_drops = sum(interface_drops(qdisc, r.tx_node, r.tx_dev)[0]
                            for r in refs if not r.tx_host)
        planned = any(configured_loss_pct(r.configured) > 0
                      or (r.effects is not None and r.effects.loss_set) for r in refs)
        sampled = run_dir / "counters" / "qdisc.parquet"
        info = _json(run_dir / "counters" / "sampler.json")
        flows = read_jsonl(run_dir / "flows.jsonl") if (run_dir / "flows.jsonl").exists() \
            else []
        out = {"stalls": rto_stalls(self.tcp_before, self.tcp_after,
                                    network_drops=network_drops, planned_loss=planned),
               "scaling": scaled_paths(self.plan, scale, (
                   (f["src_node"], f["src_ip"], f["dst_node"], f["dst_ip"]) for f in flows
                   if f.get("src_ip") and f.get("dst_ip")))}
        if sampled.exists():
            rows = pd.read_parquet(sampled, columns=["t_s", "t_err_s"])
            out["sampler"] = sampler_gaps(rows["t_s"] + rows["t_err_s"], windows,
                                          info.get("interval_s"))
        return out

    def write(self, run_dir: Path, windows: list[tuple[float, float]] | None = None,
              t0_unix_s: float | None = None, scale: float | None = None) -> dict[str, Any]:
        """Write ``run_dir/fidelity.json`` (:meth:`report`) atomically and return it; with
        native delay lines also ``run_dir/counters/delayline.json`` (their counters when the
        workloads ended: per ``"<link>/<direction>"``, see
        :func:`testbed.delay.native.stats`)."""
        doc = self.report(run_dir, windows, t0_unix_s, scale)
        write_json_atomic(run_dir / "fidelity.json", doc)
        if self.lines_after:  # counters/ exists only when the sampler ran
            (run_dir / "counters").mkdir(parents=True, exist_ok=True)
            write_json_atomic(run_dir / "counters" / "delayline.json",
                              {"before": self.lines_before, "after": self.lines_after})
        return doc


def capture_completeness(run_dir: Path) -> dict[str, Any] | None:
    """fidelity.json's ``capture``: whether the pcaps hold every packet the captured
    interfaces carried, from ``captures/index.json`` (None without a capture). The packets the
    kernel dropped because a capture's ring was full (tcpdump's ``dropped by kernel``; the
    shared capturer's PACKET_STATISTICS) are in no pcap: what is counted from the pcaps
    (retransmissions, flows on a link) undercounts. It leaves ``trustworthy`` alone: the
    emulated network is not at fault. Keys: engine, packets_captured,
    packets_dropped_by_kernel (null if a capture did not report it), complete (no drop
    reported; null if unknown), interfaces_with_drops ``node:ifname``."""
    try:
        index = json.loads((run_dir / "captures" / "index.json").read_text())
    except (OSError, ValueError):
        return None
    rows = index.get("interfaces") or []

    def total(key: str) -> int | None:
        values = [r.get(key) for r in rows]
        return None if None in values else sum(values)

    drops = total("packets_dropped_by_kernel")
    return {"engine": index.get("engine", "tcpdump"),
            "packets_captured": total("packets_captured"), "packets_dropped_by_kernel": drops,
            "complete": None if drops is None else drops == 0,
            "interfaces_with_drops": [f"{r['node']}:{r['ifname']}" for r in rows
                                      if r.get("packets_dropped_by_kernel")]}


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _manifest(run_dir: Path) -> dict[str, Any]:
    """The run's manifest.json as written so far ({} without one)."""
    return _json(run_dir / "manifest.json")


def _queue(stats: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
    rec = stats.get(key) or {}
    return rec.get("queue") or {}


def line_counts(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]],
                ref: DirectionRef) -> LineCounts | None:
    """The native line's counts of ``ref``'s direction between the two snapshots
    (:func:`testbed.delay.native.stats`); None when the direction has no native
    line. Delay percentiles cover the helper's lifetime (histograms do not subtract)."""
    key = f"{ref.link}/{_DIRECTION[ref.direction]}"
    if key not in after:
        return None
    a, b = _queue(after, key), _queue(before, key)

    def diff(*cols: str) -> int:
        return sum(max(0, int(a.get(c, 0))) - max(0, int(b.get(c, 0))) for c in cols)
    hist = a.get("added_delay") or {}
    n = int(hist.get("n", 0))
    drawn = a.get("drawn_delay") or {}
    after_line = max(0, int(after[key].get("after_line_dropped") or 0)
                     - int((before.get(key) or {}).get("after_line_dropped") or 0))
    return LineCounts(diff("in_packets"), diff("dropped_loss", "dropped_ge"),
                      diff("kernel_queue_dropped", "kernel_user_dropped"),
                      hist["p50_us"] / 1e6 if n else None, hist["p99_us"] / 1e6 if n else None,
                      drawn["max_us"] / 1e6 if int(drawn.get("n", 0)) else None, after_line)


def helper_cpu(after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """node -> the native delay-line helper's pid, CPU seconds and uptime (seconds)."""
    return {r["node"]: {"pid": r["pid"], "cpu_s": r["helper_cpu_s"],
                        "uptime_s": r["helper_uptime_s"]} for r in after.values()}
