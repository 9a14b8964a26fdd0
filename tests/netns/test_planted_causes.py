"""Each thing the analysis can say bound a collective, planted in a real run: metrics.json's
``attribution.per_collective[].bound`` (and ``critical_link`` where a link did) and the
report's first line for the workload must name it. Small labs, short runs (causes that
can share a lab are workloads of one run, one after the other):

* the default experiment (``aitb run`` with no file): DP all-reduces across a 20 ms DCI that
  no link is near the rate of: latency;
* a ring all-reduce on one switch where one port runs at a quarter of the others' rate, at
  two positions (a host's uplink; the switch's port towards a host): link, that direction;
* a long RTT and small transfers: latency;
* a rank that computes four times as long as the others: compute;
* a lossy link: loss;
* a link set down mid-run (``events:``): the transfers that fail are told with that link and
  event, in the failure records and the report, not blamed on the rank at their other end;
* a saturated CPU (busy loops on every core while a ring runs on links no host here can
  fill): host_cpu, told by the CPU, with no link blamed;
* two causes at once, a slow port and a slow rank in one ring: both named, ``bound`` and
  ``secondary_bound``, in metrics.json and in the verdict's words.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import aitb_cli, records, run_namespaces, run_ok

from analysis.report.units import duration

pytestmark = [pytest.mark.netns, pytest.mark.timeout(600)]


def _lab(name: str, switches: dict[str, dict[str, str]], profile: str) -> str:
    """An inline topology: per switch its hosts (host -> extra keys of its link, a YAML flow
    mapping body, "" for none), every link ``profile``, the switches chained."""
    nodes = ", ".join([f"{sw}: {{kind: switch}}" for sw in switches]
                      + [f"{h}: {{kind: host}}" for hs in switches.values() for h in hs])
    rows = [f"      - {{endpoints: [{h}, {sw}]{', ' + x if x else ''}}}"
            for sw, hs in switches.items() for h, x in hs.items()]
    names = list(switches)
    rows += [f"      - {{endpoints: [{a}, {b}]}}"
             for a, b in zip(names, names[1:], strict=False)]
    return (f"topology:\n  inline:\n    name: {name}\n    profiles:\n      port: {profile}\n"
            f"    defaults: {{link: {{profile: port}}}}\n"
            f"    nodes: {{{nodes}}}\n    links:\n" + "\n".join(rows) + "\n")


def _ring(hosts: list[str], size: str, extra: str = "") -> str:
    return (f"{{kind: collective, op: all_reduce, algorithm: ring, size: {size}, "
            f"hosts: [{', '.join(hosts)}], iterations: 2{extra}}}")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A directory and the environment of ``aitb`` runs shared by this module's tests."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    d = tmp_path_factory.mktemp("planted")
    return d, {**os.environ, "AITB_STATE_DIR": str(d / "state")}


def _run_dir(env: tuple[Path, dict[str, str]], name: str, lab: str, workloads: list[str]
             ) -> Path:
    d, e = env
    path = d / f"{name}.yaml"
    path.write_text(f"name: {name}\nseed: 1\n{lab}workloads:\n"
                    + "".join(f"  - {w}\n" for w in workloads))
    return run_ok(path, d / "results", e, "--no-vm")


def _run(env: tuple[Path, dict[str, str]], name: str, lab: str, workloads: list[str]
         ) -> tuple[dict, list[str]]:
    return _results(_run_dir(env, name, lab, workloads))


# the slow port at two positions of two rings, one after the other: on s1, rank 1's uplink
# (h2 -> s1: its sends wait in its own queue); on s2, the switch's port to rank 3 (s2 -> g4:
# the queue is the switch's). Every other port runs at 100 Mbit/s.
SLOW_PORTS = (("h2", "h2-s1", "h2 -> s1"), ("g4", "g4-s2", "s2 -> g4"))


@pytest.fixture(scope="module")
def slow_ports(env) -> tuple[dict, list[str], str]:
    """metrics.json, the result lines and the lab picture's alt text."""
    lab = _lab("slow-ports", {
        "s1": {"h1": "", "h2": "a_to_b: {rate: 25Mbit}", "h3": "", "h4": ""},
        "s2": {"g1": "", "g2": "", "g3": "", "g4": "b_to_a: {rate: 25Mbit}"}},
        "{rate: 100Mbit, buffer: 300p}")
    run_dir = _run_dir(env, "slow-ports", lab, [_ring(["h1", "h2", "h3", "h4"], "400KiB"),
                                                 _ring(["g1", "g2", "g3", "g4"], "400KiB")])
    return (*_results(run_dir), _picture(run_dir), _untrustworthy(run_dir))


