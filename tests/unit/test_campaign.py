"""Campaign files without root: sweep expansion, seed policies, dotted paths and their errors,
the confidence interval, the committed schema and the example campaigns."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from models.errors import SpecError
from orchestration.campaign.aggregate import aggregate, mean_ci95
from orchestration.campaign.plots import axis_value
from orchestration.campaign.runner import load
from orchestration.campaign.spec import parse_campaign
from orchestration.campaign.sweep import PathError, expand, parse_path, runs, set_path
from orchestration.run.schemas import schema_path, schema_text
from topologies.loader import read_yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "campaigns").glob("*.yaml"))
BASE = {"name": "b", "topology": {"generator": "single_switch", "params": {"hosts": 3}},
        "workloads": [{"kind": "incast", "receiver": "h1", "size": "16KiB"}]}


def spec(**kw):
    return parse_campaign({"name": "c", "base": {"inline": BASE}, **kw}, "c.yaml")


def test_grid_is_the_cartesian_product_with_the_last_key_fastest():
    pts = expand(spec(grid={"a.x": [1, 2], "b": ["u", "v", "w"]}))
    assert [p.id for p in pts] == [f"p{i:03d}" for i in range(6)]
    assert [tuple(p.values.values()) for p in pts] == [
        (1, "u"), (1, "v"), (1, "w"), (2, "u"), (2, "v"), (2, "w")]


def test_zip_goes_side_by_side_and_combines_with_every_grid_point():
    assert [p.values for p in expand(spec(zip={"a": [1, 2], "b": [3, 4]}))] == [
        {"a": 1, "b": 3}, {"a": 2, "b": 4}]
    both = expand(spec(grid={"g": ["x", "y"]}, zip={"a": [1, 2], "b": [3, 4]}))
    assert [p.values for p in both] == [
        {"g": "x", "a": 1, "b": 3}, {"g": "x", "a": 2, "b": 4},
        {"g": "y", "a": 1, "b": 3}, {"g": "y", "a": 2, "b": 4}]
    assert [p.values for p in expand(spec())] == [{}]  # nothing swept: the base, once


@pytest.mark.parametrize(("policy", "seeds"), [
    ("fixed", [7, 7, 7, 7, 7, 7]),
    ("repetition", [7, 7, 8, 8, 9, 9]),       # rep-major: p0 p1, p0 p1, p0 p1
    ("run", [7, 8, 9, 10, 11, 12]),
])
def test_seed_policies(policy, seeds):
    s = spec(grid={"a": [1, 2]}, repetitions=3, seeds=policy)
    pts = expand(s)
    got = runs(s, pts, {p.id: 7 for p in pts})
    assert [r.key for r in got] == ["p000/rep0", "p001/rep0", "p000/rep1", "p001/rep1",
                                    "p000/rep2", "p001/rep2"]
    assert [r.seed for r in got] == seeds


def test_dotted_paths_set_values_and_create_missing_mappings():
    doc = json.loads(json.dumps(BASE))
    set_path(doc, parse_path("workloads.0.size"), "1MiB")
    set_path(doc, parse_path("transport.tcp_congestion_control"), "cubic")
    assert doc["workloads"][0]["size"] == "1MiB"
    assert doc["transport"] == {"tcp_congestion_control": "cubic"}
    assert parse_path("topology.inline.profiles.dci-metro.delay")[3] == "dci-metro"


@pytest.mark.parametrize(("key", "message"), [
    ("workloads.2.size", "workloads has 1 item(s); index 2 does not exist"),
    ("workloads.x.size", "workloads is a list: index it with a number, not 'x'"),
    ("workloads.0.size.unit", "workloads.0.size is a str ('16KiB'), not a mapping or list"),
    ("name.x", "name is a str ('b'), not a mapping or list"),
    ("workloads..size", "not a dotted path (empty part)"),
])
def test_dotted_path_errors_say_where_the_path_breaks(key, message):
    doc = json.loads(json.dumps(BASE))
    with pytest.raises(PathError, match=None) as exc:
        set_path(doc, parse_path(key), 1)
    assert message in str(exc.value)


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


CAMPAIGN = """\
name: c
base:
  inline:
    name: b
    topology: {generator: single_switch, params: {hosts: 3}}
    workloads:
      - {kind: incast, receiver: h1, size: 16KiB}
grid:
  workloads.0.size: [16KiB, 32KiB]
