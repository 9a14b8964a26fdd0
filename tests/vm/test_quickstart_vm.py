"""The built-in quickstart (`aitb run` with no file) end to end where netem exists (the VM
tier): it finishes, and fidelity.json covers every shaped link direction of its plan, with
the RTT of the delay-bearing links (DCI, edge) measured and within tolerance."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# boot excluded: 3 workloads, each starting its agents (~30 s of Python imports under TCG)
pytestmark = [pytest.mark.vm, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
ARROW = {"a_to_b": "a->b", "b_to_a": "b->a"}
UNSHAPED = {"rate_bps": None, "buffer": None, "aqm": "fifo", "delay_s": 0.0, "jitter_s": 0.0,
            "loss_pct": 0.0, "loss_gemodel": None}


def shaped(s):
    return any(s.get(k) != v for k, v in UNSHAPED.items()) or s.get("reorder_pct") or \
        s.get("duplicate_pct") or s.get("corrupt_pct")


def test_quickstart_fidelity_covers_every_shaped_link(tmp_path):
    env = {**os.environ, "AITB_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run([sys.executable, "-m", "aitb.cli", "run", "--results",
                          str(tmp_path / "results"), "--json"], capture_output=True, text=True,
                         timeout=900, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    doc = json.loads(out.stdout)
    run_dir = Path(doc["run_dir"])
    plan = json.loads((run_dir / "plan.json").read_text())
    fidelity = json.loads((run_dir / "fidelity.json").read_text())
    want = {(lk["name"], ARROW[d]) for lk in plan["links"] for d in ARROW if shaped(lk[d])}
    got = {(e["link"], e["direction"]): e for e in fidelity["links"]}
    assert set(got) == want and len(want) == 2 * len(plan["links"])  # every link is shaped
    assert fidelity["trustworthy"] == doc["trustworthy"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["fidelity"]["trustworthy"] == fidelity["trustworthy"]
    for entry in got.values():
        assert set(entry["checks"]) == {"rate", "rtt", "loss"}
        assert entry["measured"]["rtt_s"] is not None  # every link is routed: all probed
    delayed = [e for e in got.values() if e["configured"]["delay_s"] > 0]
    assert {e["link"] for e in delayed} == {"dc1-b1-dc2-b1", "edge1-dc1-b1", "edge2-dc1-b1",
                                            "edge3-dc1-b1"}
    for e in delayed:
        # netem never delivers early: the minimum RTT is at least both one-way delays
        assert e["measured"]["rtt_s"] >= 2 * e["configured"]["delay_s"]
        assert e["checks"]["rtt"] == "ok", e
    dci = got[("dc1-b1-dc2-b1", "a->b")]
    assert dci["configured"] == {"rate_bps": 10**9, "delay_s": 0.01, "loss_pct": 0.0}
    # the DP all-reduce and the incast crossed the DCI: packets were counted, none lost
    assert dci["measured"]["loss_pct"] == 0.0 and dci["checks"]["loss"] == "ok"
    assert (run_dir / "run.log").read_text().count("workload ") == 3
