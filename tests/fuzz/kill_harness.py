"""Kill harness: ``aitb run`` of a small experiment killed with SIGINT, SIGTERM and SIGKILL at
random instants of its phases (deploy, traffic, teardown, analysis), then checked for leaks and
lies; and a small campaign killed mid-point and resumed. Needs root (real namespaces).

    sudo .venv/bin/python tests/fuzz/kill_harness.py --seed 1 --kills 24 --budget-s 600

Per kill: the run (``python -m orchestration.cli run EXPERIMENT -q``, ``--no-analysis``
unless the phase is analysis) starts; the harness follows its ``run.log`` (the phase is the
last progress line: "bringing up lab" deploy, "workload" traffic, "tearing down" teardown,
"analysing" analysis) and its registry (every process record it ever lists), waits a seeded
random delay inside the chosen phase and signals the run's pid. After the run ends (and
``aitb clean RUN_ID`` for SIGKILL), it checks:

- exit code: 130 for SIGINT, 143 for SIGTERM (aitb's own, not death by the signal), also
  for a signal that lands after the run wrote its final manifest (status ok, no analysis
  running: the interpreter's exit; counted in phase "exit", its status must stay ``ok``),
  except where the process had already made its exit system call (PF_EXITING in its
  /proc stat flags just before or after the signal: the kernel drops the signal; counted as
  missed in phase "exit");
- no namespace marked with the run id (``/run/netns/aitb-<id>-*``), no registry left;
- no owned scratch of the run's process left in the temporary directory (models.owned:
  ``aitb-<tag>-<pid>.<start>-*``, the controller's socket directory) and no Unix socket in
  its run directory;
- no process left: none of the registry's (pid, start time) pairs alive, and no orphan at
  all (the harness is the child subreaper, prctl(2) PR_SET_CHILD_SUBREAPER, so whatever the
  run started and left reparents to it, registered or not);
- manifest ``status``: ``interrupted`` after SIGINT/SIGTERM, ``killed`` after SIGKILL and
  clean; never ``running``. A SIGKILL in the analysis (the lab is gone, nothing can write)
  may leave ``ok`` only with an analysis that says it never ended (``ok`` null, its pid
  dead); an ``ok`` analysis needs metrics.json.

The resume check: a campaign (examples/campaigns/incast_sweep.yaml cut to 2 points x 2
repetitions) is SIGKILLed once a run completed and the next has its run directory, then
resumed with the same command: the completed runs' files must be byte-identical (sha256 and
mtime), the killed run's directory and namespaces gone, and every run ``ok``.

Prints a table (kills tried per signal and phase, missed, leaks, wrong statuses, wrong exit
codes, hangs) and one JSON line. Leaves nothing behind: whatever leaked is ended by pid
afterwards (``aitb clean --force``, then SIGKILL of the leaked pids) and reported.
With ``--events N`` (``run(events=N)``) every kill's experiment also carries a seeded random
``events:`` timeline of N events (:func:`random_events`: links down and up, flaps, partitions
with a duration, rate degrades and ramps, a straggler, a node down whose agent is frozen and
continued), so the signal may land while links are down, qdiscs reshaped or an agent stopped;
the checks then also cover the root namespace's links and qdiscs (none added by the run).

tests/netns/test_kill_harness.py runs a seeded slice of three kills with random events.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
EXPERIMENT = ROOT / "examples" / "ring_allreduce_quick.yaml"  # 4 agents, capture, counters
CAMPAIGN = ROOT / "examples" / "campaigns" / "incast_sweep.yaml"
CODE = [ROOT]  # the checkout whose aitb is killed (--code: e.g. main, to see it fail there)
NETNS_DIR = Path("/run/netns")
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
PHASES = ("deploy", "traffic", "teardown", "analysis")
MARKERS = (("bringing up lab", "deploy"), ("workload ", "traffic"),
           ("tearing down", "teardown"), ("analysing", "analysis"))
# the latest instant (s after the phase's first log line) a kill is drawn from: about the
# phase's length for this experiment on a loaded 2-core box (deploy ~0.7 s, traffic ~4 s,
# teardown ~0.2 s, analysis 4-6 s); a kill after the phase ended counts in the phase it hit
WINDOW_S = {"deploy": 0.8, "traffic": 4.0, "teardown": 0.25, "analysis": 3.5}
EXPECTED_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -signal.SIGKILL}
RUN_TIMEOUT_S = 180.0
GRACE_S = 10.0  # for processes ended by SIGTERM (their grace is 2 s) or PR_SET_PDEATHSIG
PR_SET_CHILD_SUBREAPER = 36


@dataclass
class Kill:
    """One kill and what was found after it."""

    signal: str
    target: str
    phase: str = "-"  # the phase it landed in (last progress line before the signal)
    missed: bool = False  # the run had ended before the signal
    exit_code: int | None = None
    status: str | None = None
    leaks: list[str] = field(default_factory=list)
    wrong_status: str | None = None
    wrong_exit: str | None = None
    hang: bool = False
    exiting: bool = False  # PF_EXITING was set on the process just before or after the signal
    run_id: str | None = None
    signal_after_s: float | None = None  # from the start of `aitb run` to the signal
    exit_after_s: float | None = None  # from the signal to the run's exit
    trial_s: float | None = None  # the whole kill with its checks
    events: list[str] = field(default_factory=list)  # the random events: timeline, if any


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "AITB_STATE_DIR": str(state), "PYTHONPATH": str(CODE[0])}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestration.cli", *args]


# `python -m orchestration.cli` that dumps every thread's Python stack to its stderr on
# SIGUSR1: what a hung run was doing (sent before it is SIGKILLed as a hang)
_DUMPING = ("import faulthandler, runpy, signal; "
            "faulthandler.register(signal.SIGUSR1, all_threads=True); "
            "runpy.run_module('orchestration.cli', run_name='__main__', alter_sys=True)")


def _pid_start(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int, start: int | None) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rpartition(")")[2].split()
    except OSError:
        return False
    return rest[0] != "Z" and (start is None or start < 0 or int(rest[19]) == start)


PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit (exit system call made)


def _exiting(pid: int) -> bool:
    """True if process ``pid`` has begun its exit in the kernel (proc(5) stat field 9, the
    PF_* flags, has PF_EXITING): a signal sent now is dropped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return bool(int(f.read().rpartition(")")[2].split()[6]) & PF_EXITING)
    except (OSError, ValueError, IndexError):
        return True  # gone already


