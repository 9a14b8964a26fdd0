"""An application in a container host asks the lab's ALTO server (host kernel, docker):
examples/containers/alto_client.yaml runs examples/alto_client.py inside a container at the
edge site, against the server on a DC namespace host; the container finds its own PID in the
network map and gets the cost map from it, the server logs the container's requests from its
lab address, and nothing of the container or the lab remains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_ok
from container_image import engine_with_image

from models.plan import plan_from_dict
from testbed.containers.hosts import run_containers
from testbed.containers.images import build_python_image

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/containers/alto_client.yaml"
EXAMPLE_TAG = "aitb-alto-client:1"
TAG = "aitb-test-alto-client:1"  # the test's own tag: built and removed here


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    client = (ROOT / "examples/alto_client.py").read_bytes()
    yield from engine_with_image(
        tmp_path_factory,
        lambda cli: build_python_image(cli, TAG, extra={"/opt/aitb/alto_client.py": client},
                                       rebuild=True), TAG)


@pytest.mark.timeout(900)
def test_a_container_app_queries_the_lab_alto_server(engine, tmp_path, state_env):
    text = EXAMPLE.read_text()
    assert EXAMPLE_TAG in text
    exp = tmp_path / "alto_client.yaml"
    exp.write_text(text.replace(EXAMPLE_TAG, TAG))
    run_dir = run_ok(exp, tmp_path / "r", state_env)
    (rec,) = [json.loads(x) for x in (run_dir / "apps.jsonl").read_text().splitlines() if x]
    assert (rec["node"], rec["image"], rec["exit_code"]) == ("app", TAG, 0)
    answer = json.loads((run_dir / rec["log"]).read_text().strip().splitlines()[-1])
    index = json.loads((run_dir / "alto/index.json").read_text())
    nmap = json.loads((run_dir / "alto/networkmap.json").read_text())
    assert answer["pid"] == index["pids"]["app"] == "edge"
    assert answer["vtag"] == nmap["meta"]["vtag"]["tag"]
    # its own site first: the DC is behind the 100 Mbit/s link (routingcost 1000 vs 100)
    assert list(answer["costs"]) == ["edge", "dc"]
    assert answer["costs"]["dc"] > answer["costs"]["edge"]
    plan = plan_from_dict(json.loads((run_dir / "plan.json").read_text()))
    log = (run_dir / "alto/server.log").read_text().splitlines()
    asked = [line for line in log if "GET /networkmap" in line or "GET /costmap/routingcost"
             in line]
    # both requests came from the container's own lab address
    assert [line.split()[0] for line in asked] == [str(plan.address_of("app"))] * 2, log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert run_containers(manifest["lab_run_id"]) == []
