"""Live ALTO cost maps during a run (experiment key ``alto: {live: true, refresh: 500ms}``).

    with observing(...), serving_alto(...), live_alto(spec.alto, plan, run_dir, progress):
        replay every workload

The counter sampler writes ``counters/live.json`` every ``refresh`` (testbed.counters.live:
per interface the bits per second it sent in the window and its mean qdisc backlog). A thread
of the runner reads each new snapshot and rewrites ``alto/costmap-bw-available.json`` and
``alto/costmap-delay-ow.json`` with the live costs of models.alto.live_cost_map (available
bandwidth = configured rate - measured rate; one-way delay = configured delay + backlog x 8 /
rate per direction), so the lab's ALTO server (which reads its files on every request) serves
them at once, and appends each to ``alto/live.jsonl`` (``t_s``, ``window_s``, ``seq``,
``metric``, ``cost-map``). After the workloads the configured (plan) maps are written back,
so ``alto/`` ends as every run leaves it and ``live.jsonl`` is the record of what was served.

Delay: the native delay line's own statistics (its added delay per packet) are the configured
delay within its release error (microseconds, bench/delayline_accuracy.py), so the live delay
adds what changes with the load, the queueing in the bottleneck buffer, read from the qdisc
counters of every backend alike.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from models.alto import (
    LIVE_METRICS,
    LinkUse,
    alto_maps,
    costmap_filename,
    host_paths,
    live_cost_map,
)
from models.errors import LabError
from models.paths import PathError
from models.plan import LabPlan
from models.rundir import write_json_atomic

__all__ = ["live_alto", "usage_of"]


def usage_of(snapshot: dict[str, Any]) -> dict[tuple[str, str], LinkUse]:
    """(node, ifname) -> LinkUse of a ``counters/live.json`` snapshot."""
    out = {}
    for key, v in snapshot["interfaces"].items():
        node, ifname = key.split(" ", 1)
        out[(node, ifname)] = LinkUse(v["tx_bps"], float(v["backlog_bytes"]))
    return out


class _Refresher(threading.Thread):
    def __init__(self, plan: LabPlan, by: str, run_dir: Path, poll_s: float) -> None:
        super().__init__(name="alto-live", daemon=True)
        self.maps = alto_maps(plan, by, LIVE_METRICS)  # type: ignore[arg-type]
        self.paths = host_paths(plan, self.maps.pids)
        self.plan, self.poll_s = plan, poll_s
        self.src = run_dir / "counters" / "live.json"
        self.alto = run_dir / "alto"
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.seq = -1
        self.refreshes = 0

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.poll_s):
                self.refresh()
            self.refresh()  # the sampler's last snapshot before it stopped
        except BaseException as exc:  # noqa: BLE001 - re-raised by live_alto
            self.error = exc

    def refresh(self) -> None:
        try:
            snap = json.loads(self.src.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        if snap["seq"] == self.seq:
            return
        self.seq = snap["seq"]
        usage = usage_of(snap)
        vtag = self.maps.network_map["meta"]["vtag"]
        with (self.alto / "live.jsonl").open("a", encoding="utf-8") as log:
            for metric in LIVE_METRICS:
                doc = live_cost_map(self.plan, self.maps.pids, metric, vtag, usage, self.paths)
                write_json_atomic(self.alto / costmap_filename(metric), doc)
                log.write(json.dumps({"t_s": snap["t_s"], "window_s": snap["window_s"],
                                      "seq": snap["seq"], "metric": metric,
                                      "cost-map": doc["cost-map"]}) + "\n")
        self.refreshes += 1

    def restore(self) -> None:
        for metric in LIVE_METRICS:
            write_json_atomic(self.alto / costmap_filename(metric), self.maps.cost_maps[metric])


@contextmanager
def live_alto(cfg: Any, plan: LabPlan, run_dir: Path, manifest: dict[str, Any],
              refresh_s: float, progress: Callable[[str], None]) -> Iterator[None]:
    """Refresh the live cost maps while the body runs when ``cfg.live`` (``cfg`` an
    AltoSpecModel; module docstring); the manifest's ``alto_live`` gets the refresh count.
    Raises LabError when the plan has no maps (a routing hole) or a refresh failed (after
    the body, the configured maps restored)."""
    if not cfg.live:
        yield
        return
    try:
        worker = _Refresher(plan, cfg.pids, run_dir, max(0.02, refresh_s / 4))
    except PathError as exc:
        raise LabError(f"alto.live: no cost maps for lab {plan.name}: {exc}") from None
    worker.start()
    progress(f"live ALTO cost maps ({', '.join(LIVE_METRICS)}) every {refresh_s * 1e3:g} ms")
    try:
        yield
    finally:
        worker.stopped.set()
        worker.join()
        worker.restore()
        manifest["alto_live"] = {"refreshes": worker.refreshes, "log": "alto/live.jsonl",
                                 "metrics": list(LIVE_METRICS), "refresh_s": refresh_s}
    if worker.error is not None:
        raise LabError(f"live ALTO cost maps failed: {worker.error}") from worker.error