def _orphans(exclude: set[int]) -> list[int]:
    """Children of this process (reparented to it as subreaper) other than ``exclude``;
    zombies among them are reaped and not listed."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in exclude:
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(rest[1]) != me:
            continue
        if rest[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(d), os.WNOHANG)
            continue
        out.append(int(d))
    return out


LINKS = ("h1-s1", "h2-s1", "h3-s1", "h4-s1")  # ring_allreduce_quick.yaml's (single_switch)
HOSTS = ("h1", "h2", "h3", "h4")


def random_events(rng: random.Random, n: int, span_s: float = 2.0) -> list[str]:
    """``n`` events (YAML flow mappings, one a line) at seeded random times within
    ``span_s`` s of the run's start, on EXPERIMENT's links and hosts; every down is followed
    by its up within 0.5 s (the ring waits for it rather than timing out)."""
    out = []
    for _ in range(n):
        at = round(rng.uniform(0.0, span_s), 3)
        link = rng.choice(LINKS)
        back = round(at + rng.uniform(0.05, 0.5), 3)
        kind = rng.choice(("link", "flap", "partition", "degrade", "ramp", "straggler",
                           "freeze"))
        if kind == "link":
            out += [f"{{at: {at}s, kind: link_down, link: {link}}}",
                    f"{{at: {back}s, kind: link_up, link: {link}}}"]
        elif kind == "flap":
            out.append(f"{{at: {at}s, kind: flap, link: {link}, period: 300ms, down: 100ms, "
                       f"count: 2}}")
        elif kind == "partition":
            two = rng.sample(LINKS, 2)
            out.append(f"{{at: {at}s, kind: partition, link: [{two[0]}, {two[1]}], "
                       f"duration: {round(back - at, 3)}s}}")
        elif kind == "degrade":
            out.append(f"{{at: {at}s, kind: degrade, link: {link}, rate: "
                       f"{rng.choice((100, 300, 600))}Mbit, duration: 1s}}")
        elif kind == "ramp":
            out.append(f"{{at: {at}s, kind: degrade, link: {link}, direction: a_to_b, rate: "
                       f"200Mbit, ramp_s: 0.4, ramp_steps: 4, duration: 1s}}")
        elif kind == "straggler":
            out.append(f"{{at: {at}s, kind: straggler, rank: {rng.randrange(4)}, factor: "
                       f"{rng.choice((1.5, 3.0))}}}")
        else:
            host = rng.choice(HOSTS)
            out += [f"{{at: {at}s, kind: node_down, node: {host}, agent: freeze}}",
                    f"{{at: {back}s, kind: node_up, node: {host}}}"]
    return out


def with_events(experiment: Path, events: list[str], work: Path, tag: str) -> Path:
    """A copy of ``experiment`` with ``events`` appended as its ``events:`` (it has none)."""
    text = experiment.read_text().rstrip("\n") + "\nevents:\n" + "".join(
        f"  - {e}\n" for e in events)
    path = work / f"experiment-{tag}.yaml"
    path.write_text(text)
    return path


def _root_net() -> set[str]:
    """The root namespace's links and qdiscs (``link NAME``, ``qdisc IFINDEX HANDLE KIND``),
    read over netlink."""
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        links = {f"link {m.get_attr('IFLA_IFNAME')}" for m in ip.get_links()}
        qdiscs = {f"qdisc {m['index']} {m['handle']:x} {m.get_attr('TCA_KIND')}"
                  for m in ip.get_qdiscs()}
    return links | qdiscs


def _namespaces(lab_id: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(f"aitb-{lab_id}-"))
    except FileNotFoundError:
        return []


def _phase(log: Path) -> str | None:
    try:
        text = log.read_text(errors="replace")
    except FileNotFoundError:
        return None
    last = None
    for line in text.splitlines():
        for marker, name in MARKERS:
            if f"aitb.run: {marker}" in line:
                last = name
    return last


class Watch:
    """Follows one run: its run directory (once it exists) and every process its registry
    ever listed."""

    def __init__(self, results: Path, state: Path) -> None:
        self.results, self.state = results, state
        self.run_dir: Path | None = None
        self.pids: dict[int, int | None] = {}

    @property
    def lab_id(self) -> str | None:
        return self.run_dir.name.rsplit("-", 1)[-1] if self.run_dir else None

    def poll(self) -> str | None:
        """The run's phase now (None before its first progress line)."""
        if self.run_dir is None:
            found = sorted(self.results.glob("*/*/run.log"))
            if not found:
                return None
            self.run_dir = found[0].parent
        self.registry()
        return _phase(self.run_dir / "run.log")

    def registry(self) -> None:
        if self.lab_id is None:
            return
        try:
            lines = (self.state / self.lab_id / "registry.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") in ("process", "dockerd"):
                self.pids[int(r["pid"])] = r.get("start")

    def manifest(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.run_dir / "manifest.json").read_text()) \
                if self.run_dir else None
        except (OSError, ValueError):
            return None


