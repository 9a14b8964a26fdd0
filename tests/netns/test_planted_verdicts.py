"""The fidelity verdict itself, planted in real runs: runs whose emulation is faithful must
not be called untrustworthy by a link check, and runs whose emulation is not must be.

Faithful (any reason other than a saturated host CPU fails; a shared CI machine may
saturate its CPU, which is a true finding there, and then stall the counter sampler too):

* a ring of eight on one switch, one port at a third of the others' rate: the uplinks
  feeding it hold a few packets at each sample and empty between (TCP's loss recovery);
* a degrade event that lowers a link's rate for a second: that window is judged against
  the event's rate, and its losses are planned.

Not faithful (each must be untrustworthy, for its reason):

* host ports whose scaled byte buffer is below one GSO segment (25 Gbit/s, 4 MiB,
  scale 100: 41 KB): the hosts' own egress queues drop, which a real NIC queue does not;
* a counter sampler stopped for 1.5 s while the workloads run;
* a starved CPU: a busy loop on every core.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_namespaces, run_ok

pytestmark = [pytest.mark.netns, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    d = tmp_path_factory.mktemp("verdicts")
    return d, {**os.environ, "AITB_STATE_DIR": str(d / "state")}


def _star(name: str, hosts: list[str], profile: str, extra: dict[str, str] | None = None,
          top: str = "") -> str:
    """An experiment file's head: ``hosts`` on one switch, every link ``profile``, a host's
    link with ``extra`` keys (a YAML flow mapping body) where given."""
    nodes = ", ".join(["s1: {kind: switch}", *(f"{h}: {{kind: host}}" for h in hosts)])
    rows = "".join(f"      - {{endpoints: [{h}, s1]"
                   f"{', ' + extra[h] if extra and h in extra else ''}}}\n" for h in hosts)
    return (f"name: {name}\nseed: 1\n{top}topology:\n  inline:\n    name: {name}\n"
            f"    profiles:\n      port: {profile}\n    defaults: {{link: {{profile: port}}}}\n"
            f"    nodes: {{{nodes}}}\n    links:\n{rows}")


def _ring(hosts: list[str], size: str, extra: str = "") -> str:
    return (f"workloads:\n  - {{kind: collective, op: all_reduce, algorithm: ring, "
            f"size: {size}, hosts: [{', '.join(hosts)}]{extra}}}\n")


def _fidelity(run_dir: Path) -> dict:
    return json.loads((run_dir / "fidelity.json").read_text())


def _not_cpu(doc: dict) -> list[str]:
    """The verdict's reasons other than a saturated host CPU (and, with one, the counter
    sampler's stall: the same starvation seen by another process)."""
    starved = ("host CPU saturated", "the counter sampler went") if doc["cpu"]["saturated"] \
        else ("host CPU saturated",)
    return [r for r in doc["reasons"] if not r.startswith(starved)]


def _run(env: tuple[Path, dict[str, str]], name: str, text: str) -> Path:
    d, e = env
    path = d / f"{name}.yaml"
    path.write_text(text)
    return run_ok(path, d / "results", e, "--no-vm")


RING8 = [f"h{i}" for i in range(1, 9)]
# a loss-based congestion control, which fills the slow port's buffer and recovers from its
# drops in bursts (the uplinks feeding it then queue a few packets and empty again)
CUBIC = "transport: {tcp_congestion_control: cubic}\n"


def test_a_slow_port_in_a_ring_of_eight_is_faithful(env):
    """h5's port from the switch at 33 Mbit/s, every other port 100 Mbit/s: h4's uplink
    feeds it and its queue empties between samples, so no interval of it was backlogged
    throughout. Judged over two backlogged end samples it read ~50 of 100 Mbit/s."""
    text = _star("slow-port8", RING8, "{rate: 100Mbit, buffer: 300p}",
                 {"h5": "b_to_a: {rate: 33Mbit}"}, top=CUBIC) \
        + _ring(RING8, "4MiB", ", iterations: 2")
    doc = _fidelity(_run(env, "slow-port8", text))
    assert _not_cpu(doc) == [], doc["reasons"]
    assert not any(e["checks"]["rate"] == "off" for e in doc["links"])


