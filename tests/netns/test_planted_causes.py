"""Each thing the analysis can say bound a collective, planted in a real run: metrics.json's
``attribution.per_collective[].bound`` (and ``critical_link`` where a link did) and the
report's first line for the workload must name it. Small labs, short runs (seconds each):

* the default experiment (``aitb run`` with no file): DP all-reduces across a 20 ms DCI that
  no link is near the rate of: latency;
* a ring all-reduce on one switch where one port runs at a quarter of the others' rate, at
  two positions (a host's uplink; the switch's port towards a host): link, that direction;
* a long RTT and small transfers: latency;
* a rank that computes four times as long as the others: compute;
* a lossy link: loss.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from conftest import aitb_cli, run_namespaces, run_ok

from analysis.report.units import duration

pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]


def _switch_lab(hosts: int, profile: str, links: dict[str, str] | None = None) -> str:
    """An inline topology: hosts h1..hN on switch s1, every link ``profile``; ``links`` maps
    a host to extra keys of its link (YAML flow mapping body)."""
    extra = links or {}
    nodes = ", ".join(f"h{i}: {{kind: host}}" for i in range(1, hosts + 1))
    rows = "\n".join(
        f"      - {{endpoints: [h{i}, s1]{', ' + extra[f'h{i}'] if f'h{i}' in extra else ''}}}"
        for i in range(1, hosts + 1))
    return (f"topology:\n  inline:\n    name: planted\n    profiles:\n      port: {profile}\n"
            f"    defaults: {{link: {{profile: port}}}}\n"
            f"    nodes: {{s1: {{kind: switch}}, {nodes}}}\n    links:\n{rows}\n")


def _experiment(tmp_path: Path, name: str, lab: str, workload: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nseed: 1\n{lab}workloads:\n  - {workload}\n")
    return path


def _run(tmp_path: Path, env: dict[str, str], name: str, lab: str, workload: str
         ) -> tuple[dict, list[str]]:
    run_dir = run_ok(_experiment(tmp_path, name, lab, workload), tmp_path / "results", env,
                     "--no-vm")
    return _results(run_dir)


def _results(run_dir: Path) -> tuple[dict, list[str]]:
    """metrics.json and the report's result lines (HTML unescaped)."""
    m = json.loads((run_dir / "metrics.json").read_text())
    text = (run_dir / "report.html").read_text()
    lines = [html.unescape(x) for x in re.findall(r"<li>(.*?)</li>", text, re.S)]
    return m, lines


def _bounds(m: dict, workload: int = 0) -> list[str]:
    rows = [c for c in m["attribution"]["per_collective"] if c["workload_index"] == workload]
    assert rows
    return [c["bound"] for c in rows]


def _verdict_line(m: dict, lines: list[str], workload: int = 0) -> str:
    """The workload's verdict row and its sentence: the first result line of the workload."""
    (v,) = [r for r in m["attribution"]["per_workload"] if r["workload_index"] == workload]
    found = [x for x in lines if x.startswith(f"Iteration {duration(v['iteration_time_s'])}")]
    assert found, lines[:5]
    return found[0]


