"""Which machine gets which node, and the VXLAN tunnels that join the links cut between
machines. Pure: the tunnel recipes are argv lists (run by the machine's aitb over SSH).

Placement: by site when every machine names one (each node of site s goes to the machine of
site s; a node of a site no machine names is an error), else the planner's cut
(orchestration.capacity.cut) over the machines in order.

A cut link's end on each machine becomes a VXLAN device (RFC 7348) created in the machine's
root namespace (its UDP socket stays there, on the underlay address), then moved into the
node's namespace under the link's interface name, so shaping, addresses and routes apply to it
as to a veth end. VNI = ``vni_base`` + the link's index in the plan; UDP port 4789 (IANA).
The encapsulation adds 50 bytes (outer Ethernet 14, IPv4 20, UDP 8, VXLAN 8): a cut link's MTU
must be at most the underlay MTU - 50, else the tunnel would fragment or drop; it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.errors import SpecError, SpecIssue
from models.paths import site_of
from models.plan import LabPlan
from orchestration.capacity.cut import cut
from orchestration.capacity.model import VXLAN_OVERHEAD_BYTES
from orchestration.cluster.spec import ClusterSpec

__all__ = ["Tunnel", "place", "tunnels", "vxlan_argvs", "VXLAN_PORT"]

VXLAN_PORT = 4789


@dataclass(frozen=True)
class Tunnel:
    """One cut link: its name, VNI, and per end (a, b) the machine, node and interface."""

    link: str
    vni: int
    a_machine: str
    a_node: str
    a_ifname: str
    b_machine: str
    b_node: str
    b_ifname: str
    mtu: int


def place(plan: LabPlan, cluster: ClusterSpec) -> dict[str, str]:
    """Node -> machine name (module docstring). Raises SpecError for a node whose site no
    machine names."""
    machines = cluster.machines
    if cluster.place:  # by hand, for the nodes it names; the rest by site or cut
        unknown = sorted(set(cluster.place) - {n.name for n in plan.nodes})
        if unknown:
            raise SpecError(SpecIssue(f"cluster.place names no node of the lab: "
                                      f"{', '.join(unknown)}", key_path=("cluster", "place")))
        rest = cluster.model_copy(update={"place": {}})
        if len(cluster.place) == len(plan.nodes):
            return dict(cluster.place)
        return {**place(plan, rest), **cluster.place}
    if all(m.site for m in machines):
        by_site = {m.site: m.name for m in machines}
        out, missing = {}, []
        for n in plan.nodes:
            site = site_of(plan, n.name)
            if site not in by_site:
                missing.append(f"{n.name} (site {site})")
            else:
                out[n.name] = by_site[site]
        if missing:
            raise SpecError(SpecIssue(f"no machine for the site of {', '.join(missing[:5])}"
                                      f"{' ...' if len(missing) > 5 else ''}; machines have "
                                      f"sites {', '.join(sorted(by_site))}",
                                      key_path=("cluster", "machines")))
        return out
    parts = cut(plan, len(machines)).parts
    return {n: machines[i].name for i, part in enumerate(parts) for n in part}


def tunnels(plan: LabPlan, where: dict[str, str], cluster: ClusterSpec,
            vni_base: int = 4200) -> list[Tunnel]:
    """The tunnels of the links whose ends are on different machines. Raises SpecError
    naming every cut link whose MTU exceeds the underlay MTU - 50."""
    limit = cluster.underlay_mtu - VXLAN_OVERHEAD_BYTES
    out, issues = [], []
    for i, lk in enumerate(plan.links):
        ma, mb = where[lk.a.node], where[lk.b.node]
        if ma == mb:
            continue
        if lk.mtu > limit:
            issues.append(SpecIssue(f"link {lk.name} is cut between {ma} and {mb}: its MTU "
                                    f"{lk.mtu} exceeds the underlay MTU {cluster.underlay_mtu}"
                                    f" - {VXLAN_OVERHEAD_BYTES} (VXLAN) = {limit}; lower it",
                                    key_path=("links", lk.name, "mtu")))
            continue
        out.append(Tunnel(lk.name, vni_base + i, ma, lk.a.node, lk.a.ifname, mb, lk.b.node,
                          lk.b.ifname, lk.mtu))
    if issues:
        raise SpecError(issues)
    return out


def vxlan_argvs(t: Tunnel, side: str, cluster: ClusterSpec, netns: str) -> list[list[str]]:
    """The commands (argv, run as root on the machine of ``side`` ``a`` or ``b``) that make
    the tunnel's end there: a VXLAN device on the underlay, moved into namespace ``netns``
    under the link's interface name, with the link's MTU, up."""
    by_name = {m.name: m for m in cluster.machines}
    here, there = (t.a_machine, t.b_machine) if side == "a" else (t.b_machine, t.a_machine)
    ifname = t.a_ifname if side == "a" else t.b_ifname
    tmp = f"vx{t.vni}"
    return [
        ["ip", "link", "add", tmp, "type", "vxlan", "id", str(t.vni), "local",
         by_name[here].underlay_ip, "remote", by_name[there].underlay_ip, "dstport",
         str(VXLAN_PORT), "nolearning"],
        ["ip", "link", "set", tmp, "mtu", str(t.mtu), "netns", netns, "name", ifname],
        ["ip", "-n", netns, "link", "set", ifname, "up"],
    ]