def test_a_degrade_event_is_judged_against_the_rate_it_set(env):
    """h1's link at 25 of 100 Mbit/s for a second while a ring runs over it: the checks
    take the event's rate in that window, not the plan's."""
    hosts = ["h1", "h2", "h3"]
    text = (_star("degrade", hosts, "{rate: 100Mbit, buffer: 300p}", top=CUBIC)
            + "events:\n  - {at: {workload: ring, iteration: 1}, kind: degrade, link: h1-s1,"
              " rate: 25Mbit, duration: 1s}\n"
            + _ring(hosts, "4MiB", ", iterations: 4, name: ring"))
    run_dir = _run(env, "degrade", text)
    doc = _fidelity(run_dir)
    assert _not_cpu(doc) == [], doc["reasons"]
    touched = [e for e in doc["links"] if e["link"] == "h1-s1"]
    assert touched and all("rate" in e["events_set"] for e in touched)


def test_a_buffer_below_a_segment_is_untrustworthy(env):
    """25 Gbit/s host ports with 4 MiB buffers at scale 100: 250 Mbit/s and 41 KB, less
    than what TCP Small Queues let into a host's qdisc: its own egress drops."""
    hosts = ["h1", "h2", "h3", "h4"]
    text = _star("tiny-buffer", hosts, "{rate: 25Gbit, buffer: 4MiB}", top="scale: 100\n") \
        + _ring(hosts, "400MiB", ", iterations: 2")
    doc = _fidelity(_run(env, "tiny-buffer", text))
    assert doc["trustworthy"] is False
    assert any("dropped at the host's own egress queue" in r for r in doc["reasons"]), \
        doc["reasons"]
    assert any(e["checks"].get("host_drops") == "off" for e in doc["links"])


def _sampler_pid(results: Path) -> int | None:
    """The pid of the counter sampler writing under ``results`` (this test's run: its
    config names the run directory), None until it has started."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"testbed.counters.main" in argv and str(results).encode() in b" ".join(argv):
            return int(p.name)
    return None


def _stall(pid: int, proc: subprocess.Popen) -> int:
    """Stop ``pid`` for 1.5 s, let it run 0.2 s, again, until ``proc`` ends; the number of
    stops. The workload's ops begin some time after its agents (their start-up varies with
    the load), so the stops repeat over the whole replay rather than guess that instant."""
    stops = 0
    try:
        while proc.poll() is None:
            os.kill(pid, signal.SIGSTOP)
            stops += 1
            time.sleep(1.5)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.2)
    except ProcessLookupError:  # the sampler ended (the run stopped sampling)
        pass
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    return stops


def test_a_stalled_sampler_is_untrustworthy(env):
    """The run's own counter sampler stopped (SIGSTOP) for 1.5 s at a time while the
    workload runs: whatever stops it for that long stops the lab's processes too."""
    d, e = env
    hosts = ["h1", "h2", "h3", "h4"]
    path = d / "stalled.yaml"
    path.write_text(_star("stalled", hosts, "{rate: 100Mbit, buffer: 300p}")
                    + _ring(hosts, "1MiB", ", iterations: 8, compute: 200ms"))
    results = d / "results-stalled"
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "run", str(path),
                             "--results", str(results), "--no-vm"], env=e,
                            cwd=Path(__file__).resolve().parents[2],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stops = 0
    try:
        deadline = time.monotonic() + 120
        while not stops and time.monotonic() < deadline and proc.poll() is None:
            logs = list(results.glob("stalled/*/run.log"))
            pid = _sampler_pid(results)
            if pid is not None and logs and "workload 0" in logs[0].read_text():
                stops = _stall(pid, proc)
            time.sleep(0.05)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert stops, "the sampler was never stopped"
    assert proc.returncode == 0, err[-3000:]
    run_dir = Path(out.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_namespaces(manifest["lab_run_id"]) == []
    doc = _fidelity(run_dir)
    assert doc["trustworthy"] is False
    assert any("counter sampler went" in r for r in doc["reasons"]), (
        doc["reasons"], doc.get("sampler"))
    assert doc["sampler"]["gap_max_s"] >= 1.0


def test_a_starved_cpu_is_untrustworthy(env):
    """A busy loop per core for the whole run: the lab's processes wait for CPU."""
    hosts = ["h1", "h2", "h3", "h4"]
    text = _star("starved", hosts, "{rate: 100Mbit, buffer: 300p}") \
        + _ring(hosts, "1MiB", ", iterations: 4")
    hogs = [subprocess.Popen([sys.executable, "-c",
                              "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        doc = _fidelity(_run(env, "starved", text))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert doc["trustworthy"] is False, doc
    assert doc["reasons"]

