"""Instance selection on a live run (host kernel, native delay line): examples/cats_selection.yaml
runs the same Poisson requests under nearest, least_loaded, affinity, cats and oracle; every request
records its instance and why, its TTFT and bootstrap; the example's table and plot cover all
five policies."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run_example

pytestmark = pytest.mark.netns
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1200)
def test_each_policy_picks_instances_and_says_why(tmp_path, state_env):
    run_dir = run_example(ROOT / "examples/cats_selection.yaml", tmp_path / "r", state_env)
    reqs = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines() if x]
    by = {}
    for r in reqs:
        by.setdefault(r["policy"], []).append(r)
    assert set(by) == {"nearest", "least_loaded", "affinity", "cats", "oracle"}
    assert len({len(v) for v in by.values()}) == 1  # the same seeded arrivals each time
    assert all(r["ttft_s"] is not None and r["ttft_s"] > 0 for r in reqs)
    # nearest by configured RTT: e1's and e2's clients are served at their own site, e3's in
    # the DC (30 ms to the core, plus 5 or 15 ms more to an edge instance)
    home = {"e1-c": "e1-s", "e2-c": "e2-s", "e3-c": "dc-s"}
    assert all(r["server"] == home[r["client"]] for r in by["nearest"])
    assert all(r["why"].startswith("cats: rtt") for r in by["cats"])
    # the oracle places each session once (its first request) and keeps it there, until its
    # context is evicted: then its next request is placed afresh
    homes = {}
    for r in by["oracle"]:
        assert r["why"].startswith("oracle: session of") == (r["session"] not in homes)
        assert homes.setdefault(r["session"], r["server"]) == r["server"]
        for gone in r["evicted"]:
            homes.pop(gone, None)
    # every instance holds at most two 1 MiB contexts (memory: 2MiB)
    assert all(r["server_memory_bytes"] == r["server_contexts"] << 20 <= 2 << 20 for r in reqs)
    # a cold choice moves the context: 1 MiB per bootstrap, none on a warm one
    for r in reqs:
        assert (r["bootstrap_bytes"] == 1 << 20) == r["bootstrap"]
    sys.path.insert(0, str(ROOT / "examples"))
    from cats_selection import per_policy, plot, table

    assert len(per_policy(run_dir)) == 5 and "| cats |" in table(run_dir)
    assert plot(run_dir).stat().st_size > 0
