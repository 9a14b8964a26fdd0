"""The built-in quickstart (`aitb run` with no file) end to end where netem exists (the VM
tier): it finishes, and fidelity.json covers every shaped link direction of its plan, with
the RTT of the delay-bearing links (DCI, edge) measured and within tolerance; report.html and
metrics.json exist and agree with the records: every collective's CCT is at or above its
alpha (latency) lower bound from the plan, and metrics.json's queue drops equal the drops
computed here, independently, from counters/qdisc.parquet.

Alpha lower bound of a ring all-reduce (Hockney 1994's alpha-beta model; ring all-reduce =
2(n-1) dependent steps, Thakur, Rabenseifner and Gropp 2005, Patarasuk and Yuan 2009): in
traffic_gen.algorithms.ring every send after the first forwards what the previous receive
brought, so there is a chain of 2(n-1) messages around the ring i -> i+1 starting at some
rank; the last one cannot arrive before the sum of the configured one-way path delays of its
hops (netem never delivers early), so CCT = max(rank end) - min(rank start) >= the largest
such chain sum. Conservative: serialization (beta), queueing, compute and software time are
left out (htb may burst a small message at more than its rate). Other ops and algorithms get
the trivial bound 0; in the quickstart they all stay inside one DC (zero fabric delay).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from models.plan import plan_from_dict
from workloads.paths import path_delay_s

# boot excluded: 3 workloads, each starting its agents (~30 s of Python imports under TCG)
pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
ARROW = {"a_to_b": "a->b", "b_to_a": "b->a"}
UNSHAPED = {"rate_bps": None, "buffer": None, "aqm": "fifo", "delay_s": 0.0, "jitter_s": 0.0,
            "loss_pct": 0.0, "loss_gemodel": None}


def shaped(s):
    return any(s.get(k) != v for k, v in UNSHAPED.items()) or s.get("reorder_pct") or \
        s.get("duplicate_pct") or s.get("corrupt_pct")


@pytest.mark.native_twin(
    "tests/netns/test_quickstart_native.py::"
    "test_the_quickstart_runs_natively_and_its_lines_hold_the_configured_delays")
def test_quickstart_fidelity_covers_every_shaped_link(tmp_path):
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "orchestration.cli", "run", "--results",
                          str(tmp_path / "results"), "--json"], capture_output=True, text=True,
                         timeout=900, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    check_quickstart_run(json.loads(out.stdout.splitlines()[-1]))


def check_quickstart_run(doc: dict) -> None:
    """What the quickstart's run directory must show on any delay line (netem in the VM, the
    native line on the host): ``doc`` is `aitb run --json`'s document."""
    run_dir = Path(doc["run_dir"])
    plan = json.loads((run_dir / "plan.json").read_text())
    fidelity = json.loads((run_dir / "fidelity.json").read_text())
    want = {(lk["name"], ARROW[d]) for lk in plan["links"] for d in ARROW if shaped(lk[d])}
    got = {(e["link"], e["direction"]): e for e in fidelity["links"]}
    assert set(got) == want and len(want) == 2 * len(plan["links"])  # every link is shaped
    assert fidelity["trustworthy"] == doc["trustworthy"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["fidelity"]["trustworthy"] == fidelity["trustworthy"]
    kinds = {n["name"]: n["kind"] for n in plan["nodes"]}
    for entry in got.values():
        # the native line adds its own check: the helper's measured added delay; a host's
        # sending direction, drops at the host's own egress queue
        extra = {"delay"} if entry.get("delay_line") == "native" else set()
        if kinds.get(entry["node"]) == "host":
            extra.add("host_drops")
        assert set(entry["checks"]) == {"rate", "rtt", "loss"} | extra, entry
        assert entry["measured"]["rtt_s"] is not None  # every link is routed: all probed
    delayed = [e for e in got.values() if e["configured"]["delay_s"] > 0]
    assert {e["link"] for e in delayed} == {"dc1-b1-dc2-b1", "edge1-dc1-b1", "edge2-dc1-b1",
                                            "edge3-dc1-b1"}
    for e in delayed:
        # no delay line delivers early: the minimum RTT is at least both one-way delays
        assert e["measured"]["rtt_s"] >= 2 * e["configured"]["delay_s"]
        assert e["checks"]["rtt"] == "ok", e
    dci = got[("dc1-b1-dc2-b1", "a->b")]
    assert dci["configured"] == {"rate_bps": 10**9, "delay_s": 0.01, "loss_pct": 0.0}
    # the DP all-reduce and the incast crossed the DCI: packets were counted, none lost
    assert dci["measured"]["loss_pct"] == 0.0 and dci["checks"]["loss"] == "ok"
    assert (run_dir / "run.log").read_text().count("workload ") == 3
    _check_metrics_and_report(run_dir, plan, fidelity)


def _ring_all_reduce_bound_s(plan, hosts: list[str]) -> float:
    """Largest sum of configured one-way path delays (s) over 2(n-1) consecutive ring hops
    hosts[i] -> hosts[i+1] (see the module docstring)."""
    n = len(hosts)
    hop = [path_delay_s(plan, hosts[i], hosts[(i + 1) % n]) for i in range(n)]
    return max(sum(hop[(i + j) % n] for j in range(2 * (n - 1))) for i in range(n)) \
        if n > 1 else 0.0


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _independent_queue_drops(qdisc: pd.DataFrame) -> float:
    """Drops as analysis.metrics.links.queue_metrics defines them, recomputed: per interface,
    the last cumulative ``drops`` minus the first of its segmenter (a tbf that cuts GSO
    packets into frames before a small buffer: it counts every frame the buffer drops, where
    the root HTB sees one packet and at most one drop, net/sched/sch_tbf.c tbf_segment), else
    of its root qdisc (parent TC_H_ROOT) that is a queue (not a netem delay line, whose drops
    are configured loss, nor noqueue/ingress/clsact)."""
    root = qdisc["parent"].astype(str).str.lower().isin(["root", "ffff:ffff", "ffffffff",
                                                        "4294967295"])
    queues = qdisc[root & ~qdisc["kind"].isin(["netem", "noqueue", "ingress", "clsact"])]
    segmenters = qdisc[qdisc["kind"] == "tbf"]
    total = 0.0
    for (node, ifname), g in queues.sort_values("t_s").groupby(["node", "ifname"]):
        seg = segmenters[(segmenters["node"] == node) & (segmenters["ifname"] == ifname)]
        src = seg.sort_values("t_s") if not seg.empty else g
        total += float(src["drops"].iloc[-1] - src["drops"].iloc[0])
    return total


def _check_metrics_and_report(run_dir: Path, plan_doc: dict, fidelity: dict) -> None:
    report = (run_dir / "report.html").read_text()
    assert report.lstrip().lower().startswith("<!doctype html") and "</html>" in report.lower()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["schema_version"] == 1 and metrics["experiment"] == "quickstart"
    # the metrics' fidelity section is the run's fidelity.json plus the analysis's own
    # record/capture retransmission check (analysis.metrics, when the run has captures)
    extra = {k: v for k, v in metrics["fidelity"].items() if k not in fidelity}
    assert set(extra) <= {"retransmissions"}
    assert {k: v for k, v in metrics["fidelity"].items() if k in fidelity} == fidelity
    assert metrics["trustworthy"] == fidelity["trustworthy"]
    plan = plan_from_dict(plan_doc)
    colls = _jsonl(run_dir / "collectives.jsonl")
    assert metrics["summary"]["collectives"] == len(colls) > 0
    per = {(c["workload_index"], c["collective_id"]): c["cct_s"]
           for c in metrics["cct"]["per_collective"]}
    bounds = []
    for c in colls:
        cct_s = max(c["rank_t_end"]) - min(c["rank_t_start"])
        # the record's and the metrics' CCT are this span (float rounding only)
        assert c["cct_s"] == pytest.approx(cct_s, rel=1e-9, abs=1e-9), c
        assert per[(c["workload_index"], c["collective_id"])] == pytest.approx(cct_s, abs=1e-9)
        ring_ar = c["op"] == "all_reduce" and c["algorithm"] == "ring"
        bound = _ring_all_reduce_bound_s(plan, c["hosts"]) if ring_ar else 0.0
        assert cct_s >= bound, (c["collective_id"], c["hosts"], cct_s, bound)
        bounds.append(bound)
    # the DP all-reduce crosses the 10 ms DCI both ways: the bound is not vacuous
    assert max(bounds) >= 2 * 0.01
    qdisc = pd.read_parquet(run_dir / "counters" / "qdisc.parquet")
    assert not qdisc.empty
    assert metrics["summary"]["queue_drops"] == pytest.approx(_independent_queue_drops(qdisc))
