"""Data locality on live runs (host kernel): examples/data_locality.yaml's cross-region
workload is found violating (confirmed by captures), its EU-only workload not; the same file
without the cross-region workload is compliant; aitb verify accepts the untouched run and
names a changed record file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import aitb_cli, run_example, run_ok

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/data_locality.yaml"


@pytest.mark.timeout(900)
def test_cross_region_flows_are_found_and_confirmed_and_verify_checks_the_chain(
        tmp_path, state_env):
    run_dir = run_example(EXAMPLE, tmp_path / "r", state_env)
    loc = json.loads((run_dir / "locality.json").read_text())
    assert loc["verdict"] == "violation"
    flows = [json.loads(x) for x in (run_dir / "flows.jsonl").read_text().splitlines() if x]
    across = [f for f in flows if f["workload_index"] == 1]
    assert loc["checked_flows"] == len(flows)  # both workloads are marked
    bad = loc["violations"]
    assert {v["flow"]["workload_index"] for v in bad} == {1}  # the EU-only one complies
    # ring over eu-h1, eu-h2, us-h1, us-h2: every flow but eu-h1 -> eu-h2 touches region us
    assert len(bad) == len([f for f in across
                            if (f["src_node"], f["dst_node"]) != ("eu-h1", "eu-h2")])
    assert loc["confirmed_by_capture"] == len(bad)  # capture: all, so a pcap saw each
    assert "DATA LOCALITY VIOLATED" in (run_dir / "report.html").read_text()
    ok = aitb_cli("verify", str(run_dir), env=state_env)
    assert ok.returncode == 0 and "verified" in ok.stdout
    with (run_dir / "flows.jsonl").open("a") as fh:
        fh.write("\n")
    changed = aitb_cli("verify", str(run_dir), env=state_env)
    assert changed.returncode == 1 and "flows.jsonl" in changed.stderr


@pytest.mark.timeout(900)
def test_a_run_that_keeps_its_data_in_region_is_compliant(tmp_path, state_env):
    text = EXAMPLE.read_text()
    path = tmp_path / "eu_only.yaml"
    path.write_text(text[:text.index("  - kind: collective\n    name: across-the-atlantic")])
    run_dir = run_ok(path, tmp_path / "r", state_env)
    loc = json.loads((run_dir / "locality.json").read_text())
    assert loc["verdict"] == "compliant" and loc["checked_flows"] > 0
    assert loc["violations"] == []
    assert "Data locality: <b>compliant</b>" in (run_dir / "report.html").read_text()
