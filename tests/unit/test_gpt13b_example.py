"""examples/gpt13b_two_dc.yaml builds as its comment says: the AICB GPT-13B job, 16 ranks, each
TP group inside one DC, every DP group across the DCI (checked with the plan's own routes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from models.paths import PathWalker, dci_links
from orchestration.run.runner import prepare

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpt13b_two_dc.yaml"


@pytest.fixture(scope="module")
def prep():
    return prepare(EXAMPLE)  # its AICB file is in the checkout (tests/data/aicb)


def test_placement_keeps_tp_in_a_dc_and_spreads_dp_over_both(prep):
    (w,) = prep.workloads
    assert w.schedule.world_size == 16
    site = {n.name: n.labels["site"] for n in prep.plan.hosts()}
    groups = w.schedule.groups.values()
    tp = [g for g in groups if g.kind == "tp"]
    dp = [g for g in groups if g.kind == "dp"]
    assert len(tp) == 2 and len(dp) == 8
    assert all(len({site[w.placement[r]] for r in g.ranks}) == 1 for g in tp)
    assert all({site[w.placement[r]] for r in g.ranks} == {"dc1", "dc2"} for g in dp)
    assert len(set(w.placement.values())) == 16  # one rank per host: TP traffic is on links


def test_dp_traffic_crosses_the_dci_and_tp_traffic_does_not(prep):
    (w,) = prep.workloads
    walker, dci = PathWalker(prep.plan), dci_links(prep.plan)
    assert len(dci) == 1

    def crosses(a: int, b: int) -> bool:
        dst = str(prep.plan.address_of(w.placement[b]))
        return any(h.link in dci for p in walker.paths(w.placement[a], dst) for h in p)

    assert crosses(0, 8) and crosses(7, 15)
    assert not crosses(0, 7) and not crosses(8, 15)


def test_scaled_dci_and_timeouts(prep):
    (dci,) = [lk for lk in prep.plan.links if lk.name in dci_links(prep.plan)]
    # a rate bottleneck without a delay line: the example runs on any kernel (its comment)
    assert dci.a_to_b.rate_bps == 10e9 / 100 and dci.a_to_b.delay_s == 0.0
    assert prep.options.agent_start_timeout_s == 120.0
