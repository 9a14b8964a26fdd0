"""aitb's native (user-space) delay line for kernels without sch_netem.

An NFQUEUE rule per link direction (see :mod:`.rules`) hands the packets arriving on a lab
interface to a compiled helper (``aitb_delayline.c``, built by :mod:`.build`) that holds each
packet's verdict until arrival + delay.  :class:`Helper` starts and stops one helper process.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .rules import (
    QueueParams,
    gemodel,
    helper_argv,
    maxlen_for_bdp,
    nfqueue_rule_argv,
    nfqueue_rules_argvs,
    params_file_text,
)
from .stats import HelperStats, QueueStats, read_pktlog, read_stats

NETNS_DIR = "/var/run/netns"

__all__ = ["Helper", "HelperStats", "QueueParams", "QueueStats",
           "gemodel", "helper_argv", "maxlen_for_bdp", "nfqueue_rule_argv",
           "nfqueue_rules_argvs", "params_file_text", "read_pktlog", "read_stats"]


class Helper:
    """One helper process serving ``queues`` inside namespace ``netns`` (a name under
    /var/run/netns).  Started by this process, which must outlive it (PR_SET_PDEATHSIG)."""

    def __init__(self, netns: str | None, queues: Sequence[QueueParams], state_dir: Path,
                 stats_interval_ms: int = 500, spin_us: float | None = None,
                 rt_prio: int = 0, nice: int = 0, cpu: int | None = None,
                 spin_dense: bool = False) -> None:
        self.netns = netns
        self.cpu, self.spin_dense = cpu, spin_dense
        self.queues = list(queues)
        self.state_dir = Path(state_dir)
        tag = netns or "root"
        self.stats_path = self.state_dir / f"delayline-{tag}.json"
        self.params_path = self.state_dir / f"delayline-{tag}.params"
        self.stderr_path = self.state_dir / f"delayline-{tag}.stderr"
        self.stats_interval_ms = stats_interval_ms
        self.spin_us = spin_us
        self.rt_prio, self.nice = rt_prio, nice
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        """The helper's command line (builds the helper first if its source is newer)."""
        from .build import helper_path  # not at import: `python -m testbed.delay.nfqueue.build`
        return helper_argv(str(helper_path()), os.getpid(), self.queues, str(self.stats_path),
                           f"{NETNS_DIR}/{self.netns}" if self.netns else None,
                           self.stats_interval_ms, str(self.params_path), self.spin_us,
                           self.rt_prio, self.nice, self.cpu, self.spin_dense)

    def start(self) -> int:
        """Start the helper; returns its pid."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.params_path.write_text(params_file_text(self.queues))
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err)
        return self.proc.pid

    @property
    def pid(self) -> int | None:
        """Pid of the running helper."""
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        """True while the helper runs."""
        return self.proc is not None and self.proc.poll() is None

    def update(self, queues: Sequence[QueueParams]) -> None:
        """Change parameters live (delay, jitter, loss, ...; not seed or pktlog): SIGHUP."""
        self.queues = list(queues)
        tmp = self.params_path.with_suffix(".tmp")
        tmp.write_text(params_file_text(self.queues))
        os.replace(tmp, self.params_path)
        if self.alive():
            self.proc.send_signal(signal.SIGHUP)

    def snapshot(self) -> None:
        """Ask for a stats file now (SIGUSR1); it appears within a few ms."""
        if self.alive():
            self.proc.send_signal(signal.SIGUSR1)

    def stats(self) -> HelperStats:
        """The last stats file written."""
        return read_stats(self.stats_path)

    def stderr(self) -> str:
        """What the helper wrote on stderr."""
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM (final stats are written), then SIGKILL if it lingers; returns exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
