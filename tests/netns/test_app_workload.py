"""``kind: app`` end to end with ``aitb run``: two container hosts (the Python image built
from this host's interpreter) and one namespace host behind a switch whose port toward rank 0
is shaped; a stdlib worker (bind-mounted) sends real bytes over TCP to rank 0. Checks the
records, the rate bound, the capture, the analysis, and that nothing remains; and that a
failing rank fails the run by name while the lab still goes down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import run_namespaces
from container_image import PYTHON_TAG as TAG
from container_image import engine_with_image

from analysis.tcpflows import analyse_capture
from testbed.containers.hosts import run_containers
from testbed.containers.images import build_python_image

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parent / "apps" / "exchange_worker.py"
PORT = 5301
SIZE_BYTES = 1_500_000
RATE_BPS = 20_000_000


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    yield from engine_with_image(tmp_path_factory, lambda cli: build_python_image(cli, TAG), TAG)


def _experiment(tmp_path: Path, name: str, command: list[str], timeout: str = "60s") -> Path:
    app = tmp_path / "app"  # bound at the same path inside the containers: one argv for all
    app.mkdir(exist_ok=True)
    (app / "worker.py").write_text(WORKER.read_text())
    box = f"{{kind: host, image: {TAG!r}, binds: {{{app}: {app}}}}}"
    exp = tmp_path / f"{name}.yaml"
    exp.write_text(textwrap.dedent(f"""\
        name: {name}
        topology:
          inline:
            name: {name}
            nodes: {{c1: {box}, c2: {box}, h1: {{kind: host}}, s1: {{kind: switch}}}}
            links:
              # s1 -> c1 (b_to_a) is the bottleneck every byte toward rank 0 crosses
              - {{endpoints: ["c1:eth0", "s1:p1"], b_to_a: {{rate: {RATE_BPS}bit,
                  buffer: 200p}}}}
              - {{endpoints: ["c2:eth0", "s1:p2"]}}
              - {{endpoints: ["h1:eth0", "s1:p3"]}}
        workloads:
          - kind: app
            name: exchange
            nodes: [c1, c2, h1]
            command: {json.dumps(command)}
            env: {{PYTHONUNBUFFERED: "1"}}
            timeout: {timeout}
        capture: {{interfaces: ["s1:p1"], snaplen: 128}}
        counters: {{interval: 50ms, tcp: false}}
    """).replace("APP", str(app)))
    return exp


def _run(exp: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", str(exp), "--results",
                          str(tmp_path / "results")], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    runs = sorted((tmp_path / "results").glob("*/*/manifest.json"))
    assert runs, out.stderr[-3000:]
    return out, runs[-1].parent


def _nothing_left(run_dir: Path, engine, tmp_path: Path, networks: set[str]) -> None:
    lab_id = json.loads((run_dir / "manifest.json").read_text())["lab_run_id"]
    assert run_containers(lab_id) == []
    assert run_namespaces(lab_id) == []
    assert {n.id for n in engine.cli.networks.list()} == networks
    assert not (tmp_path / "state" / lab_id).exists()  # registry gone: teardown complete
    mine = []  # processes whose argv names this test's directory (exec'd workers included)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(tmp_path / "app") in cmd:
            mine.append((pid, cmd))
    assert mine == []


def _payload_to_rank0(pcap: Path) -> list[int]:
    """Unique TCP payload bytes sent toward PORT, one entry per connection that carried any
    (a sender that tried before rank 0 listened left a SYN/RST pair without payload)."""
    out = []
    for f in analyse_capture(pcap).flows:
        if f["proto"] == "tcp" and PORT in (f["sport"], f["dport"]):
            toward = f["a_to_b"] if f["dport"] == PORT else f["b_to_a"]
            out.append(toward["unique_payload_bytes"])
    return sorted(n for n in out if n)


def test_app_exchange_over_shaped_link_with_capture(engine, tmp_path):
    networks = {n.id for n in engine.cli.networks.list()}
    command = ["python3", f"{tmp_path}/app/worker.py", "--rank", "{rank}", "--world",
               "{world_size}", "--master", "{master_addr}", "--port", str(PORT),
               "--bytes", str(SIZE_BYTES)]
    out, run_dir = _run(_experiment(tmp_path, "appx", command), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    recs = [json.loads(x) for x in (run_dir / "apps.jsonl").read_text().splitlines()]
    assert [(r["node"], r["rank"], r["exit_code"]) for r in recs] == [
        ("c1", 0, 0), ("c2", 1, 0), ("h1", 2, 0)]
    assert [r["image"] for r in recs] == [TAG, TAG, None]
    assert "received [1500000, 1500000]" in (run_dir / recs[0]["log"]).read_text()
    # both senders' bytes cross the 20 Mbit/s port s1 -> c1: rank 0 cannot finish sooner
    # than their payload takes at that rate. 2% below the bound: HTB lets a burst of its
    # bucket (a few frames) through at line rate; headers only make it slower.
    bound_s = 2 * SIZE_BYTES * 8 / RATE_BPS
    assert recs[0]["duration_s"] >= 0.98 * bound_s, (recs[0]["duration_s"], bound_s)
    index = json.loads((run_dir / "captures" / "index.json").read_text())
    files = [run_dir / f for i in index["interfaces"] for f in i["files"]]
    assert sum(len(_payload_to_rank0(f)) for f in files) == 2
    assert sorted(n for f in files for n in _payload_to_rank0(f)) == [SIZE_BYTES] * 2
    metrics = json.loads((run_dir / "metrics.json").read_text())
    (app,) = metrics["apps"]["workloads"]
    assert app["workload"] == "exchange" and app["ok"] and app["nodes"] == 3
    assert app["completion_time_s"] >= recs[0]["duration_s"]
    assert app["slowest_node"] in {"c1", "c2", "h1"}
    assert "Applications" in (run_dir / "report.html").read_text()
    _nothing_left(run_dir, engine, tmp_path, networks)


def test_failing_rank_fails_the_run_by_name_and_lab_goes_down(engine, tmp_path):
    networks = {n.id for n in engine.cli.networks.list()}
    # rank 1 (c2) says why and exits 3; the others would wait 60 s: they are ended
    code = ("import sys, time\nif {rank} == 1:\n    print('boom on {node}', file=sys.stderr)"
            "\n    sys.exit(3)\ntime.sleep(60)")
    out, run_dir = _run(_experiment(tmp_path, "appfail",
                                    ["python3", "-c", code, str(tmp_path / "app")]), tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    error = json.loads((run_dir / "error.json").read_text())["error"]
    assert "workload 0 (exchange) failed: c2: python3 -c 'import sys" in error
    assert "exited with status 3" in error and "boom on c2" in error
    recs = {r["node"]: r for r in map(json.loads, (run_dir / "apps.jsonl").read_text()
                                      .splitlines())}
    assert recs["c2"]["exit_code"] == 3 and not recs["c2"]["killed"]
    assert recs["c1"]["killed"] and recs["h1"]["killed"]
    assert recs["c1"]["duration_s"] < 30  # ended at once, not after its 60 s sleep
    _nothing_left(run_dir, engine, tmp_path, networks)


def test_timeout_fails_the_run_and_ends_every_rank(engine, tmp_path):
    networks = {n.id for n in engine.cli.networks.list()}
    command = ["python3", "-c", "import time; time.sleep(60)", str(tmp_path / "app")]
    out, run_dir = _run(_experiment(tmp_path, "appslow", command, timeout="2s"), tmp_path)
    assert out.returncode == 1, out.stderr[-3000:]
    error = json.loads((run_dir / "error.json").read_text())["error"]
    for node in ("c1", "c2", "h1"):
        assert f"{node}: python3 -c 'import time; time.sleep(60)'" in error
    assert error.count("still running after the timeout of 2 s") == 3
    recs = [json.loads(x) for x in (run_dir / "apps.jsonl").read_text().splitlines()]
    assert all(r["killed"] for r in recs)
    # ended at the timeout: 2 s plus the polling and the SIGTERM, not the 60 s sleep
    assert all(2 <= r["duration_s"] < 20 for r in recs), [r["duration_s"] for r in recs]
    _nothing_left(run_dir, engine, tmp_path, networks)