def _left_processes(watch: Watch, exclude: set[int]) -> list[str]:
    """Registry processes still alive and orphans of this process, after up to GRACE_S."""
    deadline = time.monotonic() + GRACE_S
    while True:
        alive = [p for p, st in watch.pids.items() if _alive(p, st)]
        orphans = [p for p in _orphans(exclude) if p not in alive]
        if not (alive or orphans) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return ([f"registered process {p} alive" for p in alive]
            + [f"unregistered process {p} alive ({_cmdline(p)})" for p in orphans])


def _scratch_left(pid: int, run_dir: Path | None, lab_id: str | None) -> list[Path]:
    """What the run's process ``pid`` made outside its lab and left: its owned scratch in the
    temporary directory (models.owned names, ``aitb-<tag>-<pid>.<start>-*``: the controller's
    socket directory, a probe namespace's is checked with the namespaces), anything there
    named by its lab id (``aitb-<lab id>-*``), and Unix sockets in its run directory
    (``ctl.sock``, ``kick<k>.sock``)."""
    mark = re.compile(rf"aitb-[a-z0-9]{{1,16}}-{pid}\.[0-9]+-[a-z0-9_]+"
                      + (rf"|aitb-{re.escape(lab_id)}-.+" if lab_id else ""))
    left = []
    for root in {Path(tempfile.gettempdir()), Path("/tmp")}:
        with contextlib.suppress(OSError):
            left += [root / n for n in os.listdir(root) if mark.fullmatch(n)]
    if run_dir is not None and run_dir.exists():
        left += [p for p in run_dir.rglob("*") if p.is_socket()]
    return sorted(left)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return "?"


