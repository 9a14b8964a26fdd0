"""The report's picture of the lab: nodes and links of the plan, each link direction coloured
by its busy share, the critical link and the straggler ranks' hosts marked.

Layout (deterministic, no random seed involved): nodes are grouped by site (the node label
``site``, else its ``group``; nodes with neither form one more group), groups side by side in
name order. Inside a group, a node's *layer* is its hop distance from the group's hosts
through nodes of the group (hosts 0, leaves 1, spines 2, borders 3 in a leaf-spine DC; a group
without hosts counts from every host of the lab); layers are rows, hosts at the bottom, each
row spread evenly over the group's width (the widest row's node count; a multipartite
layout with horizontal rows), ordered by the mean position of each node's neighbours in the
row below (barycentre ordering), ties by name.

Each link is two arrows, one per direction, offset to either side of the line between its
nodes (the arrow of a -> b on the right of its direction of travel). The colour is the busy
share its caller gives (the report: over the run's traffic time, from the interface
counters, as the attribution computes a hop's busy share: analysis.report.run_busy_shares);
a direction without a configured rate, one the counters do not cover, or any in a run
without counter samples, is drawn grey and dashed. A direction named as ``critical_link`` by
a collective whose ``bound`` is ``link`` (``attribution.per_collective``,
analysis.metrics.bound) gets a red halo and its busy share over the intervals it was
critical in; hosts where a straggler rank ran get a red ring.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402

from analysis.report.plots import Png, _png  # noqa: E402
from models.plan import LabPlan  # noqa: E402

__all__ = ["lab_picture", "layout", "sites", "MAX_NODES", "CMAP", "ARC_RAD"]

# above: no picture (the report says why); a 64-host leaf-spine fits, a 256-host one drawn
# at this size is a hairball of 640 arrows that takes seconds to render
MAX_NODES = 150
CMAP = "viridis"
ARC_RAD = 0.3  # bend of a link between two nodes of one row (matplotlib arc3)
SHAPES = {"host": "o", "switch": "s", "router": "D"}
CRITICAL = "#d62728"
NO_DATA = "#b0b0b0"


def _site(n: Any) -> str:
    return str(n.labels.get("site") or n.group or "")


def _natural(name: str) -> tuple[Any, ...]:
    """Sort key: digits as numbers (h2 before h10)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def sites(plan: LabPlan) -> dict[str, str]:
    """Node name -> its group: its ``site`` label, else its ``group``, else the one group of
    its neighbours that have one (a torus switch joins its host's row; a rail switch
    between sites stays in none: "")."""
    own = {n.name: _site(n) for n in plan.nodes}
    near: dict[str, set[str]] = {n.name: set() for n in plan.nodes}
    for lk in plan.links:
        near[lk.a.node].add(own[lk.b.node])
        near[lk.b.node].add(own[lk.a.node])
    out = {}
    for name, site in own.items():
        others = near[name] - {""}
        out[name] = site or (next(iter(others)) if len(others) == 1 else "")
    return out


def _centre(g: nx.Graph, placed: Mapping[str, float], m: str) -> float:
    """The mean position of ``m``'s neighbours already placed (the rows below); +inf if none."""
    below = [placed[v] for v in g[m] if v in placed]
    return float(np.mean(below)) if below else float("inf")


def layout(plan: LabPlan) -> dict[str, tuple[float, float]]:
    """Node name -> (x, y) as the module docstring describes; y = layer (hosts 0), x in
    units of one node slot. Pure and deterministic."""
    g = nx.Graph()
    g.add_nodes_from(n.name for n in plan.nodes)
    g.add_edges_from((lk.a.node, lk.b.node) for lk in plan.links)
    kind = {n.name: n.kind for n in plan.nodes}
    hosts = [n.name for n in plan.nodes if n.kind == "host"]
    everywhere = nx.multi_source_dijkstra_path_length(g, hosts) if hosts else {}
    groups: dict[str, list[str]] = {}
    for name, site in sites(plan).items():
        groups.setdefault(site, []).append(name)
    pos: dict[str, tuple[float, float]] = {}
    x0 = 0.0
    for site in sorted(groups, key=lambda s: (s == "", _natural(s))):
        members = groups[site]
        sub = g.subgraph(members)
        own = [m for m in members if kind[m] == "host"]
        dist = nx.multi_source_dijkstra_path_length(sub, own) if own else {}
        layer = {m: int(dist.get(m, everywhere.get(m, 0))) for m in members}
        rows: dict[int, list[str]] = {}
        for m in sorted(members, key=_natural):
            rows.setdefault(layer[m], []).append(m)
        slot: dict[str, float] = {}
        for y in sorted(rows):
            row = sorted(rows[y], key=lambda m, placed=slot: (_centre(g, placed, m),
                                                              _natural(m)))
            for i, m in enumerate(row):
                slot[m] = (i + 0.5) / len(row)  # spread evenly over the group's width
        width = max(len(r) for r in rows.values())
        for m in members:
            pos[m] = (x0 + slot[m] * width - 0.5, float(layer[m]))
        x0 += width + 1.0
    return pos