"""


def issues(path: Path) -> list[str]:
    with pytest.raises(SpecError) as exc:
        load(path)
    return [str(i) for i in exc.value.issues]


def test_campaign_file_errors_name_file_key_and_line(tmp_path):
    path = write(tmp_path, CAMPAIGN + "zip:\n  seed: [1, 2]\n  scale: [1]\nrepetition: 2\n")
    got = issues(path)
    assert f"{path}:13: repetition: unknown key 'repetition' (did you mean 'repetitions'?)" \
        in got[0]


def test_zip_lengths_and_plot_keys_are_checked(tmp_path):
    got = issues(write(tmp_path, CAMPAIGN + "zip:\n  seed: [1, 2]\n  scale: [1]\n"))
    assert "zip lists must have equal lengths; got seed: 2, scale: 1" in got[0]
    got = issues(write(tmp_path, CAMPAIGN + "plots:\n  - {metric: cct_s_mean, x: seed}\n"))
    assert "plots[0]: 'seed' is not a swept key; swept: workloads.0.size" in got[0]
    got = issues(write(tmp_path, CAMPAIGN + "plots:\n  - {metric: cct_mean, "
                                            "x: workloads.0.size}\n"))
    assert ":11: plots[0].metric" in got[0] and "cct_s_mean" in got[0]


def test_a_swept_path_that_does_not_fit_points_at_its_key(tmp_path):
    got = issues(write(tmp_path, CAMPAIGN.replace("workloads.0.size:", "workloads.1.size:")))
    assert got == [f"{tmp_path / 'c.yaml'}:9: grid.workloads.1.size: workloads has 1 item(s); "
                   "index 1 does not exist"]


def test_every_point_is_validated_and_a_bad_value_points_at_the_campaign_file(tmp_path):
    text = CAMPAIGN.replace("[16KiB, 32KiB]", "[16KiB, banana]") + \
        "  workloads.0.receiver: [h1, h9]\n"
    got = issues(write(tmp_path, text))
    assert any(f"{tmp_path / 'c.yaml'}:9: grid.workloads.0.size:" in g and "banana" in g
               and "[points p002, p003]" in g for g in got), got
    assert any("grid.workloads.0.receiver:" in g and "'h9'" in g for g in got), got


def test_unknown_experiment_key_swept_is_refused(tmp_path):
    got = issues(write(tmp_path, CAMPAIGN + "  transport.congestion: [cubic]\n"))
    assert "unknown key 'congestion'" in got[0] and ":10: grid.transport.congestion" in got[0]


def test_mean_ci95_is_the_student_t_interval():
    # t(0.975, 2) = 4.303 (NIST/SEMATECH e-Handbook, table 1.3.6.7.2); s = 1 for 1, 2, 3
    mean, half, n = mean_ci95([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3)
    assert half == pytest.approx(4.303 / math.sqrt(3), abs=1e-3)  # the table's 3 decimals
    assert math.isnan(mean_ci95([5.0])[1]) and mean_ci95([5.0])[0] == 5.0
    assert mean_ci95([None, math.nan])[2] == 0


def test_aggregate_has_mean_ci_and_count_per_point():
    rows = [{"point": "p000", "k": "1ms", "summary": {"cct_s_mean": v, "flows": 4}}
            for v in (1.0, 2.0, 3.0)]
    rows.append({"point": "p001", "k": "2ms", "summary": {"cct_s_mean": 9.0, "flows": None}})
    t = aggregate(rows, ["k"]).set_index("point")
    assert t.loc["p000", "cct_s_mean_mean"] == 2.0 and t.loc["p000", "runs"] == 3
    assert t.loc["p000", "cct_s_mean_ci95"] == pytest.approx(mean_ci95([1, 2, 3])[1])
    assert t.loc["p001", "flows_n"] == 0 and t.loc["p001", "k"] == "2ms"


def test_axis_values_parse_units():
    assert axis_value("10ms") == (0.01, "s")
    assert axis_value("1KiB") == (1024.0, "B")
    assert axis_value("1Gbit") == (1e9, "bit/s")
    assert axis_value(3) == (3.0, "")
    assert axis_value("cubic") == (None, "")


@pytest.mark.parametrize("kind,examples", [
    ("campaign", EXAMPLES),
    ("experiment", sorted((ROOT / "examples").glob("*.yaml"))
     + [ROOT / "orchestration/run/quickstart.yaml"])])
def test_committed_schemas_are_current_and_examples_validate(kind, examples):
    assert schema_path(kind).read_text() == schema_text(kind), \
        "run python -m orchestration.run.schemas"
    schema = json.loads(schema_path(kind).read_text())
    assert examples
    for path in examples:
        doc, _ = read_yaml(path)
        jsonschema.validate(json.loads(json.dumps(doc)), schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_campaigns_load_and_dry_run(path):
    c = load(path)
    assert len(c.runs) == len(c.points) * c.spec.repetitions
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "campaign", str(path),
                          "--dry-run", "--json"], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert [r["run"] for r in listed["runs"]] == [r.key for r in c.runs]