def _untrustworthy(run_dir: Path) -> bool:
    """Whether the run's fidelity check found the emulation unfaithful (a starved CPU)."""
    return json.loads((run_dir / "fidelity.json").read_text())["trustworthy"] is False


# three causes on one switch, one workload each, one after the other:
# 0. a rank that computes four times as long as the others (1 Gbit/s, 64 KiB): compute;
# 1. 5 ms each way on the host links: 20 ms between two hosts; 64 KiB per step of a 1 Gbit/s
#    ring takes a few round trips and half a millisecond of line time: latency;
# 2. l1's link drops 3% each way (and delays 2 ms, where the native delay line drops): both
#    ranks' transfers cross it; loss, not the 1 Gbit/s rate, limits them: loss.
@pytest.fixture(scope="module")
def host_causes(env) -> tuple[dict, list[str]]:
    delayed = "a_to_b: {delay: 5ms}, b_to_a: {delay: 5ms}"
    lossy = "a_to_b: {delay: 2ms, loss: 3%}, b_to_a: {delay: 2ms, loss: 3%}"
    lab = _lab("host-causes", {"s1": {
        "c1": "", "c2": "", "c3": "", "c4": "", "d1": delayed, "d2": delayed, "d3": delayed,
        "d4": delayed, "l1": lossy, "l2": ""}}, "{rate: 1Gbit}")
    return _run(env, "host-causes", lab, [
        _ring(["c1", "c2", "c3", "c4"], "64KiB",
              ", compute: 10ms, stragglers: {fixed: {2: 4.0}}"),
        _ring(["d1", "d2", "d3", "d4"], "256KiB"),
        _ring(["l1", "l2"], "512KiB")])


def _results(run_dir: Path) -> tuple[dict, dict[int, list[str]]]:
    """metrics.json and per workload index the report's result lines (HTML unescaped)."""
    m = json.loads((run_dir / "metrics.json").read_text())
    text = (run_dir / "report.html").read_text()
    lines = {int(w): [html.unescape(x) for x in re.findall(r"<li>(.*?)</li>", body, re.S)]
             for w, body in re.findall(r'<h3 id="workload-(\d+)">(.*?)</ul>', text, re.S)}
    return m, lines


def _picture(run_dir: Path) -> str:
    """The alt text of report.html's lab picture, which must be an inline PNG (nothing
    fetched from outside the file)."""
    text = (run_dir / "report.html").read_text()
    (alt, data), = re.findall(r'<img id="plot-lab" alt="([^"]*)" src="data:image/png;base64,'
                              r'([A-Za-z0-9+/=]+)"', text)
    assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")
    return html.unescape(alt)


def _bounds(m: dict, workload: int = 0) -> list[str]:
    rows = [c for c in m["attribution"]["per_collective"] if c["workload_index"] == workload]
    assert rows
    return [c["bound"] for c in rows]


def _verdict_line(m: dict, lines: dict[int, list[str]], workload: int = 0) -> str:
    """The workload's first result line, which must be its verdict."""
    (v,) = [r for r in m["attribution"]["per_workload"] if r["workload_index"] == workload]
    first = lines[workload][0]
    assert first.startswith(f"Iteration {duration(v['iteration_time_s'])}, "), first
    return first


def _blames(lk: dict) -> bool:
    """A hop at 80% of its configured rate, or with a standing queue and over half of it."""
    return lk["busy_share"] >= 0.8 or (lk["standing_queue"] and lk["busy_share"] >= 0.5)