def test_the_default_experiment_is_latency_bound(tmp_path, state_env):
    out = aitb_cli("run", "--results", str(tmp_path / "r"), "--no-vm", env=state_env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_namespaces(manifest["lab_run_id"]) == []
    m, lines = _results(run_dir)
    # every training collective: round trips over the DCI (or none at all inside a DC), no
    # link near its rate; no collective of any workload blames a link it used under half
    assert set(_bounds(m, 0)) == {"latency"}
    assert all(c["critical_link"] is None or c["critical_link"]["busy_share"] >= 0.5
               for c in m["attribution"]["per_collective"])
    (v,) = [r for r in m["attribution"]["per_workload"] if r["workload_index"] == 0]
    assert v["bound"] == "latency" and v["critical_link"] is None
    assert v["dominant"]["group"] == "DP all-reduces across the DCI"
    e = v["evidence"]
    assert e["rtt_s_configured"] == pytest.approx(0.020)  # 2 x 10 ms of DCI
    assert e["rtt_s"] >= 0.020 and e["round_trips"] > 1
    assert e["cwnd_end"] > e["cwnd_start"]  # the window grew while the round trips went by
    line = _verdict_line(m, lines)
    assert "latency-bound: " + duration(e["rtt_s"]) + " RTT (20 ms configured)" in line
    assert "in DP all-reduces across the DCI" in line and "round trips" in line


@pytest.mark.parametrize(("host", "side", "direction"), [
    ("h2", "a_to_b", "h2 -> s1"),     # rank 1's uplink: its sends wait in its own queue
    ("h4", "b_to_a", "s1 -> h4"),     # the switch's port to rank 3: the queue is the switch's
])
def test_a_slow_port_in_a_ring_is_named(tmp_path, state_env, host, side, direction):
    lab = _switch_lab(4, "{rate: 100Mbit, buffer: 300p}",
                      {host: f"{side}: {{rate: 25Mbit}}"})
    m, lines = _run(tmp_path, state_env, "slow-port", lab,
                    "{kind: collective, op: all_reduce, algorithm: ring, size: 400KiB, "
                    "hosts: [h1, h2, h3, h4], iterations: 2}")
    assert set(_bounds(m)) == {"link"}
    for c in m["attribution"]["per_collective"]:
        lk = c["critical_link"]
        assert (lk["link"], lk["direction"]) == (f"{host}-s1", direction), lk
        assert lk["configured_bps"] == 25_000_000 and lk["busy_share"] >= 0.8
    line = _verdict_line(m, lines)
    assert f"link-bound: {direction} ({host}-s1) busy " in line and "of its 25 Mbit/s" in line


def test_a_long_rtt_with_small_transfers_is_latency_bound(tmp_path, state_env):
    # 5 ms each way on every host link: 20 ms between two hosts; 64 KiB per step of a
    # 1 Gbit/s ring takes a few round trips and half a millisecond of line time
    lab = _switch_lab(4, "{rate: 1Gbit, delay: 5ms}")
    m, lines = _run(tmp_path, state_env, "long-rtt", lab,
                    "{kind: collective, op: all_reduce, algorithm: ring, size: 256KiB, "
                    "hosts: [h1, h2, h3, h4], iterations: 2}")
    assert set(_bounds(m)) == {"latency"}
    assert all(c["critical_link"] is None for c in m["attribution"]["per_collective"])
    (v,) = m["attribution"]["per_workload"]
    assert v["evidence"]["rtt_s_configured"] == pytest.approx(0.020)
    assert v["evidence"]["rtt_s"] >= 0.020 and v["busy_share_max"] < 0.5
    line = _verdict_line(m, lines)
    assert "latency-bound: " + duration(v["evidence"]["rtt_s"]) + " RTT (20 ms configured)" \
        in line and "no link above" in line


def test_a_slow_rank_is_compute_bound(tmp_path, state_env):
    lab = _switch_lab(4, "{rate: 1Gbit}")
    m, lines = _run(tmp_path, state_env, "slow-rank", lab,
                    "{kind: collective, op: all_reduce, algorithm: ring, size: 64KiB, "
                    "hosts: [h1, h2, h3, h4], iterations: 3, compute: 10ms, "
                    "stragglers: {fixed: {2: 4.0}}}")
    assert set(_bounds(m)) == {"compute"}
    for c in m["attribution"]["per_collective"]:
        assert c["critical_link"] is None
        assert c["evidence"]["late_rank"] == 2 and c["evidence"]["compute_straggler_rank"] == 2
    line = _verdict_line(m, lines)
    assert "compute-bound: rank 2 (the iteration's compute straggler) arrived " in line


def test_a_lossy_link_is_loss_bound(tmp_path, state_env):
    # h1's link drops 3% each way (and delays 2 ms, where the native delay line drops): both
    # ranks' transfers cross it; loss, not the 1 Gbit/s rate, limits them
    lab = _switch_lab(2, "{rate: 1Gbit}",
                      {"h1": "a_to_b: {delay: 2ms, loss: 3%}, b_to_a: {delay: 2ms, loss: 3%}"})
    m, lines = _run(tmp_path, state_env, "lossy-link", lab,
                    "{kind: collective, op: all_reduce, algorithm: ring, size: 512KiB, "
                    "hosts: [h1, h2], iterations: 2}")
    assert set(_bounds(m)) == {"loss"}
    for c in m["attribution"]["per_collective"]:
        assert c["critical_link"] is None and c["evidence"]["retransmissions"] > 0
    line = _verdict_line(m, lines)
    assert "loss-bound: " in line and "retransmission(s) on " in line
