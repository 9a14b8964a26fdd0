"""Data locality (models.locality, orchestration.privacy.locality_check, analysis.locality) and the
evidence chain (models.evidence) on examples/data_locality.yaml's plan and hand-made records;
no root, no network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.locality import locality_report
from models.errors import SpecError
from models.evidence import build_chain, verify_chain
from models.locality import DataPolicy, flow_violations
from models.paths import PathWalker
from models.plan import plan_to_dict
from orchestration.run.runner import prepare

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/data_locality.yaml"
EU = DataPolicy("patient-records", ("eu",))


@pytest.fixture(scope="module")
def prep():
    return prepare(EXAMPLE)


def test_a_path_inside_the_region_complies_and_one_across_does_not(prep):
    plan, walker = prep.plan, PathWalker(prep.plan)
    assert flow_violations(walker, "eu-h1", str(plan.address_of("eu-h2")), EU) == []
    (bad,) = flow_violations(walker, "eu-h1", str(plan.address_of("us-h1")), EU)
    assert bad["path"] == ["eu-h1", "eu-r1", "us-r1", "us-h1"]
    assert [o["node"] for o in bad["outside"]] == ["us-r1", "us-h1"]
    # a country restriction inside an allowed region
    de_only = DataPolicy("x", ("eu", "us"), ("de",))
    (bad,) = flow_violations(walker, "eu-h1", str(plan.address_of("us-h1")), de_only)
    assert bad["outside"][0] == {"node": "us-r1", "region": "us", "country": "us"}


def test_an_unlabelled_node_complies_with_no_policy(prep):
    import dataclasses

    plan = prep.plan
    nodes = tuple(dataclasses.replace(n, labels={}) if n.name == "eu-r1" else n
                  for n in plan.nodes)
    walker = PathWalker(dataclasses.replace(plan, nodes=nodes))
    (bad,) = flow_violations(walker, "eu-h1", str(plan.address_of("eu-h2")), EU)
    assert bad["outside"] == [{"node": "eu-r1", "region": None, "country": None}]


def test_a_refusing_policy_stops_the_run_before_anything_exists(tmp_path):
    path = tmp_path / "refuse.yaml"
    path.write_text(EXAMPLE.read_text().replace("enforce: record", "enforce: refuse"))
    with pytest.raises(SpecError, match=r"workloads\[1\]\.data.*us-r1 is in region us"):
        prepare(path)


def _run_dir(tmp_path: Path, prep, flows: list[dict]) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    (d / "plan.json").write_text(json.dumps(plan_to_dict(prep.plan)))
    (d / "experiment.json").write_text(json.dumps(prep.spec.model_dump(mode="json")))
    (d / "flows.jsonl").write_text("".join(json.dumps(f) + "\n" for f in flows))
    return d


def _flow(prep, wi: int, src: str, dst: str) -> dict:
    return {"record": "flow", "workload_index": wi, "src_node": src, "dst_node": dst,
            "src_ip": str(prep.plan.address_of(src)), "sport": 1000,
            "dst_ip": str(prep.plan.address_of(dst)), "dport": 2000, "size_bytes": 10}


def test_compliant_run_says_so(tmp_path, prep):
    d = _run_dir(tmp_path, prep, [_flow(prep, 0, "eu-h1", "eu-h2"),
                                  _flow(prep, 0, "eu-h2", "eu-h1")])
    report = locality_report(d)
    assert report["verdict"] == "compliant" and report["checked_flows"] == 2
    assert report["violations"] == []
    assert [x["name"] for x in report["evidence"]["links"]] == [
        "experiment.json", "plan.json", "flows.jsonl"]


def test_violation_names_the_flow_and_its_path(tmp_path, prep):
    d = _run_dir(tmp_path, prep, [_flow(prep, 0, "eu-h1", "eu-h2"),
                                  _flow(prep, 1, "eu-h2", "us-h1")])
    report = locality_report(d)
    assert report["verdict"] == "violation" and report["violating_flows"] == 1
    (v,) = report["violations"]
    assert v["flow"]["src_node"] == "eu-h2" and v["data_class"] == "patient-records"
    assert v["paths"][0]["path"] == ["eu-h2", "eu-r1", "us-r1", "us-h1"]
    assert v["captured_on"] == []  # no captures in this run: the plan alone says so


def test_the_chain_detects_a_changed_file(tmp_path):
    for name, text in (("a.json", "{}"), ("b.jsonl", "1\n")):
        (tmp_path / name).write_text(text)
    chain = build_chain(tmp_path, ["a.json", "b.jsonl"])
    assert verify_chain(tmp_path, chain) == []
    (tmp_path / "b.jsonl").write_text("2\n")
    (problem,) = verify_chain(tmp_path, chain)
    assert problem.startswith("b.jsonl: SHA-256")
    (tmp_path / "b.jsonl").write_text("1\n")
    chain["links"][0]["sha256"] = "0" * 64  # a forged digest breaks its link and the head
    assert len(verify_chain(tmp_path, chain)) >= 2


def _verify(run_dir: Path):
    from typer.testing import CliRunner

    from orchestration.cli.app import app

    return CliRunner().invoke(app, ["verify", str(run_dir)])


def _forge(run_dir: Path, edit) -> None:
    path = run_dir / "locality.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def test_verify_refuses_a_verdict_edited_after_the_run(tmp_path, prep):
    from analysis.locality import write_locality

    d = _run_dir(tmp_path, prep, [_flow(prep, 0, "eu-h1", "eu-h2"),
                                  _flow(prep, 1, "eu-h2", "us-h1")])
    write_locality(d)
    ok = _verify(d)
    assert ok.exit_code == 0 and "verified" in ok.output and "violation" in ok.output
    # the chained files are untouched; only the verdict the record states is changed
    _forge(d, lambda doc: doc.update(verdict="compliant", violating_flows=0, violations=[]))
    forged = _verify(d)
    assert forged.exit_code == 1, forged.output
    assert "locality.json" in forged.output and "violation" in forged.output


def test_verify_refuses_a_chain_that_leaves_out_an_evidence_file(tmp_path, prep):
    from analysis.locality import write_locality

    d = _run_dir(tmp_path, prep, [_flow(prep, 0, "eu-h1", "eu-h2")])
    write_locality(d)
    # a chain rebuilt without flows.jsonl is self-consistent but no longer covers the records
    _forge(d, lambda doc: doc.update(evidence=build_chain(d, ["experiment.json", "plan.json"])))
    res = _verify(d)
    assert res.exit_code == 1, res.output
    assert "flows.jsonl" in res.output


def test_verify_names_a_deleted_evidence_file(tmp_path, prep):
    from analysis.locality import write_locality

    d = _run_dir(tmp_path, prep, [_flow(prep, 0, "eu-h1", "eu-h2")])
    write_locality(d)
    (d / "plan.json").unlink()
    res = _verify(d)
    assert res.exit_code == 1 and "plan.json: cannot be read" in res.output, res.output
    assert "cannot be recomputed" in res.output


def test_verify_tells_a_directory_that_is_no_run_from_a_run_without_a_verdict(tmp_path):
    res = _verify(tmp_path / "nowhere")
    assert res.exit_code == 2 and "no such run directory" in res.output, res.output
    (tmp_path / "plain").write_text("")
    res = _verify(tmp_path / "plain")
    assert res.exit_code == 2 and "plain: not a directory" in res.output, res.output
    res = _verify(tmp_path)
    assert res.exit_code == 2 and "not a run directory (no manifest.json" in res.output
    (tmp_path / "manifest.json").write_text("{}")
    res = _verify(tmp_path)
    assert res.exit_code == 2 and "aitb analyze" in res.output and "Errno" not in res.output
    (tmp_path / "locality.json").write_text("[1]")
    res = _verify(tmp_path)
    assert res.exit_code == 2 and "not a JSON object" in res.output
