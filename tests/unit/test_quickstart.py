"""The built-in quickstart, checked without running it: two DCs joined by a 10 ms DCI that
stands for 100 Gbit/s at 1 Gbit/s, TP groups inside a DC, DP groups across the DCI, an
incast, and FedAvg clients on edge sites behind slower links."""

import io

from rich.console import Console

from orchestration.cli.commands.run_progress import StepProgress
from orchestration.run.defaults import default_experiment
from orchestration.run.runner import prepare


def test_quickstart_layout():
    prep = prepare(default_experiment())
    assert prep.spec.name == "quickstart" and prep.spec.scale == 100
    plan = prep.plan
    site = {h.name: h.labels["site"] for h in plan.hosts()}
    (dci,) = [lk for lk in plan.links if {lk.a.node, lk.b.node} == {"dc1-b1", "dc2-b1"}]
    for s in (dci.a_to_b, dci.b_to_a):
        assert (s.rate_bps, s.delay_s) == (10**9, 0.010)  # 100 Gbit/s / 100, 10 ms one way
    edge = [lk for lk in plan.links if lk.a.node.startswith("edge")]
    assert len(edge) == 3
    assert all(lk.a_to_b.rate_bps < dci.a_to_b.rate_bps and lk.a_to_b.delay_s > 0
               for lk in edge)
    train, incast, fed = prep.workloads
    hosts = train.placement
    for g in train.schedule.groups.values():
        sites = {site[hosts[r]] for r in g.ranks}
        # TP stays inside one DC; every DP group has a rank in each DC: crosses the DCI
        assert sites == {"dc1", "dc2"} if g.kind == "dp" else len(sites) == 1, g
    assert {g.kind for g in train.schedule.groups.values()} == {"tp", "dp"}
    assert len(incast.placement) == 4 and incast.schedule.name == "aggregator-incast"
    assert fed.placement[0].startswith("dc1-")
    assert {site[h] for r, h in fed.placement.items() if r} == {"edge"}


def test_step_progress_on_a_terminal_and_off():
    buf = io.StringIO()
    with StepProgress(Console(file=buf, force_terminal=True, width=80)) as step:
        step("bringing up lab x")
        step("workload 0")
    text = buf.getvalue()
    assert "bringing up lab x" in text and "workload 0" in text and "✓" in text
    plain = io.StringIO()
    with StepProgress(Console(file=plain, force_terminal=False, width=80)) as step:
        step("one")
        step("two")
    lines = plain.getvalue().splitlines()
    assert [ln.split("s ", 1)[1] for ln in lines] == ["one", "two"]
    quiet = io.StringIO()
    with StepProgress(Console(file=quiet, force_terminal=True), quiet=True) as step:
        step("nothing")
    assert quiet.getvalue() == ""


def test_the_quickstart_has_one_dci_and_its_edge_uplinks_are_access_links():
    """The edge hosts (site edge) hang off DC 1's border router: their links cross sites but
    are access links, not DCIs (models.paths.dci_links); the one DCI joins the borders."""
    from models.paths import dci_links

    plan = prepare(default_experiment()).plan
    edge = {lk.name for lk in plan.links if lk.a.node.startswith("edge")}
    assert len(edge) == 3 and dci_links(plan) == {"dc1-b1-dc2-b1"}