def test_the_default_experiment_is_latency_bound(tmp_path, state_env):
    out = aitb_cli("run", "--results", str(tmp_path / "r"), "--no-vm", env=state_env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_namespaces(manifest["lab_run_id"]) == []
    m, lines = _results(run_dir)
    # every training collective: round trips over the DCI, no link near its rate (inside a
    # DC, where the path has no delay, a run whose CPU starved says host_cpu, never a link);
    # no collective of any workload blames a link it used under half
    assert set(_bounds(m, 0)) <= ({"latency", "host_cpu"} if _untrustworthy(run_dir)
                                  else {"latency"}), _bounds(m, 0)
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
    # the picture marks no critical link: none was link-bound
    assert "critical link" not in _picture(run_dir)
    # what if: round trips held it, so half the RTT shortens the iteration; the report's
    # table has the row
    (wi,) = [r for r in m["attribution"]["what_if"]["per_workload"]
             if r["workload_index"] == 0]
    assert wi["rtt_half"]["inputs"]["rtt_s_configured"] == pytest.approx(0.020)
    assert wi["rtt_half"]["iteration_time_s"] < wi["iteration_time_s"]
    assert wi["rtt_half"]["speedup"] > 1
    report = (run_dir / "report.html").read_text()
    table = report[report.index('id="what-if-table"'):]
    assert f"; {duration(0.020)} configured)" in table[:table.index("</table>")]
    _assert_energy(m, manifest, (run_dir / "report.html").read_text())


def _assert_energy(m: dict, manifest: dict, report: str) -> None:
    """metrics.json's energy section of the default experiment (analysis/metrics/energy.py):
    one row per iteration with its measured time, the training MFU from the schedule's
    model FLOPs, network wait between the busiest rank's and no compute (FL: less, its
    clients' training counted), and the FL round."""
    e = m["energy"]
    assert manifest["energy"] == {"accelerator": "a100_sxm", "network": "default"}
    assert e["scale"] == 100 and e["ports"]["dci"] == 2
    assert len(e["iterations"]) == len(m["cct"]["iterations"]) == 3
    for it, ct in zip(e["iterations"], m["cct"]["iterations"], strict=True):
        assert it["time_s"] == pytest.approx(ct["iteration_time_s"])
        n = manifest["workloads"][it["workload_index"]]["world_size"]
        T = it["time_s"]
        assert it["network_wait_s"] <= n * T + 1e-9
        if it["workload_index"] < 2:  # timeline compute only: at most n x the busiest's
            assert n * (T - ct["compute_s"]) <= it["network_wait_s"] + 1e-9
        else:  # FL: the clients' local training (inside the gathers) counts as compute
            assert it["network_wait_s"] < n * (T - ct["compute_s"])
        assert it["accelerator_j"] > 0 and it["network_idle_j"] > 0
        assert it["network_bits_j"] > 0  # every workload sent bytes through the lab
    train = e["iterations"][0]
    w0 = manifest["workloads"][0]
    assert w0["model_flops"] > 0 and w0["flops_per_s"] == 312e12
    assert 0 < train["mfu"] < 1
    assert train["mfu"] == pytest.approx(w0["model_flops"] / (4 * 312e12 * train["time_s"]))
    assert [it["mfu"] for it in e["iterations"][1:]] == [None, None]  # incast, FL: no model
    (rnd,) = e["rounds"]
    assert rnd["workload_index"] == 2 and 0 < rnd["network_wait_share"] < 1  # clients train
    assert rnd["energy_j"] == pytest.approx(rnd["accelerator_j"] + rnd["network_j"])
    assert m["summary"]["mfu_mean"] == pytest.approx(train["mfu"])
    assert m["summary"]["energy_j_mean"] > 0 and m["summary"]["network_wait_s_mean"] > 0
    assert "What the network costs: MFU, network wait and energy" in report
    assert "Per FL round" in report


@pytest.mark.parametrize("workload", [0, 1])
def test_a_slow_port_in_a_ring_is_named(slow_ports, workload):
    m, lines, alt, untrustworthy = slow_ports
    _host, link, direction = SLOW_PORTS[workload]
    # the slow port, or (only in a run whose fidelity check found the CPU starved) the
    # emulating host: never another link, never round trips
    bounds = _bounds(m, workload)
    assert set(bounds) <= ({"link", "host_cpu"} if untrustworthy else {"link"}), bounds
    assert "link" in bounds, bounds
    for c in m["attribution"]["per_collective"]:
        if c["workload_index"] == workload and c["bound"] == "link":
            lk = c["critical_link"]
            assert (lk["link"], lk["direction"]) == (link, direction), lk
            assert lk["configured_bps"] == 25_000_000 and _blames(lk), lk
    (v,) = [r for r in m["attribution"]["per_workload"] if r["workload_index"] == workload]
    line = _verdict_line(m, lines, workload)
    if v["bound"] == "link":
        assert f"link-bound: {direction} ({link}) busy " in line and "of its 25 Mbit/s" in line
    # the lab picture marks it, and only the slow ports
    assert f"critical link {direction} ({link}) busy " in alt
    assert alt.count("critical link") == len(SLOW_PORTS), alt


def test_a_long_rtt_with_small_transfers_is_latency_bound(host_causes):
    m, lines = host_causes
    assert set(_bounds(m, 1)) == {"latency"}
    assert all(c["critical_link"] is None for c in m["attribution"]["per_collective"]
               if c["workload_index"] == 1)
    (v,) = [r for r in m["attribution"]["per_workload"] if r["workload_index"] == 1]
    assert v["evidence"]["rtt_s_configured"] == pytest.approx(0.020)
    assert v["evidence"]["rtt_s"] >= 0.020 and v["busy_share_max"] < 0.5
    line = _verdict_line(m, lines, 1)
    assert "latency-bound: " + duration(v["evidence"]["rtt_s"]) + " RTT (20 ms configured)" \
        in line and "no link above" in line


def test_a_slow_rank_is_compute_bound(host_causes):
    m, lines = host_causes
    assert set(_bounds(m, 0)) == {"compute"}
    for c in m["attribution"]["per_collective"]:
        if c["workload_index"] == 0:
            assert c["critical_link"] is None
            assert (c["evidence"]["late_rank"], c["evidence"]["compute_straggler_rank"]) == (
                2, 2)
    line = _verdict_line(m, lines, 0)
    assert "compute-bound: rank 2 (it computed longest before it) arrived " in line


def test_a_lossy_link_is_loss_bound(host_causes):
    m, lines = host_causes
    assert set(_bounds(m, 2)) == {"loss"}
    for c in m["attribution"]["per_collective"]:
        if c["workload_index"] == 2:
            assert c["critical_link"] is None and c["evidence"]["retransmissions"] > 0
    line = _verdict_line(m, lines, 2)
    assert "loss-bound: " in line and "retransmission(s) on " in line


def test_a_link_down_mid_run_is_named_by_the_failures_it_caused(env):
    d, e = env
    path = d / "link-down.yaml"
    # a 64 KiB send buffer: a 256 KiB step cannot vanish into it, so the sender into the
    # dead link times out (1 s) rather than every rank waiting for the phase's end
    path.write_text("name: link-down\nseed: 1\ntimeouts: {transfer: 1s, phase: 20s}\n"
                    "transport: {sndbuf: 64KiB}\n"
                    + _lab("link-down", {"s1": {"h1": "", "h2": "", "h3": "", "h4": ""}},
                           "{rate: 100Mbit}")
                    + "workloads:\n  - " + _ring(["h1", "h2", "h3", "h4"], "1MiB").replace(
                        "iterations: 2", "iterations: 10, name: ring")
                    + "\nevents:\n  - {at: {workload: ring, iteration: 2}, kind: link_down, "
                    "link: h2-s1}\n")
    out = aitb_cli("run", str(path), "--results", str(d / "results"), "--no-vm", env=e,
                   timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_namespaces(manifest["lab_run_id"]) == []
    fails = records(run_dir, "failures.jsonl")
    mine = [f for f in fails if "h2" in (f["extra"].get("src_node"), f["extra"].get("dst_node"))]
    assert mine, fails
    for f in mine:  # every failed transfer to or from h2 crossed the link that went down
        assert (f["extra"]["links_down"], f["extra"]["events"]) == (["h2-s1"], [0]), f
    _m, lines = _results(run_dir)
    failed = lines[0][0]
    assert failed.startswith("This workload FAILED: ")
    assert "link h2-s1 down on its path (events[0])" in failed, failed


def test_two_causes_at_once_are_both_named(env):
    """h2's uplink at a quarter of the others' rate and rank 3 computing six times as long
    (100 ms later than the others) before each all-reduce: the port holds the collective
    about 200 ms after the last arrival, the rank about 100 ms before it. Both are named,
    the longer one first."""
    lab = _lab("two-causes", {"s1": {"h1": "", "h2": "a_to_b: {rate: 25Mbit}", "h3": "",
                                     "h4": ""}}, "{rate: 100Mbit, buffer: 300p}")
    run_dir = _run_dir(env, "two-causes", lab, [_ring(
        ["h1", "h2", "h3", "h4"], "400KiB", ", compute: 20ms, stragglers: {fixed: {3: 6.0}}")])
    m, lines = _results(run_dir)
    # the port's verdict, or the emulating host's where fidelity found the CPU starved and
    # that port's rate missed (the slow-port test's rule); the rank's, in either order
    port = {"link", "host_cpu"} if _untrustworthy(run_dir) else {"link"}
    (v,) = [r for r in m["attribution"]["per_workload"] if r["workload_index"] == 0]
    causes = {v["bound"], v["secondary_bound"]}
    assert "compute" in causes and causes - {"compute"} <= port, causes
    rank = v["evidence"] if v["bound"] == "compute" else v["secondary_evidence"]
    assert rank["late_rank"] == rank["compute_straggler_rank"] == 3
    for c in m["attribution"]["per_collective"]:
        if c["bound"] == "link" or c["secondary_bound"] == "link":
            lk = c["critical_link"] or c["secondary_critical_link"]
            assert (lk["link"], lk["direction"]) == ("h2-s1", "h2 -> s1"), lk
    line = _verdict_line(m, lines)
    assert "compute-bound: rank 3 (it computed longest before it) arrived " in line, line
    assert "; also " in line
    if "link" in causes:
        assert "link-bound: h2 -> s1 (h2-s1) busy " in line, line


@pytest.fixture
def busy_cpus():
    """A busy loop per core for the test's length, at the lowest priority (the lab's
    processes still run first, so the run ends in seconds, but every core reads busy),
    ended by its pid afterwards."""
    hogs = [subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 1)]
    try:
        yield hogs
    finally:
        for p in hogs:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)


def test_a_saturated_cpu_is_host_cpu_not_a_link(env, busy_cpus):
    """A ring on 10 Gbit/s links without delay while busy loops hold every core: fidelity
    finds the CPU saturated, no link is near its rate (the hosts cannot fill 10 Gbit/s) and
    round trips explain nothing, so every collective is host_cpu and the words say the
    CPU."""
    lab = _lab("busy-cpu", {"s1": {"h1": "", "h2": "", "h3": "", "h4": ""}},
               "{rate: 10Gbit, buffer: 5000p}")
    run_dir = _run_dir(env, "busy-cpu", lab, [_ring(["h1", "h2", "h3", "h4"], "2MiB")])
    fid = json.loads((run_dir / "fidelity.json").read_text())
    assert fid["trustworthy"] is False and fid["cpu"]["saturated"] is True, fid["cpu"]
    m, lines = _results(run_dir)
    assert set(_bounds(m)) == {"host_cpu"}, _bounds(m)
    assert all(c["critical_link"] is None and c["secondary_critical_link"] is None
               for c in m["attribution"]["per_collective"])
    line = _verdict_line(m, lines)
    assert "host-CPU-bound: the host's CPU was saturated (busy " in line, line
    assert "None" not in line
