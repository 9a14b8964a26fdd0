"""Campaign files without root: sweep expansion, seed policies, dotted paths and their errors,
the confidence interval, the committed schema and the example campaigns."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from models.errors import SpecError
from orchestration.campaign.aggregate import (
    aggregate,
    mean_ci95,
    positive_ci95,
    run_trust,
    write_tables,
)
from orchestration.campaign.plots import axis_value, plot_series, y_label
from orchestration.campaign.runner import load
from orchestration.campaign.spec import PlotSpec, parse_campaign
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


def test_too_many_runs_are_named_at_repetitions_with_its_line(tmp_path):
    # a check across keys (points x repetitions) is reported at the key, not at the file
    got = issues(write(tmp_path, CAMPAIGN + "repetitions: 100000\n"))
    assert ":10: repetitions: " in got[0] and "runs; at most" in got[0], got


def test_zip_lengths_and_plot_keys_are_checked(tmp_path):
    got = issues(write(tmp_path, CAMPAIGN + "zip:\n  seed: [1, 2]\n  scale: [1]\n"))
    assert "zip lists must have equal lengths; got seed: 2, scale: 1" in got[0]
    got = issues(write(tmp_path, CAMPAIGN + "plots:\n  - {metric: cct_s_mean, x: seed}\n"))
    assert ":11: plots[0].x: 'seed' is not a swept key; swept: workloads.0.size" in got[0]
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
    rows = [{"point": "p000", "k": "1ms", "rep": i, "summary": {"cct_s_mean": v, "flows": 4}}
            for i, v in enumerate((1.0, 2.0, 3.0))]
    rows.append({"point": "p001", "k": "2ms", "rep": 0,
                 "summary": {"cct_s_mean": 9.0, "flows": None}})
    t = aggregate(rows, ["k"]).set_index("point")
    assert t.loc["p000", "cct_s_mean_mean"] == 2.0 and t.loc["p000", "runs"] == 3
    low, high = positive_ci95([1.0, 2.0, 3.0])
    assert (t.loc["p000", "cct_s_mean_ci95_low"], t.loc["p000", "cct_s_mean_ci95_high"]) == \
        pytest.approx((low, high))
    assert t.loc["p000", "cct_s_mean_gmean"] == pytest.approx(6 ** (1 / 3))
    assert t.loc["p001", "flows_n"] == 0 and t.loc["p001", "k"] == "2ms"


def test_the_interval_of_a_positive_metric_stays_positive():
    # two CCTs of one point, 0.05 s and 1.1 s: Student's t interval of the mean reaches
    # 0.575 - 12.71 x 0.742 / sqrt(2) = -6.1 s; on log values (Limpert, Stahel and Abbt,
    # BioScience 51(5), 2001: the geometric mean times/divided by the multiplicative
    # deviation to the power t) it is the geometric mean 0.2345 s x/ 3.6e8: positive
    mean, half, _ = mean_ci95([0.05, 1.1])
    assert mean - half < 0
    low, high = positive_ci95([0.05, 1.1])
    gm = math.sqrt(0.05 * 1.1)
    factor = math.exp(12.7062 * abs(math.log(1.1) - math.log(0.05)) / math.sqrt(2)
                      / math.sqrt(2))  # s of two log values = |difference| / sqrt(2)
    assert low > 0 and low == pytest.approx(gm / factor, rel=1e-4)
    assert high == pytest.approx(gm * factor, rel=1e-4)
    # values with a zero (a drop count): the t interval, cut at 0, never below it
    low, high = positive_ci95([0.0, 4.0, 8.0])
    assert low == 0.0 and high == pytest.approx(4.0 + mean_ci95([0, 4, 8])[1])
    assert all(math.isnan(x) for x in positive_ci95([5.0]))


def test_untrustworthy_runs_are_left_out_of_the_aggregate_counted_and_named(tmp_path):
    def row(point, rep, cct, trust):
        return {"point": point, "k": "1ms" if point == "p000" else "2ms", "rep": rep,
                "seed": rep, "run_dir": f"r{rep}", "source": "metrics.json",
                "trustworthy": trust, "summary": {"cct_s_mean": cct}}

    rows = [row("p000", 0, 1.0, True), row("p000", 1, 60.0, False), row("p000", 2, 3.0, True),
            row("p001", 0, 50.0, False), row("p001", 1, 70.0, False),
            row("p002", 0, 2.0, None)]
    rows[5]["k"] = "3ms"
    t = write_tables(tmp_path, rows, ["k"]).set_index("point")
    # p000: the 60 s run is left out, counted and named
    assert t.loc["p000", "cct_s_mean_mean"] == 2.0 and t.loc["p000", "runs_aggregated"] == 2
    assert t.loc["p000", "runs"] == 3 and t.loc["p000", "cct_s_mean_n"] == 2
    assert t.loc["p000", "runs_untrustworthy"] == 1 and t.loc["p000", "untrustworthy_reps"] == "1"
    assert t.loc["p000", "trustworthy"] == "yes"
    # p001: nothing trustworthy to aggregate: its own runs, marked
    assert t.loc["p001", "cct_s_mean_mean"] == 60.0 and t.loc["p001", "runs_aggregated"] == 2
    assert t.loc["p001", "trustworthy"] == "no" and t.loc["p001", "untrustworthy_reps"] == "0 1"
    # p002: no verdict (no fidelity.json): aggregated, said so
    assert t.loc["p002", "trustworthy"] == "not assessed" and t.loc["p002", "runs_aggregated"] == 1
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert [str(v) for v in runs["trustworthy"]] == ["True", "False", "True", "False", "False",
                                                     "nan"]
    agg = pd.read_csv(tmp_path / "aggregate.csv")
    assert {"trustworthy", "runs_untrustworthy", "untrustworthy_reps"} <= set(agg.columns)


def test_a_runs_trust_comes_from_its_fidelity_json(tmp_path):
    (tmp_path / "fidelity.json").write_text(json.dumps({"trustworthy": False,
                                                        "reasons": ["host CPU saturated"]}))
    assert run_trust(tmp_path) == (False, "host CPU saturated")
    (tmp_path / "fidelity.json").write_text(json.dumps({"trustworthy": True, "reasons": []}))
    assert run_trust(tmp_path) == (True, "")
    assert run_trust(tmp_path / "nowhere") == (None, "no fidelity.json")


def test_plot_series_mark_untrustworthy_points_and_name_the_csv_columns():
    rows = [{"point": "p000", "k": "1ms", "alg": "ring", "rep": 0, "trustworthy": True,
             "summary": {"cct_s_mean": 1.0}},
            {"point": "p000", "k": "1ms", "alg": "ring", "rep": 1, "trustworthy": True,
             "summary": {"cct_s_mean": 2.0}},
            {"point": "p001", "k": "5ms", "alg": "ring", "rep": 0, "trustworthy": False,
             "summary": {"cct_s_mean": 40.0}},
            {"point": "p001", "k": "5ms", "alg": "ring", "rep": 1, "trustworthy": False,
             "summary": {"cct_s_mean": 50.0}}]
    table = aggregate(rows, ["k", "alg"])
    p = PlotSpec(metric="cct_s_mean", x="k", lines="alg")
    ((label, g),) = plot_series(table, p).items()
    assert label == "ring"  # the legend's title is the swept key: workloads.0.algorithm
    assert list(g["x"]) == [0.001, 0.005] and list(g["trustworthy"]) == ["yes", "no"]
    assert (g["low"] > 0).all() and (g["low"] <= g["y"]).all() and (g["y"] <= g["high"]).all()
    label = y_label(p)
    for column in ("cct_s_mean_gmean", "cct_s_mean_ci95_low", "cct_s_mean_ci95_high"):
        assert column in label and column in table


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