def _remove_leaks(watch: Watch, state: Path, exclude: set[int]) -> None:
    """End what a failed check found: the run's lab by its registry, then leaked pids."""
    if watch.lab_id and (state / watch.lab_id).exists():
        subprocess.run(_cli("clean", watch.lab_id, "--force"), env=_env(state), cwd=CODE[0],
                       capture_output=True, timeout=120, check=False)
    for pid in exclude:
        for path in _scratch_left(pid, watch.run_dir, watch.lab_id):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    for p, st in list(watch.pids.items()):
        if _alive(p, st):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
    for p in _orphans(exclude):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    time.sleep(0.2)
    _orphans(exclude)  # reap


def kill_once(experiment: Path, sig_name: str, target: str, rng: random.Random,
              work: Path, events: int = 0, window_s: float | None = None) -> Kill:
    """One run of ``experiment`` killed by ``sig_name`` in phase ``target`` (with ``events``
    random events, :func:`random_events`), at a random instant up to ``window_s`` (default
    WINDOW_S[target]) after the phase's first log line; see the module doc for the checks."""
    k = Kill(sig_name, target)
    if events:
        k.events = random_events(rng, events)
        experiment = with_events(experiment, k.events, work, f"{sig_name}-{target}")
    root_before = _root_net()
    trial = Path(tempfile.mkdtemp(prefix="kill-", dir=work))
    results, state = trial / "results", work / "state"
    argv = [sys.executable, "-c", _DUMPING, "run", str(experiment), "--results",
            str(results), "-q", *([] if target == "analysis" else ["--no-analysis"])]
    with (trial / "stdout").open("wb") as out, (trial / "stderr").open("wb") as err:
        proc = subprocess.Popen(argv, env=_env(state), cwd=CODE[0], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
    watch = Watch(results, state)
    t_start = time.monotonic()
    delay_s = rng.uniform(0.0, WINDOW_S[target] if window_s is None else window_s)
    order = PHASES.index(target)
    seen_at: float | None = None
    sent = False
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        phase = watch.poll()
        if seen_at is None and phase is not None and PHASES.index(phase) >= order:
            seen_at = time.monotonic()
        if seen_at is not None and time.monotonic() >= seen_at + delay_s:
            k.phase = watch.poll() or "-"
            if proc.poll() is None:
                before = _exiting(proc.pid)
                proc.send_signal(SIGNALS[sig_name])
                k.exiting = before or _exiting(proc.pid)
                sent, sent_wall = True, time.time()
                t_sig = time.monotonic()
                k.signal_after_s = round(t_sig - t_start, 3)
            break
        time.sleep(0.005)
    k.missed = not sent
    try:
        k.exit_code = proc.wait(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        k.hang = True
        proc.send_signal(signal.SIGUSR1)  # its stacks, into the trial's stderr (kept)
        time.sleep(2.0)
        proc.kill()
        k.exit_code = proc.wait()
    if sent:
        k.exit_after_s = round(time.monotonic() - t_sig, 3)
    watch.poll()
    k.run_id = watch.lab_id
    late = sent and _said_its_last_word(watch, sent_wall)
    if late:  # landed in the interpreter's exit: the work was all done, the exit code tells
        k.phase = "exit"
        # ...unless the process was already in its exit system call (the kernel drops the
        # signal: nothing in user space can see it) and exited with the command's own 0
        k.missed = k.exiting and k.exit_code == 0
    if sig_name == "SIGKILL" and watch.lab_id and (state / watch.lab_id).exists():
        subprocess.run(_cli("clean", watch.lab_id), env=_env(state), cwd=CODE[0],
                       capture_output=True, timeout=120, check=False)
    if not k.missed:
        _check(k, watch, state, target, exclude={proc.pid}, late=late)
        k.leaks += [f"root namespace {x} added" for x in sorted(_root_net() - root_before)]
    if k.leaks or k.missed:
        _remove_leaks(watch, state, {proc.pid})
    if not (k.leaks or k.wrong_status or k.wrong_exit or k.hang):
        shutil.rmtree(trial, ignore_errors=True)
    k.trial_s = round(time.monotonic() - t_start, 1)
    return k


def _said_its_last_word(watch: Watch, sent_wall: float) -> bool:
    """The run had written its final manifest (status ok, no analysis running) before the
    signal was sent: the signal met a process past its work, whose true status is ok."""
    manifest = watch.manifest()
    if not manifest or manifest.get("status") != "ok" or \
            (manifest.get("analysis") or {}).get("running"):
        return False
    return (watch.run_dir / "manifest.json").stat().st_mtime < sent_wall


def _check(k: Kill, watch: Watch, state: Path, target: str, exclude: set[int],
           late: bool = False) -> None:
    if k.exit_code != EXPECTED_EXIT[k.signal]:
        k.wrong_exit = f"exit {k.exit_code}, expected {EXPECTED_EXIT[k.signal]}"
    if watch.lab_id:
        k.leaks += [f"namespace {n}" for n in _namespaces(watch.lab_id)]
        if (state / watch.lab_id).exists():
            k.leaks.append(f"registry {state / watch.lab_id}")
    k.leaks += _left_processes(watch, exclude)
    k.leaks += [f"scratch {p}" for pid in exclude
                for p in _scratch_left(pid, watch.run_dir, watch.lab_id)]
    manifest = watch.manifest()
    k.status = manifest.get("status") if manifest else None
    want = "ok" if late else "killed" if k.signal == "SIGKILL" else "interrupted"
    if manifest is None:
        if watch.run_dir is not None:
            k.wrong_status = "run directory without manifest.json"
    elif k.status == "ok" and k.signal == "SIGKILL" and _unfinished(manifest):
        pass  # the lab was down, the kill landed in the analysis: it says it never ended
    elif k.status != want:
        k.wrong_status = f"status {k.status!r}, expected {want!r}"
    if k.status == "ok" and (manifest or {}).get("analysis", {}).get("ok") and \
            not (watch.run_dir / "metrics.json").exists():
        k.wrong_status = "status 'ok', analysis ok, without metrics.json"


def _unfinished(manifest: dict[str, Any]) -> bool:
    """The manifest's analysis began and never ended (ok null, with the pid that ran it,
    which is gone)."""
    a = manifest.get("analysis") or {}
    pid = (a.get("running") or {}).get("pid")
    return a.get("ok") is None and pid is not None and not _alive(int(pid), None)


# -- the resume check ----------------------------------------------------------------------

def _campaign_file(work: Path) -> Path:
    """examples/campaigns/incast_sweep.yaml cut to its first two sizes, one congestion
    control, 2 repetitions; the base file by absolute path."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    doc = yaml.load(CAMPAIGN.read_text())
    doc["name"] = "kill-resume"
    doc["base"] = {"file": str((CAMPAIGN.parent / doc["base"]["file"]).resolve())}
    doc["grid"] = {"workloads.0.size": doc["grid"]["workloads.0.size"][:2]}
    doc["repetitions"] = 2
    doc.pop("plots", None)
    path = work / "kill-resume.yaml"
    with path.open("w") as f:
        yaml.dump(doc, f)
    return path


def _fingerprint(run_dir: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(run_dir)): (p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def resume_check(rng: random.Random, work: Path) -> dict[str, Any]:
    """Kill a campaign (SIGKILL) inside its second or a later run, resume it; see the doc."""
    spec, results, state = _campaign_file(work), work / "campaign", work / "state"
    root = results / "kill-resume"
    argv = _cli("campaign", str(spec), "--results", str(results))

    def runs() -> dict[str, Any]:
        try:
            return json.loads((root / "campaign-state.json").read_text())["runs"]
        except (OSError, ValueError, KeyError):
            return {}

    out: dict[str, Any] = {"ok": False}
    with (work / "campaign.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=_env(state), cwd=CODE[0], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)
    deadline, cut_dir = time.monotonic() + RUN_TIMEOUT_S * 2, None
    delay_s = rng.uniform(0.0, 1.5)
    while proc.poll() is None and time.monotonic() < deadline:
        now = runs()
        ok = [e for e in now.values() if e.get("status") == "ok"]
        half = [e for e in now.values() if e.get("status") == "running"
                and (root / e["run_dir"] / "manifest.json").exists()]
        if ok and half:
            time.sleep(delay_s)
            cut_dir = root / half[0]["run_dir"]
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    if cut_dir is None:
        out["error"] = f"the campaign ended (exit {proc.returncode}) before a run was cut"
        return out
    first = runs()
    kept = sorted(k for k, e in first.items() if e.get("status") == "ok")
    before = {k: _fingerprint(root / first[k]["run_dir"]) for k in kept}
    cut_id = cut_dir.name.rsplit("-", 1)[-1]
    again = subprocess.run(argv, env=_env(state), cwd=CODE[0], capture_output=True, text=True,
                           timeout=RUN_TIMEOUT_S * 4, check=False)
    final = runs()
    left = _left_processes(Watch(results, state), exclude=set())  # orphans of either run
    identical = sum(final.get(k, {}).get("run_dir") == first[k]["run_dir"]
                    and _fingerprint(root / first[k]["run_dir"]) == before[k] for k in kept)
    manifests = [json.loads(p.read_text()) for p in root.glob("p*/*/*/manifest.json")]
    out.update(resume_exit=again.returncode, completed_before=len(kept),
               completed_identical=identical, killed_run_dir_gone=not cut_dir.exists(),
               killed_run_namespaces=_namespaces(cut_id),
               killed_run_registry_gone=not (state / cut_id).exists(), processes_left=left,
               runs=len(final), runs_ok=sum(e.get("status") == "ok" for e in final.values()),
               manifests_ok=sum(m.get("status") == "ok" for m in manifests),
               manifests=len(manifests))
    out["ok"] = (again.returncode == 0 and identical == len(kept) > 0
                 and out["killed_run_dir_gone"] and not out["killed_run_namespaces"]
                 and out["killed_run_registry_gone"] and not left
                 and out["runs_ok"] == out["runs"]
                 and out["manifests_ok"] == out["manifests"] == out["runs"])
    if not out["ok"]:
        out["stderr"] = again.stderr[-2000:]
    for rid in _namespaces_any(state):
        subprocess.run(_cli("clean", rid, "--force"), env=_env(state), cwd=CODE[0],
                       capture_output=True, timeout=120, check=False)
    return out


def _namespaces_any(state: Path) -> list[str]:
    try:
        return sorted(p.name for p in state.iterdir() if (p / "registry.jsonl").exists())
    except FileNotFoundError:
        return []


# -- the whole measurement -----------------------------------------------------------------

def plan_kills(n: int, rng: random.Random, phases: tuple[str, ...] = PHASES
               ) -> list[tuple[str, str]]:
    """``n`` (signal, phase) pairs: every combination in turn, each round shuffled."""
    combos = [(s, p) for s in SIGNALS for p in phases]
    out: list[tuple[str, str]] = []
    while len(out) < n:
        rnd = combos[:]
        rng.shuffle(rnd)
        out += rnd
    return out[:n]


def run(seed: int = 1, kills: int = 24, budget_s: float = 600.0,
        experiment: Path = EXPERIMENT, resume: bool = True,
        plan: list[tuple[str, str]] | None = None, keep: bool = False,
        events: int = 0, windows: dict[str, float] | None = None) -> dict[str, Any]:
    """The measurement (see the module doc); returns the counts, every kill, the resume
    check. Stops starting kills once ``budget_s`` would be exceeded (a kill takes ~15 s, the
    resume check ~60 s here). ``windows``: phase -> latest kill instant (s), instead of
    WINDOW_S's for those phases. Needs root."""
    if os.geteuid() != 0:
        raise SystemExit("kill_harness needs root (network namespaces)")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="aitb-kill-harness-"))
    t0 = time.monotonic()
    todo = plan if plan is not None else plan_kills(kills, rng)
    done: list[Kill] = []
    reserve_s = 90.0 if resume else 0.0
    for sig_name, target in todo:
        if time.monotonic() - t0 + 20.0 + reserve_s > budget_s:
            break
        done.append(kill_once(experiment, sig_name, target, rng, work, events,
                              (windows or {}).get(target)))
    res = resume_check(rng, work) if resume else None
    out = {"seed": seed, "experiment": str(experiment.relative_to(ROOT)
                                            if experiment.is_relative_to(ROOT) else experiment),
           "kills": len(done), "missed": sum(k.missed for k in done),
           "leaks": sum(len(k.leaks) for k in done),
           "wrong_status": sum(k.wrong_status is not None for k in done),
           "wrong_exit": sum(k.wrong_exit is not None for k in done),
           "hangs": sum(k.hang for k in done), "elapsed_s": round(time.monotonic() - t0, 1),
           "resume": res, "work": str(work),
           "findings": [k.__dict__ for k in done
                        if k.leaks or k.wrong_status or k.wrong_exit or k.hang],
           "table": table(done)}
    out["all"] = [k.__dict__ for k in done]
    if not keep and not out["findings"] and (res is None or res["ok"]):
        shutil.rmtree(work, ignore_errors=True)
    return out


