"""A tiny lab for the traffic generator's netns tests (no testbed runtime needed): N host
namespaces on one Linux bridge in a switch namespace, every object named with a run id and
deleted by that name in teardown. Addresses 198.18.0.0/24 (RFC 2544 benchmarking range)."""

from __future__ import annotations

import secrets
import subprocess
import time

from pyroute2 import IPRoute, NetNS, netns


def _ethtool_off(ns: str, ifname: str) -> None:
    # per-MTU packets through the qdiscs, as on a real NIC without offloads: a 20-packet
    # pfifo must mean 20 x 1500 bytes, not 20 x 64 KiB GSO super-packets
    argv = ["ip", "netns", "exec", ns, "ethtool", "-K", ifname, "tso", "off", "gso", "off",
            "gro", "off"]
    subprocess.run(argv, check=True, capture_output=True)


class Star:
    """``n`` hosts h0..h{n-1}; host i is 198.18.0.{i+1}, its interface ``eth0``; the switch
    side of its link is ``p{i}`` in the switch namespace. ``offloads`` keeps TSO/GSO/GRO on
    (fast, for goodput benchmarks); off by default (per-MTU packets in the qdiscs)."""

    def __init__(self, n: int, offloads: bool = False) -> None:
        self.offloads = offloads
        self.rid = secrets.token_hex(3)
        self.n = n
        self.sw = f"tg{self.rid}sw"
        self.hosts = {f"h{i}": f"tg{self.rid}h{i}" for i in range(n)}
        self.addresses = {f"h{i}": f"198.18.0.{i + 1}" for i in range(n)}
        self.created: list[str] = []

    def up(self) -> Star:
        for ns in [self.sw, *self.hosts.values()]:
            netns.create(ns)
            self.created.append(ns)
        with NetNS(self.sw) as sw:
            sw.link("add", ifname="br0", kind="bridge")
            sw.link("set", index=sw.link_lookup(ifname="br0")[0], state="up")
        for i, (node, ns) in enumerate(self.hosts.items()):
            self._link(i, node, ns)
        return self

    def _link(self, i: int, node: str, ns: str) -> None:
        a, b = f"tg{self.rid}a{i}", f"tg{self.rid}b{i}"
        with IPRoute() as ipr:
            ipr.link("add", ifname=a, kind="veth", peer=b)
            ipr.link("set", index=ipr.link_lookup(ifname=a)[0], net_ns_fd=ns, ifname="eth0")
            ipr.link("set", index=ipr.link_lookup(ifname=b)[0], net_ns_fd=self.sw,
                     ifname=f"p{i}")
        with NetNS(ns) as h:
            idx = h.link_lookup(ifname="eth0")[0]
            h.addr("add", index=idx, address=self.addresses[node], prefixlen=24)
            h.link("set", index=idx, state="up")
            h.link("set", index=h.link_lookup(ifname="lo")[0], state="up")
        with NetNS(self.sw) as sw:
            idx = sw.link_lookup(ifname=f"p{i}")[0]
            sw.link("set", index=idx, master=sw.link_lookup(ifname="br0")[0], state="up")
        if not self.offloads:
            _ethtool_off(ns, "eth0")
            _ethtool_off(self.sw, f"p{i}")

    def host_stats(self, node: str) -> dict[str, int]:
        """IFLA_STATS64 of the host's eth0 (bytes and packets, both directions)."""
        with NetNS(self.hosts[node]) as h:
            (link,) = h.get_links(h.link_lookup(ifname="eth0")[0])
            return dict(link.get_attr("IFLA_STATS64"))

    def shape_to_host(self, node: str, rate_bps: int, limit_pkts: int) -> None:
        """HTB at ``rate_bps`` plus a pfifo of ``limit_pkts`` on the switch port towards
        ``node`` (that host's downlink becomes the bottleneck)."""
        self._shape(self.sw, f"p{node[1:]}", rate_bps, limit_pkts)

    def shape_from_host(self, node: str, rate_bps: int, limit_pkts: int) -> None:
        """The same on the host's own eth0 (its uplink)."""
        self._shape(self.hosts[node], "eth0", rate_bps, limit_pkts)

    def _shape(self, ns: str, ifname: str, rate_bps: int, limit_pkts: int) -> None:
        with NetNS(ns) as h:
            idx = h.link_lookup(ifname=ifname)[0]
            h.tc("add", "htb", index=idx, handle="1:", default=0x10)
            h.tc("add-class", "htb", index=idx, handle="1:10", parent="1:",
                 rate=f"{rate_bps // 1000}kbit", ceil=f"{rate_bps // 1000}kbit")
            h.tc("add", "pfifo", index=idx, handle="10:", parent="1:10", limit=limit_pkts)

    def qdisc_drops(self, node: str) -> int:
        """Drops of the pfifo on the switch port towards ``node``."""
        with NetNS(self.sw) as sw:
            idx = sw.link_lookup(ifname=f"p{node[1:]}")[0]
            for q in sw.get_qdiscs(index=idx):
                if q.get_attr("TCA_KIND") == "pfifo":
                    return q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]
        raise LookupError(f"no pfifo on p{node[1:]}")

    def down(self) -> None:
        for ns in reversed(self.created):
            netns.remove(ns)  # deleting a namespace deletes the veth ends inside it
        time.sleep(0.05)

    def leftovers(self) -> list[str]:
        with IPRoute() as ipr:
            links = [lk.get_attr("IFLA_IFNAME") for lk in ipr.get_links()]
        return [x for x in netns.listnetns() + links if self.rid in x]
