"""The report's picture of the lab (analysis.report.picture): the layout by layers and sites,
one arrow per link direction coloured by its busy share, the critical link and the
stragglers' hosts marked. Asserts on the matplotlib artists, not on pixels."""

from __future__ import annotations

from ipaddress import IPv4Interface

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.patches import FancyArrowPatch

from analysis.report import picture
from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
from models.shaping import Shaping


def _link(a: str, aif: str, b: str, bif: str, i: int, rate: int | None = 100_000_000
          ) -> LinkPlan:
    s = Shaping(rate_bps=rate)
    return LinkPlan(f"{a}-{b}", Endpoint(a, aif, IPv4Interface(f"10.0.{i}.1/30")),
                    Endpoint(b, bif, IPv4Interface(f"10.0.{i}.2/30")), s, s)


def _plan(sites: bool = False) -> LabPlan:
    """h1, h2 on leaf l1; h3 on leaf l2; both leaves on spine s1; the l2-s1 link unshaped."""
    def node(name: str, kind: str, site: str) -> NodePlan:
        return NodePlan(name, kind, labels={"site": site} if sites else {})
    nodes = (node("s1", "switch", "a"), node("l1", "switch", "a"), node("l2", "switch", "b"),
             node("h1", "host", "a"), node("h2", "host", "a"), node("h3", "host", "b"))
    links = (_link("h1", "eth0", "l1", "eth0", 1), _link("h2", "eth0", "l1", "eth1", 2),
             _link("h3", "eth0", "l2", "eth0", 3), _link("l1", "eth2", "s1", "eth0", 4),
             _link("l2", "eth1", "s1", "eth1", 5, rate=None))
    return LabPlan("t", nodes, links)


# the utilisation table: sending (node, ifname) -> busy share
BUSY = {("h1", "eth0"): 0.9, ("l1", "eth0"): 0.2, ("h2", "eth0"): 0.5, ("l1", "eth2"): 1.4}


def _draw(plan: LabPlan, busy=BUSY, critical=None, stragglers=frozenset()):
    """The figure lab_picture drew (captured before it is closed) and its PNG."""
    seen = []
    real = plt.close

    def keep(fig=None):
        seen.append(fig)
        real(fig)
    plt.close = keep
    try:
        png = picture.lab_picture(plan, busy, critical or {}, set(stragglers))
    finally:
        plt.close = real
    (fig,) = seen
    return fig, png


def _arrows(fig, prefix: str) -> dict[str, FancyArrowPatch]:
    return {p.get_gid(): p for p in fig.axes[0].patches
            if (p.get_gid() or "").startswith(prefix)}


def test_layers_put_hosts_at_the_bottom_and_are_deterministic():
    pos = picture.layout(_plan())
    assert {n: y for n, (_, y) in pos.items()} == {"h1": 0, "h2": 0, "h3": 0, "l1": 1,
                                                   "l2": 1, "s1": 2}
    assert pos == picture.layout(_plan())
    # a leaf sits above its own hosts (barycentre order): l1 left of l2 as h1, h2 of h3
    assert pos["l1"][0] < pos["l2"][0] and pos["h2"][0] < pos["h3"][0]


def test_sites_are_grouped_side_by_side():
    pos = picture.layout(_plan(sites=True))
    a = [pos[n][0] for n in ("s1", "l1", "h1", "h2")]
    b = [pos[n][0] for n in ("l2", "h3")]
    assert max(a) < min(b)  # site a, then site b: no node of one inside the other's block
    assert pos["l2"][1] == 1 and pos["s1"][1] == 2  # layers counted inside each site


def test_both_directions_drawn_coloured_by_busy_share():
    plan = _plan()
    fig, png = _draw(plan)
    assert png
    arrows = _arrows(fig, "dir:")
    assert len(arrows) == 2 * len(plan.links)
    cmap = plt.get_cmap(picture.CMAP)
    for (node, ifname), share in BUSY.items():
        lk = next(lk for lk in plan.links
                  if (node, ifname) in ((lk.a.node, lk.a.ifname), (lk.b.node, lk.b.ifname)))
        got = arrows[f"dir:{lk.name}:{node}"].get_edgecolor()
        assert got == pytest.approx(cmap(min(share, 1.0)))  # above the rate: the top colour
    # a shaped direction absent from the table sent nothing: the colour of 0 %
    assert arrows["dir:h3-l2:h3"].get_edgecolor() == pytest.approx(cmap(0.0))
    # unshaped: grey and dashed, whatever the table says
    grey = to_rgba(picture.NO_DATA)
    for node in ("l2", "s1"):
        a = arrows[f"dir:l2-s1:{node}"]
        assert a.get_edgecolor() == pytest.approx(grey) and a.get_linestyle() == "--"
    # the two directions of a link are two distinct, parallel, offset paths
    for lk in plan.links:
        p = arrows[f"dir:{lk.name}:{lk.a.node}"].get_path().vertices
        q = arrows[f"dir:{lk.name}:{lk.b.node}"].get_path().vertices
        assert not np.allclose(p.mean(axis=0), q.mean(axis=0))
    # a busier direction is a different colour from a quieter one
    assert arrows["dir:h1-l1:h1"].get_edgecolor() != arrows["dir:h1-l1:l1"].get_edgecolor()
    labels = [t.get_text() for t in fig.axes[-1].get_yticklabels()]
    assert fig.axes[-1].get_ylabel().startswith("busy share") and "100%" in labels


def test_no_counters_draws_every_direction_grey():
    fig, _ = _draw(_plan(), busy=None)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "host of a straggler rank (none in this run)" in legend
    assert "critical link of link-bound collectives\n(none in this run)" in legend
    assert {a.get_edgecolor() for a in _arrows(fig, "dir:").values()} == {
        to_rgba(picture.NO_DATA)}


def test_the_critical_link_and_the_stragglers_are_marked():
    fig, _ = _draw(_plan(), critical={("h2", "eth0"): 0.97}, stragglers={"h3", "nowhere"})
    assert set(_arrows(fig, "critical:")) == {"critical:h2-l1:h2"}
    ax = fig.axes[0]
    assert "97% while\ncritical" in [t.get_text() for t in ax.texts]
    rings = [c.get_gid() for c in ax.collections if (c.get_gid() or "").startswith("straggler")]
    assert rings == ["straggler:h3"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("critical link") for t in legend)
    assert "host of a straggler rank" in legend
    _, png = _draw(_plan(), critical={("h2", "eth0"): 0.97}, stragglers={"h3", "nowhere"})
    assert png.notes == ("critical link h2 -> l1 (h2-l1) busy 97%", "straggler host h3")


def test_a_lab_above_the_limit_is_not_drawn(monkeypatch):
    plan = _plan()
    monkeypatch.setattr(picture, "MAX_NODES", len(plan.nodes))
    assert picture.lab_picture(plan, BUSY, {}, set())
    monkeypatch.setattr(picture, "MAX_NODES", len(plan.nodes) - 1)
    assert picture.lab_picture(plan, BUSY, {}, set()) is None
