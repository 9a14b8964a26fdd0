"""Soak: one `aitb campaign` of many short runs back to back, with random events, kills of the
campaign process at random instants (each followed by a resume) and a CPU hog for part of the
time, watched for leaks and for runs that claim to be trustworthy while their CPU was starved.

Usage (root): .venv/bin/python bench/soak.py [--runs 200] [--seed 1] [--kills 8]
    [--hog-threads 2] [--window 25] [--work DIR] [--keep]

The campaign (written to ``WORK/soak.yaml``): a 3-host single switch at 200 Mbit/s with a
ring all-reduce of 1 MiB x 4 iterations (a few seconds a run; no capture, counters every
20 ms), one point per run
(``zip`` over the events' keys, one repetition): per run a seeded random link down and up on
one link during iteration 1 (after the connections are up), a rate degrade (a rate change
for 0.4 s) on another, and a straggler rank with a
random factor. It runs with ``AITB_STATE_DIR=WORK/state`` so that every registry the soak's
runs write is the soak's own (other labs on the machine are not counted).

Kills: ``--kills`` times, at seeded random runs, a seeded random delay (0.2 to 3 s) after the
run started, the campaign process gets SIGINT, SIGTERM or SIGKILL (in turn), by its pid;
exit codes must be 130, 143 and death by SIGKILL; then the same command resumes it.
CPU hog: ``--hog-threads`` busy-loop processes (started and ended by pid) run while the
count of completed runs is ``--hog-runs`` counts from a quarter into each window (``--window``
runs): the run under way when it starts and when it stops is partly starved, those between
wholly; the intervals it ran are recorded (wall clock).

Printed per window of ``--window`` completed runs (and once per hour of wall time): the
campaign process's open file descriptors and RSS (/proc/PID/fd, /proc/PID/status VmRSS), the
soak's network namespaces (``/run/netns/aitb-<lab id>-*`` of the soak's lab ids), root
namespace interfaces with the soak's owner alias (``aitb:<lab id>``), registry entries under
the soak's state dir, processes of the campaign's tree and processes left (orphans reparented
to this script, which is the child subreaper, other than the hog), disk used per run in the
window (bytes under the results folder), runs ok / failed / untrustworthy in the window, and
runs per hour. Besides, at every completed run: the fewest descriptors the campaign process held
since the run before completed (polled every 0.1 s; between two labs, so what a run did not give
back) and its RSS; ``fd_growth_max`` and ``rss_growth_kib_max`` are the growth within one
campaign process from its second completed run to its last. At the end (the campaign
finished): leaks = namespaces + interfaces + registry entries + processes left + killed runs
whose directory was not discarded on resume; a run is starved when its traffic window (first
op start to last op end, timeline.jsonl) lies entirely inside an interval where the hog ran;
trustworthy-while-starved counts starved runs whose fidelity.json says ``trustworthy: true``.
The last line::

    verdict: leaks: N, trustworthy-while-starved: N

Exit 0 when both are 0, 1 otherwise. ``run()`` is the same code as a function (the netns
slice tests/netns/test_soak_slice.py calls it with 10 runs).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NETNS_DIR = Path("/run/netns")
LINKS = ("h1-s1", "h2-s1", "h3-s1")
SIGNALS = ("SIGINT", "SIGTERM", "SIGKILL")
EXPECTED_RC = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL}
PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.1
CAMPAIGN_NAME = "soak"

BASE = """\
name: soak-run
seed: 1
topology:
  inline:
    name: soak3
    generator: {name: single_switch, params: {hosts: 3, link: host}}
    profiles:
      host: {rate: 200Mbit, buffer: 200p}
workloads:
  - kind: collective
    name: ar
    op: all_reduce
    algorithm: ring
    size: 1MiB
    iterations: 4
    compute: 5ms