def table(done: list[Kill]) -> list[dict[str, Any]]:
    """Rows per (signal, phase landed in): tried, missed, leaks, wrong status/exit, hangs."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for k in done:
        key = (k.signal, k.target if k.missed and k.phase != "exit" else k.phase)
        r = rows.setdefault(key, {"signal": key[0], "phase": key[1], "tried": 0, "missed": 0,
                                  "leaks": 0, "wrong_status": 0, "wrong_exit": 0, "hangs": 0})
        r["tried"] += 1
        r["missed"] += k.missed
        r["leaks"] += len(k.leaks)
        r["wrong_status"] += k.wrong_status is not None
        r["wrong_exit"] += k.wrong_exit is not None
        r["hangs"] += k.hang
    order = {p: i for i, p in enumerate(PHASES)}
    return sorted(rows.values(), key=lambda r: (list(SIGNALS).index(r["signal"]),
                                                order.get(r["phase"], 9)))


def _print(out: dict[str, Any]) -> None:
    cols = ("signal", "phase", "tried", "missed", "leaks", "wrong_status", "wrong_exit",
            "hangs")
    print(" ".join(f"{c:>12}" for c in cols))
    for r in out["table"]:
        print(" ".join(f"{r[c]!s:>12}" for c in cols))
    print(" ".join(f"{v!s:>12}" for v in ("total", "", out["kills"], out["missed"],
                                           out["leaks"], out["wrong_status"],
                                           out["wrong_exit"], out["hangs"])))
    if out["resume"] is not None:
        print("resume:", json.dumps(out["resume"]))
    for f in out["findings"]:
        print("finding:", json.dumps(f))
    print(json.dumps({k: v for k, v in out.items() if k not in ("table", "all")}))


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 0 if nothing was found, 1 otherwise."""
    ap = argparse.ArgumentParser(prog="kill_harness", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills", type=int, default=24)
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--experiment", type=Path, default=EXPERIMENT)
    ap.add_argument("--no-resume", action="store_true", help="skip the campaign check")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--events", type=int, default=0,
                    help="random events: per kill's experiment (default 0: none)")
    ap.add_argument("--code", type=Path, default=ROOT,
                    help="checkout whose aitb is run and killed (default: this one)")
    args = ap.parse_args(argv)
    CODE[0] = args.code.resolve()
    out = run(args.seed, args.kills, args.budget_s, args.experiment.resolve(),
              not args.no_resume, keep=args.keep, events=args.events)
    _print(out)
    bad = out["leaks"] or out["wrong_status"] or out["wrong_exit"] or out["hangs"] or \
        (out["resume"] is not None and not out["resume"]["ok"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
