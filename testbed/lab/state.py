"""Live description of a lab for people and ``--json``: per node its namespace, interfaces
with addresses, and qdiscs/classes with the kernel's counters (read through netlink)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from testbed.lab.verify import dump_tc
from testbed.ns.links import RTM_GETLINK, link_state
from testbed.ns.nl import dump
from testbed.ovs.lab import recorded_datapaths
from testbed.routing.routes import RTM_GETADDR
from testbed.tc import qdiscs

if TYPE_CHECKING:
    from testbed.lab.lab import Lab

__all__ = ["describe", "qdisc_stats"]


def _handle(h: int) -> str:
    return f"{h >> 16:x}:{h & 0xFFFF:x}" if h not in (0xFFFFFFFF, 0) else \
        ("root" if h == 0xFFFFFFFF else "0:")


def qdisc_stats(m: Any) -> dict[str, Any]:
    """Counters of a dumped qdisc/class: bytes, packets, drops, overlimits, qlen, backlog
    (bytes queued), requeues; and what the kind's module in :mod:`testbed.tc.qdiscs` adds
    (``rate_bps`` for an HTB class, ``limit`` for pfifo, bfifo and netem)."""
    out: dict[str, Any] = {"kind": m.get_attr("TCA_KIND"), "handle": _handle(m["handle"]),
                           "parent": _handle(m["parent"])}
    st = m.get_attr("TCA_STATS2")
    if st is not None:
        basic, queue = st.get_attr("TCA_STATS_BASIC"), st.get_attr("TCA_STATS_QUEUE")
        if basic is not None:
            out.update(bytes=basic["bytes"], packets=basic["packets"])
        if queue is not None:
            out.update(drops=queue["drops"], overlimits=queue["overlimits"],
                       qlen=queue["qlen"], backlog_bytes=queue["backlog"],
                       requeues=queue["requeues"])
    plugin = qdiscs.known(out["kind"])  # None for kinds aitb does not build (noqueue, ...)
    opts = m.get_attr("TCA_OPTIONS")
    if plugin is not None and opts is not None:
        out.update(plugin.stats(opts))
    return out


def _node(lab: Lab, name: str) -> dict[str, Any]:
    sock = lab.node_io(name).sock
    links = {m["index"]: link_state(m) for m in dump(sock, ifinfmsg(), RTM_GETLINK, name)}
    for m in dump(sock, ifaddrmsg(), RTM_GETADDR, name):
        if m["index"] in links:
            links[m["index"]].setdefault("addresses", []).append(
                f"{m.get_attr('IFA_ADDRESS')}/{m['prefixlen']}")
    tc = dump_tc(sock, name, sorted(links))
    for (index, _, verb), m in sorted(tc.items(), key=lambda kv: kv[0]):
        stats = qdisc_stats(m)
        # a class without counters is a graft point, not a traffic class: the segmenter's
        # tbf 9:1 (testbed/tc/qdiscs/tbf.py) holding the buffer's pfifo or bfifo
        if index in links and (verb != "class" or "bytes" in stats):
            links[index].setdefault(verb + "es" if verb == "class" else verb + "s",
                                    []).append(stats)
    return {"netns": lab.netns_name(name),
            "kind": lab.plan.node(name).kind,
            "interfaces": [{"index": i, **v} for i, v in sorted(links.items())]}


def describe(lab: Lab) -> dict[str, Any]:
    """{run_id, lab, nodes: {node: {netns, kind, interfaces: [...]}}} read live; an OVS
    switch's node also has ``ovs_datapath`` (``system``/``netdev``, as recorded at bring-up
    in the run's registry)."""
    with lab.netlink_lock:  # a trace player may be changing shaping meanwhile
        nodes = {n.name: _node(lab, n.name) for n in lab.plan.nodes}
    for s, dp in recorded_datapaths(lab).items():
        nodes[s]["ovs_datapath"] = dp
    return {"run_id": lab.run_id, "lab": lab.plan.name, "nodes": nodes}