capture: {enabled: false}
counters: {interval: 20ms}
events:
  - {at: {workload: ar, iteration: 1, offset: 0.01s}, kind: link_down, link: h1-s1}
  - {at: {workload: ar, iteration: 1, offset: 0.1s}, kind: link_up, link: h1-s1}
  - {at: 0.2s, kind: degrade, link: h2-s1, rate: 50Mbit, duration: 400ms}
  - {at: 0.2s, kind: straggler, rank: 1, factor: 2.0}
"""


def campaign_text(runs: int, rng: random.Random) -> str:
    """The soak's campaign: ``runs`` points of one repetition, each with its own random
    events (zip over the events' keys of BASE)."""
    cols: dict[str, list[Any]] = {k: [] for k in (
        "events.0.at.offset", "events.0.link", "events.1.at.offset", "events.1.link",
        "events.2.at",
        "events.2.link", "events.2.rate", "events.3.at", "events.3.rank", "events.3.factor")}
    for _ in range(runs):
        # the link goes down during iteration 1, after the ranks' connections are up (a
        # down while agents connect fails the run with "Network is unreachable": connect
        # does not retry), and comes back 20-150 ms later, within the iterations
        down, link = round(rng.uniform(0.0, 0.03), 3), rng.choice(LINKS)
        cols["events.0.at.offset"].append(f"{down}s")
        cols["events.0.link"].append(link)
        cols["events.1.at.offset"].append(f"{round(down + rng.uniform(0.02, 0.15), 3)}s")
        cols["events.1.link"].append(link)
        cols["events.2.at"].append(f"{round(rng.uniform(0.0, 0.8), 3)}s")
        cols["events.2.link"].append(rng.choice(LINKS))
        cols["events.2.rate"].append(f"{rng.choice((20, 50, 100, 150))}Mbit")
        cols["events.3.at"].append(f"{round(rng.uniform(0.0, 0.5), 3)}s")
        cols["events.3.rank"].append(rng.randrange(3))
        cols["events.3.factor"].append(rng.choice((1.5, 2.0, 3.0)))
    lines = [f"name: {CAMPAIGN_NAME}", "base: {file: base.yaml}", "zip:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in cols.items()]
    lines += ["repetitions: 1", "seeds: fixed", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- what the machine holds


def soak_namespaces(ids: set[str]) -> list[str]:
    """Mounted namespaces ``aitb-<id>-*`` of the lab ids ``ids``."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith("aitb-")
                  and n.split("-", 2)[1] in ids)


def soak_interfaces(ids: set[str]) -> list[str]:
    """Root namespace interfaces whose owner alias is ``aitb:<id>`` for an id of ``ids``
    (read over netlink)."""
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        return sorted(m.get_attr("IFLA_IFNAME") for m in ip.get_links()
                      if (m.get_attr("IFLA_IFALIAS") or "").removeprefix("aitb:") in ids
                      and (m.get_attr("IFLA_IFALIAS") or "").startswith("aitb:"))


def registries(state: Path) -> list[str]:
    """Registry directories (lab ids) under the soak's state dir."""
    try:
        return sorted(p.name for p in state.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def _all_ppids() -> dict[int, tuple[int, str]]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st is not None:
                out[int(d)] = (int(st[1]), st[0])
    return out


def tree(pid: int | None) -> list[int]:
    """Live (not zombie) descendants of ``pid``."""
    if pid is None:
        return []
    procs = _all_ppids()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c, (pp, st) in procs.items():
            if pp == p and st != "Z":
                out.append(c)
                todo.append(c)
    return out


def orphans(exclude: set[int]) -> list[int]:
    """Processes reparented to this one (the child subreaper), other than ``exclude`` and
    their trees; zombies are reaped and not listed."""
    me, out = os.getpid(), []
    for pid, (pp, st) in _all_ppids().items():
        if pp != me or pid in exclude:
            continue
        if st == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            continue
        out.append(pid)
    return out


def proc_figures(pid: int | None) -> tuple[int | None, int | None]:
    """(open file descriptors, VmRSS in KiB) of ``pid``, None where unreadable."""
    if pid is None:
        return None, None
    try:
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        rss = next(int(line.split()[1]) for line in
                   Path(f"/proc/{pid}/status").read_text().splitlines()
                   if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None, None
    return fds, rss


def du_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path``."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_size
    return total


# ---------------------------------------------------------------- the hog


class Hog:
    """``threads`` busy-loop processes, started and ended by pid; remembers when it ran."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.procs: list[subprocess.Popen] = []
        self.intervals: list[list[float]] = []

    @property
    def on(self) -> bool:
        return bool(self.procs)

    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def start(self) -> None:
        if self.on or self.threads <= 0:
            return
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(self.threads)]
        self.intervals.append([time.time(), float("inf")])

    def stop(self) -> None:
        if not self.on:
            return
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []
        self.intervals[-1][1] = time.time()


# ---------------------------------------------------------------- the soak


@dataclass
class KillRecord:
    """One kill: the signal, the run it landed in, the delay after that run started, the
    exit code, whether it was as expected, and the run directory that had to be discarded."""

    signal: str
    run_key: str | None
    delay_s: float
    rc: int | None = None
    rc_ok: bool = False
    run_dir: str | None = None
    status: str | None = None  # that run's manifest status right after the kill


@dataclass
class Soak:
    """State of one soak (see the module docstring)."""

    work: Path
    runs: int
    window: int
    hog: Hog
    kill_at: dict[int, str]  # completed-run count -> signal for the next run
    rng: random.Random
    out: Any = sys.stdout
    ids: set[str] = field(default_factory=set)
    kills: list[KillRecord] = field(default_factory=list)
    windows: list[dict[str, Any]] = field(default_factory=list)
    failed_keys: set[str] = field(default_factory=set)
    pids: list[int] = field(default_factory=list)  # campaign processes, in order
    t0: float = 0.0
    hog_runs: int = 2
    # per campaign pid, at every completed run: (completed runs, the fewest open descriptors
    # polled since the run before completed (between two labs: what a run did not give back),
    # VmRSS KiB)
    samples: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    @property
    def results(self) -> Path:
        return self.work / "results"

    def state(self) -> dict[str, Any]:
        path = self.results / CAMPAIGN_NAME / "campaign-state.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {"runs": {}}

    def note_ids(self, st: dict[str, Any]) -> None:
        """Remember every lab id of the soak: registries and run directories."""
        self.ids.update(registries(self.state_dir))
        for e in st["runs"].values():
            self.ids.add(Path(e["run_dir"]).name.rsplit("-", 1)[-1])
            if e["status"] == "failed":
                self.failed_keys.add(e["run_dir"])

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "orchestration.cli", "campaign",
                str(self.work / "soak.yaml"), "--results", str(self.results), "-q"]

    def env(self) -> dict[str, str]:
        return {**os.environ, "AITB_STATE_DIR": str(self.state_dir),
                "PYTHONPATH": str(ROOT)}

    def start(self) -> None:
        log = (self.work / f"campaign-{len(self.pids)}.log").open("w")
        self.proc = subprocess.Popen(self.argv(), cwd=ROOT, env=self.env(), stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        self.pids.append(self.proc.pid)

    def print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # one window line
    def figures(self, st: dict[str, Any], since: dict[str, Any], label: str) -> dict[str, Any]:
        ok = [e for e in st["runs"].values() if e["status"] == "ok"]
        new = [e for e in ok if e["run_dir"] not in since["ok_dirs"]]
        untrust = sum(1 for e in new if trust_of(self.results / CAMPAIGN_NAME / e["run_dir"])
                      is False)
        failed_new = len(self.failed_keys - since["failed"])
        disk = du_bytes(self.results)
        pid = self.proc.pid if self.proc and self.proc.poll() is None else None
        fds, rss = proc_figures(pid)
        hours = max(time.time() - since["t"], 1e-9) / 3600
        exclude = self.hog.pids() | ({pid} if pid else set())
        fig = {
            "window": label, "t_s": round(time.time() - self.t0, 1), "campaign_pid": pid,
            "fds": fds, "rss_kib": rss, "netns": len(soak_namespaces(self.ids)),
            "ifaces": len(soak_interfaces(self.ids)),
            "registries": len(registries(self.state_dir)),
            "procs_tree": len(tree(pid)), "procs_left": len(orphans(exclude)),
            "disk_per_run_kib": round((disk - since["disk"]) / 1024 / max(len(new), 1)),
            "ok": len(new), "failed": failed_new, "untrustworthy": untrust,
            "ok_per_h": round(len(new) / hours), "failed_per_h": round(failed_new / hours),
            "untrustworthy_per_h": round(untrust / hours), "hog": self.hog.on,
            "load1": round(os.getloadavg()[0], 2),
        }
        self.windows.append(fig)
        if len(self.windows) == 1:
            self.print("window  t_s  pid  fds  rss_kib  netns ifaces regs tree left "
                       "disk/run_kib  ok fail untrust  ok/h fail/h untr/h  hog load1")
        self.print(f"{fig['window']:>6} {fig['t_s']:>5} {fig['campaign_pid'] or '-':>5} "
                   f"{fig['fds'] if fds is not None else '-':>4} "
                   f"{fig['rss_kib'] if rss is not None else '-':>8} {fig['netns']:>5} "
                   f"{fig['ifaces']:>6} {fig['registries']:>4} {fig['procs_tree']:>4} "
                   f"{fig['procs_left']:>4} {fig['disk_per_run_kib']:>12} {fig['ok']:>3} "
                   f"{fig['failed']:>4} {fig['untrustworthy']:>7} {fig['ok_per_h']:>5} "
                   f"{fig['failed_per_h']:>6} {fig['untrustworthy_per_h']:>6}  "
                   f"{'on' if fig['hog'] else 'off':>3} {fig['load1']:>5}")
        since.update(ok_dirs={e["run_dir"] for e in ok}, failed=set(self.failed_keys),
                     disk=disk, t=time.time())
        return fig

    def hog_wanted(self, done: int) -> bool:
        """The hog runs while ``done`` is ``hog_runs`` counts from a quarter into its
        window."""
        pos = done % self.window
        return self.window // 4 <= pos < self.window // 4 + self.hog_runs

    def kill(self, sig_name: str, st: dict[str, Any]) -> KillRecord:
        """Wait until a run is under way, a random delay more, then signal the campaign."""
        assert self.proc is not None
        deadline = time.monotonic() + 60
        key = None
        while self.proc.poll() is None and time.monotonic() < deadline:
            st = self.state()
            self.note_ids(st)
            key = next((k for k, e in st["runs"].items() if e["status"] == "running"), None)
            if key is not None:
                break
            time.sleep(0.02)
        delay = round(self.rng.uniform(0.2, 3.0), 3)
        time.sleep(delay)
        rec = KillRecord(sig_name, key, delay)
        if self.proc.poll() is not None:
            rec.rc = self.proc.returncode
            return rec  # it ended first: missed
        self.proc.send_signal(getattr(signal, sig_name))
        try:
            rec.rc = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rec.rc = self.proc.wait()
        rec.rc_ok = rec.rc == EXPECTED_RC[sig_name]
        st = self.state()
        self.note_ids(st)
        # the run under way when the signal came (maybe the one after ``key``)
        rec.run_key = next((k for k, e in st["runs"].items() if e["status"] == "running"),
                           None)
        rec.run_dir = st["runs"][rec.run_key]["run_dir"] if rec.run_key else None
        if rec.run_dir:
            with contextlib.suppress(OSError, json.JSONDecodeError):
                rec.status = json.loads((self.results / CAMPAIGN_NAME / rec.run_dir
                                         / "manifest.json").read_text()).get("status")
        self.kills.append(rec)
        self.print(f"kill {len(self.kills)}: {sig_name} {rec.delay_s} s after run {key} "
                   f"started, in run {rec.run_key}: "
                   f"exit {rec.rc} ({'as expected' if rec.rc_ok else 'WRONG'}), "
                   f"its manifest status {rec.status}")
        return rec

    def loop(self, time_budget_s: float) -> int | None:
        """Drive the campaign to its end: kills and resumes, the hog, window lines.
        Returns the last campaign exit code."""
        self.t0 = time.time()
        since = {"ok_dirs": set(), "failed": set(), "disk": 0, "t": self.t0}
        next_window, next_hour = self.window, self.t0 + 3600
        self.start()
        last_done, low_fds = -1, None  # fewest descriptors seen since the last completion
        while True:
            st = self.state()
            self.note_ids(st)
            done = sum(1 for e in st["runs"].values() if e["status"] == "ok")
            fds, rss = proc_figures(self.proc.pid if self.proc.poll() is None else None)
            if fds is not None:
                low_fds = fds if low_fds is None else min(low_fds, fds)
            if done != last_done and low_fds is not None and rss is not None:
                self.samples.setdefault(self.proc.pid, []).append((done, low_fds, rss))
                last_done, low_fds = done, None
            (self.hog.start if self.hog_wanted(done) and done < self.runs else self.hog.stop)()
            if done >= next_window:
                self.figures(st, since, str(next_window))
                next_window += self.window
            if time.time() >= next_hour:
                self.figures(st, since, f"{round((time.time() - self.t0) / 3600)}h")
                next_hour += 3600
            sig = self.kill_at.get(done)
            if sig is not None and self.proc.poll() is None:
                del self.kill_at[done]
                self.kill(sig, st)
                self.start()  # resume: the same command
                low_fds = None
                continue
            rc = self.proc.poll()
            if rc is not None:
                self.hog.stop()
                return rc
            if time.time() - self.t0 > time_budget_s:
                self.print(f"time budget of {time_budget_s:.0f} s spent; stopping (SIGINT)")
                self.proc.send_signal(signal.SIGINT)
                self.hog.stop()
                return self.proc.wait()
            time.sleep(POLL_S)


def trust_of(run_dir: Path) -> bool | None:
    """``trustworthy`` of the run's fidelity.json (None: none or no verdict)."""
    try:
        return json.loads((run_dir / "fidelity.json").read_text()).get("trustworthy")
    except (OSError, json.JSONDecodeError):
        return None


def traffic_window(run_dir: Path) -> tuple[float, float] | None:
    """(first op start, last op end), Unix seconds, from the run's timeline.jsonl."""
    lo, hi = float("inf"), float("-inf")
    try:
        text = (run_dir / "timeline.jsonl").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
            r = json.loads(line)
            lo, hi = min(lo, r["t_start"]), max(hi, r["t_end"])
    return (lo, hi) if lo <= hi else None


def starvation(run_dir: Path, intervals: list[list[float]]) -> str:
    """``starved`` (traffic window inside a hog interval), ``partly`` (overlapping one),
    ``no`` or ``unknown`` (no timeline)."""
    win = traffic_window(run_dir)
    if win is None:
        return "unknown"
    lo, hi = win
    if any(a <= lo and hi <= b for a, b in intervals):
        return "starved"
    if any(a < hi and lo < b for a, b in intervals):
        return "partly"
    return "no"


def plan_kills(runs: int, kills: int, rng: random.Random,
               signals: tuple[str, ...] = SIGNALS) -> dict[int, str]:
    """Completed-run counts (distinct, in 1..runs-1) after which the next run is killed,
    with ``signals`` in turn (default SIGINT, SIGTERM, SIGKILL)."""
    at = sorted(rng.sample(range(1, max(runs, 2)), min(kills, max(runs - 1, 1))))
    return {n: signals[i % len(signals)] for i, n in enumerate(at)}


def run(runs: int = 200, seed: int = 1, kills: int | None = None, hog_threads: int | None = None,
        window: int = 25, hog_runs: int | None = None, work: Path | None = None,
        keep: bool = False, time_budget_s: float = 4 * 3600.0, out: Any = sys.stdout,
        signals: tuple[str, ...] = SIGNALS) -> dict[str, Any]:
    """Run the soak (needs root); returns its figures (``windows``, ``kills``, ``leaks``,
    ``leak_detail``, ``trustworthy_while_starved``, ``runs`` by status, ...). Leaves
    nothing behind unless ``keep`` (then the work folder stays; namespaces never do)."""
    if os.geteuid() != 0:
        raise SystemExit("the soak needs root (network namespaces)")
    rng = random.Random(seed)
    kills = max(1, runs // 25) if kills is None else kills
    hog = Hog((os.cpu_count() or 1) if hog_threads is None else hog_threads)
    made = work is None
    work = Path(tempfile.mkdtemp(prefix="aitb-soak-")) if work is None else work
    work.mkdir(parents=True, exist_ok=True)
    (work / "base.yaml").write_text(BASE)
    (work / "soak.yaml").write_text(campaign_text(runs, rng))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    soak = Soak(work, runs, window, hog, plan_kills(runs, kills, rng, signals), rng, out=out,
                hog_runs=max(1, window // 10) if hog_runs is None else hog_runs)
    soak.print(f"soak: {runs} runs, {kills} kills, hog {hog.threads} process(es), window "
               f"{window}, work {work}, load {tuple(round(x, 2) for x in os.getloadavg())}")
    try:
        rc = soak.loop(time_budget_s)
        # the campaign ended: everything it made must be gone
        st = soak.state()
        soak.note_ids(st)
        last = soak.figures(st, {"ok_dirs": set(), "failed": set(), "disk": 0, "t": soak.t0},
                            "end")
        result = summarize(soak, st, rc, last)
    finally:
        hog.stop()
        if soak.proc is not None and soak.proc.poll() is None:
            soak.proc.kill()
            soak.proc.wait()
        cleanup(soak)
        if made and not keep:
            shutil.rmtree(work, ignore_errors=True)
    soak.print(json.dumps({k: v for k, v in result.items() if k != "windows"}, default=str))
    soak.print(f"verdict: leaks: {result['leaks']}, trustworthy-while-starved: "
               f"{result['trustworthy_while_starved']}")
    return result


def summarize(soak: Soak, st: dict[str, Any], rc: int | None, last: dict[str, Any]
              ) -> dict[str, Any]:
    """Final figures: leaks, statuses, starvation against trust."""
    root = soak.results / CAMPAIGN_NAME
    entries = st["runs"]
    by_status: dict[str, int] = {}
    for e in entries.values():
        by_status[e["status"]] = by_status.get(e["status"], 0) + 1
    starved = {"starved": 0, "partly": 0, "no": 0, "unknown": 0}
    tws, tw_partly, untrust, manifest_wrong, no_events = [], 0, 0, [], []
    for key, e in entries.items():
        run_dir = root / e["run_dir"]
        try:
            manifest = json.loads((run_dir / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError):
            manifest = {}
        status = manifest.get("status")
        if status == "ok" and not (manifest.get("events") or {}).get("applied"):
            no_events.append(key)
        if status != e["status"] and not (e["status"] == "failed" and status == "failed"):
            manifest_wrong.append(f"{key}: state {e['status']}, manifest {status}")
        if e["status"] != "ok":
            continue
        s = starvation(run_dir, soak.hog.intervals)
        starved[s] += 1
        trust = trust_of(run_dir)
        untrust += trust is False
        if s == "starved" and trust is True:
            tws.append(key)
        tw_partly += s == "partly" and trust is True
    ns, ifs = soak_namespaces(soak.ids), soak_interfaces(soak.ids)
    regs = registries(soak.state_dir)
    left = orphans(soak.hog.pids())
    undiscarded = [k.run_dir for k in soak.kills if k.run_dir
                   and (root / k.run_dir).exists()]
    fds = [f for per in soak.samples.values() for _n, f, _r in per]
    rss = [r for per in soak.samples.values() for _n, _f, r in per]
    # growth within one campaign process: last sample against the first after its first run
    # (imports and the first lab are done by then)
    fd_growth = max((per[-1][1] - per[min(1, len(per) - 1)][1]
                     for per in soak.samples.values()), default=0)
    rss_growth = max((per[-1][2] - per[min(1, len(per) - 1)][2]
                      for per in soak.samples.values()), default=0)
    return {
        "runs_planned": soak.runs, "campaign_rc": rc, "runs": by_status,
        "failed_seen": len(soak.failed_keys), "untrustworthy": untrust,
        "starvation": starved, "trustworthy_while_starved": len(tws),
        "trustworthy_while_starved_runs": tws, "trustworthy_while_partly_starved": tw_partly,
        "kills": [k.__dict__ for k in soak.kills],
        "kills_wrong_rc": sum(1 for k in soak.kills if not k.rc_ok),
        "manifest_vs_state": manifest_wrong,
        "leaks": len(ns) + len(ifs) + len(regs) + len(left) + len(undiscarded),
        "leak_detail": {"netns": ns, "ifaces": ifs, "registries": regs,
                        "processes": [_cmdline(p) for p in left], "undiscarded": undiscarded},
        "runs_without_events": no_events,
        "fds_min_max": [min(fds, default=None), max(fds, default=None)],
        "fd_growth_max": fd_growth,
        "rss_kib_min_max": [min(rss, default=None), max(rss, default=None)],
        "rss_growth_kib_max": rss_growth,
        "fds_per_process": {pid: [f for _n, f, _r in v] for pid, v in soak.samples.items()},
        "campaign_pids": soak.pids, "hog_intervals": len(soak.hog.intervals),
        "lab_ids": len(soak.ids), "wall_s": round(time.time() - soak.t0, 1),
        "disk_bytes": du_bytes(soak.results), "windows": soak.windows, "end": last,
        "load": tuple(round(x, 2) for x in os.getloadavg()),
    }


def _cmdline(pid: int) -> str:
    try:
        return f"{pid} " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "
                                                                       ).decode().strip()
    except OSError:
        return str(pid)


def cleanup(soak: Soak) -> None:
    """Whatever the soak's runs left (counted as leaks already): ``aitb clean --force`` of
    each registry under the soak's state dir, then SIGKILL of orphans, by pid."""
    for rid in registries(soak.state_dir):
        subprocess.run([sys.executable, "-m", "orchestration.cli", "clean", rid, "--force"],
                       cwd=ROOT, env=soak.env(), capture_output=True, timeout=120)
    for pid in orphans(soak.hog.pids()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="runs in the campaign")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills", type=int, default=None,
                    help="kills of the campaign process (default runs // 25, at least 1)")
    ap.add_argument("--hog-threads", type=int, default=None,
                    help="busy-loop processes of the CPU hog (default: CPU count; 0: none)")
    ap.add_argument("--window", type=int, default=25, help="completed runs per window line")
    ap.add_argument("--hog-runs", type=int, default=None, help="runs per window under the "
                    "hog, from a quarter into the window (default window // 10, at least 1)")
    ap.add_argument("--work", type=Path, default=None, help="work folder (default: a new "
                    "temporary one, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--time-budget-s", type=float, default=4 * 3600.0)
    args = ap.parse_args(argv)
    out = run(runs=args.runs, seed=args.seed, kills=args.kills, hog_threads=args.hog_threads,
              window=args.window, hog_runs=args.hog_runs, work=args.work, keep=args.keep,
              time_budget_s=args.time_budget_s)
    return 0 if out["leaks"] == 0 and out["trustworthy_while_starved"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