def lab_picture(plan: LabPlan, busy: Mapping[tuple[str, str], float | None] | None,
                critical: Mapping[tuple[str, str], float | None],
                stragglers: set[str]) -> Png | None:
    """The picture (a base64 PNG) of ``plan``: ``busy`` maps a link direction, as its
    sending (node, ifname), to its busy share (0..1, above 1 clipped to the top colour; None
    or absent with counters: 0 for a shaped direction that sent nothing is the caller's to
    give), None when the run has no counter samples (every direction grey); ``critical``:
    (node, ifname) of directions some collective was link-bound on -> their busy share over
    those intervals (None unknown); ``stragglers``: host names to ring. None when the plan
    has more than MAX_NODES nodes. Artists carry gids the tests read: ``dir:<link>:<node>``
    for a direction's arrow, ``critical:<link>:<node>`` for its halo, ``straggler:<host>``.
    The PNG's ``notes`` say what is marked, in words (``critical link A -> B (LINK) busy
    N%``, ``straggler host H``), for the image's alt text."""
    if len(plan.nodes) > MAX_NODES or not plan.nodes:
        return None
    pos = layout(plan)
    xs = [p[0] for p in pos.values()]
    layers = int(max(p[1] for p in pos.values())) + 1
    width = min(max(7.0, 0.45 * (max(xs) - min(xs) + 2)), 14.0)
    # how far the arcs of links inside one row reach above and below it
    reach = max([ARC_RAD / 2 * abs(pos[lk.a.node][0] - pos[lk.b.node][0])
                 for lk in plan.links if pos[lk.a.node][1] == pos[lk.b.node][1]] or [0.0])
    top, bottom = layers - 1 + max(0.6, reach + 0.3), min(-0.9, -reach - 0.2)
    fig, ax = plt.subplots(figsize=(width, 1.5 * (top - bottom) + 1.0))
    cmap, norm = plt.get_cmap(CMAP), Normalize(0.0, 1.0)
    # offsets in data units: a fixed share of a slot, the same for every link
    off, shrink = 0.09, 9.0
    for lk in plan.links:
        (ax_, ay), (bx, by) = pos[lk.a.node], pos[lk.b.node]
        d = np.array([bx - ax_, by - ay])
        n = np.array([d[1], -d[0]]) / (np.hypot(*d) or 1.0)  # right of a -> b
        # a link inside one row: two arcs, each bending to the right of its travel, higher
        # the longer it is, so that it clears the nodes between its ends
        row = ay == by
        style = f"arc3,rad={ARC_RAD}" if row else "arc3"
        for src, end, sign in ((lk.a, lk.b, 1.0), (lk.b, lk.a, -1.0)):
            p0 = np.array(pos[src.node]) + (0.0 if row else sign * off) * n
            p1 = np.array(pos[end.node]) + (0.0 if row else sign * off) * n
            rate = lk.egress(src.node).rate_bps
            share = None if busy is None or not rate else busy.get((src.node, src.ifname), 0.0)
            colour = NO_DATA if share is None else cmap(norm(min(share, 1.0)))
            key = (src.node, src.ifname)
            if key in critical:
                ax.add_patch(FancyArrowPatch(tuple(p0), tuple(p1), arrowstyle="-", lw=7,
                                             connectionstyle=style,
                                             color=CRITICAL, alpha=0.45, shrinkA=shrink,
                                             shrinkB=shrink, zorder=1,
                                             gid=f"critical:{lk.name}:{src.node}"))
                c = critical[key]
                if c is not None:
                    mid = (p0 + p1) / 2 + sign * (
                        ARC_RAD / 2 * np.hypot(*d) + 2.2 * off if row else 2.2 * off) * n
                    ax.text(mid[0], mid[1], f"{c:.0%} while\ncritical", color=CRITICAL, fontsize=7,
                            ha="center", va="center", weight="bold", zorder=5)
            ax.add_patch(FancyArrowPatch(tuple(p0), tuple(p1), arrowstyle="-|>",
                                         mutation_scale=9, lw=2.0, color=colour,
                                         connectionstyle=style,
                                         ls="--" if share is None else "-", shrinkA=shrink,
                                         shrinkB=shrink, zorder=2,
                                         gid=f"dir:{lk.name}:{src.node}"))
    g = nx.Graph()
    g.add_nodes_from(n.name for n in plan.nodes)
    # node markers (points^2) shrink with the widest row so that 64 hosts do not touch
    widest = max(sum(1 for p in pos.values() if p[1] == y) for y in range(layers))
    size = max(100.0, 260.0 * min(1.0, 40 / widest))
    for kind, marker in SHAPES.items():
        names = [n.name for n in plan.nodes if n.kind == kind]
        if names:
            nx.draw_networkx_nodes(g, pos, nodelist=names, node_shape=marker,
                                   node_size=size, node_color="white", edgecolors="#333",
                                   linewidths=1.0, ax=ax)
    for h in sorted(stragglers & set(pos)):
        ax.scatter(*pos[h], s=size * 2.6, facecolors="none", edgecolors=CRITICAL,
                   linewidths=2.2, zorder=4, gid=f"straggler:{h}")
    crowded = sum(1 for p in pos.values() if p[1] == 0) > 12
    box = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}
    for name, (x, y) in pos.items():
        if y > 0:  # beside the node: the links above and below it stay clear
            ax.text(x + 0.18, y, name, fontsize=7, ha="left", va="center", zorder=6,
                    bbox=box)
        else:
            ax.text(x, y - 0.22, name, fontsize=7, ha="right" if crowded else "center",
                    va="top", rotation=60 if crowded else 0, rotation_mode="anchor",
                    zorder=6, bbox=box)
    where = sites(plan)
    for site in sorted(set(where.values()) - {""}):
        mine = [pos[n][0] for n, s in where.items() if s == site]
        ax.text(float(np.mean(mine)), top - 0.25, f"site {site}", ha="center",
                fontsize=9, color="#555", style="italic")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    bar = fig.colorbar(sm, ax=ax, fraction=0.035, pad=0.01, extend="max")
    bar.ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    bar.set_label("busy share over the run's traffic time (%):\n"
                  "tx bytes x 8 / (time x configured rate)", fontsize=8)
    handles = [Line2D([], [], marker=m, ls="", mfc="white", mec="#333", label=k)
               for k, m in SHAPES.items() if any(n.kind == k for n in plan.nodes)]
    handles += [Line2D([], [], color=cmap(0.6), lw=2, marker=">", ms=5,
                       label="one arrow per direction, on the right of its travel"),
                Line2D([], [], color=NO_DATA, lw=2, ls="--",
                       label="unshaped or no counter samples"),
                Line2D([], [], color=CRITICAL, alpha=0.45, lw=7,
                       label="critical link of link-bound collectives\n"
                             + ("(%: its busy share while they ran)" if critical
                                else "(none in this run)")),
                Line2D([], [], marker="o", ls="", mfc="none", mec=CRITICAL, mew=2.2, ms=11,
                       label="host of a straggler rank"
                             + ("" if stragglers & set(pos) else " (none in this run)"))]
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.02),
              ncol=3, frameon=False)
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(bottom, top)
    ax.set_axis_off()
    title = f"lab {plan.name}: {len(plan.nodes)} nodes, {len(plan.links)} links"
    ax.set_title(title, fontsize=10)
    names = {(e.node, e.ifname): (lk.name, e.node, o.node) for lk in plan.links
             for e, o in ((lk.a, lk.b), (lk.b, lk.a))}
    notes = [f"critical link {names[k][1]} -> {names[k][2]} ({names[k][0]})"
             + (f" busy {v:.0%}" if v is not None else "")
             for k, v in sorted(critical.items()) if k in names]
    notes += [f"straggler host {h}" for h in sorted(stragglers & set(pos))]
    out = _png(fig)
    out.notes = tuple(notes)  # the img's alt text: what the picture marks, in words
    return out
