"""Start and stop the counter sampler process of a running lab (parent side)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from models.errors import LabError
from testbed.counters.loop import DEFAULT_MAX_ROWS

__all__ = ["SamplerConfig", "CounterSampler", "DEFAULT_INTERVAL_S"]

DEFAULT_INTERVAL_S = 0.010
READY_TIMEOUT_S = 30.0  # Python start, pyroute2 import, one socket pair per namespace
STOP_TIMEOUT_S = 60.0  # the last sample plus writing the Parquet files


@dataclass(frozen=True)
class SamplerConfig:
    """``interval_s``: seconds between samples (default 10 ms); ``tcp``: also TCP_INFO of
    the sockets in host namespaces; ``max_rows``: cap on rows in all tables; ``live_every_s``:
    also write the live rates snapshot ``live.json`` this often (testbed.counters.live; None:
    not)."""

    interval_s: float = DEFAULT_INTERVAL_S
    tcp: bool = True
    max_rows: int = DEFAULT_MAX_ROWS
    live_every_s: float | None = None


class CounterSampler:
    """The sampler process of ``lab`` writing into ``out_dir`` (``counters/`` of a run).

    Side effects: a Python process in the root namespace (registered with the lab) that holds
    one netlink socket per namespace (two in host namespaces with ``tcp``); files
    ``out_dir/{qdisc,links,tcp}.parquet``, ``sampler.json``, ``sampler.log``.
    """

    def __init__(self, lab: Any, out_dir: Path, config: SamplerConfig) -> None:
        self.lab, self.out_dir, self.config = lab, Path(out_dir), config
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        """Start sampling; return after the first sample. Raises LabError (with the
        sampler's log) if the process ends or is not ready within READY_TIMEOUT_S."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        plan = self.lab.plan
        cfg = {"nodes": [[n.name, self.lab.netns_name(n.name),
                          self.config.tcp and n.kind == "host"] for n in plan.nodes],
               "interval_s": self.config.interval_s, "out_dir": str(self.out_dir),
               "max_rows": self.config.max_rows, "parent_pid": os.getpid(),
               "live_every_s": self.config.live_every_s}
        argv = [sys.executable, "-m", "testbed.counters.main", json.dumps(cfg)]
        log = (self.out_dir / "sampler.log").open("wb")
        try:  # registered before it execs (held by its wrapper: no unregistered instant)
            self.proc = self.lab.popen_host(argv, stdout=subprocess.PIPE, stderr=log,
                                            record={"argv": argv[:3]})
        finally:
            log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready and self.proc.stdout.readline().strip() == b"ready":
                return
            if self.proc.poll() is not None:
                break
        self.stop()
        raise LabError(f"counter sampler did not start: {self._log_tail()}")

    def _log_tail(self) -> str:
        path = self.out_dir / "sampler.log"
        text = path.read_text(errors="replace").strip() if path.exists() else ""
        return text[-2000:] or "(no output)"

    def stop(self) -> dict[str, Any]:
        """Stop sampling (SIGTERM, then wait for the files), return sampler.json. Raises
        LabError if the sampler failed or did not finish within STOP_TIMEOUT_S (killed)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return self._summary()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise LabError(f"counter sampler did not stop within {STOP_TIMEOUT_S:g} s "
                           "(killed)") from None
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        summary = self._summary()
        if proc.returncode != 0:
            raise LabError(f"counter sampler failed (exit {proc.returncode}): "
                           f"{summary.get('error') or self._log_tail()}")
        return summary

    def _summary(self) -> dict[str, Any]:
        path = self.out_dir / "sampler.json"
        return json.loads(path.read_text()) if path.exists() else {}
