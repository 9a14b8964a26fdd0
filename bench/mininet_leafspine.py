"""Peer side of bench/bringup.py: Mininet brings up and tears down a leaf-spine.

Runs under the distribution's Python (/usr/bin/python3, where Debian's mininet package lives),
not the project venv. Prints one JSON line: {"hosts", "up_s", "down_s", "total_s"}.

Topology: ``spines`` spine switches, ``leaves`` leaf switches each linked to every spine, and
``hosts_per_leaf`` hosts per leaf; Mininet's LinuxBridge switches with STP on (a leaf-spine of
bridges has L2 loops; without STP the broadcast storm makes teardown take minutes, see
shared/env/KERNEL.md), no controller; with ``--bw-mbit`` every link is a TCLink (HTB) at that
rate, the same shaping aitb applies. Only this script's own Mininet object is stopped
(net.stop()); never ``mn -c``.
"""

import argparse
import json
import time

from mininet.link import TCLink
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.nodelib import LinuxBridge
from mininet.topo import Topo


class LeafSpine(Topo):
    """Leaf-spine of Linux bridges with hosts on the leaves."""

    def build(self, spines=4, leaves=16, hosts_per_leaf=16, bw_mbit=None):
        opts = {"bw": bw_mbit} if bw_mbit else {}
        spine_names = [self.addSwitch(f"s{i + 1}", stp=True) for i in range(spines)]
        n = 0
        for leaf in range(leaves):
            lname = self.addSwitch(f"s{spines + leaf + 1}", stp=True)
            for s in spine_names:
                self.addLink(lname, s, **opts)
            for _ in range(hosts_per_leaf):
                n += 1
                self.addLink(self.addHost(f"h{n}"), lname, **opts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spines", type=int, default=4)
    ap.add_argument("--leaves", type=int, default=16)
    ap.add_argument("--hosts-per-leaf", type=int, default=16)
    ap.add_argument("--bw-mbit", type=float, default=None)
    a = ap.parse_args()
    setLogLevel("error")
    topo = LeafSpine(spines=a.spines, leaves=a.leaves, hosts_per_leaf=a.hosts_per_leaf,
                     bw_mbit=a.bw_mbit)
    t0 = time.perf_counter()
    link = {"link": TCLink} if a.bw_mbit else {}
    net = Mininet(topo=topo, switch=LinuxBridge, controller=None, autoSetMacs=True,
                  ipBase="198.18.0.0/15", **link)
    try:
        net.start()
        t1 = time.perf_counter()
    finally:
        net.stop()
    t2 = time.perf_counter()
    print(json.dumps({"hosts": len(net.hosts), "up_s": t1 - t0, "down_s": t2 - t1,
                      "total_s": t2 - t0}))


if __name__ == "__main__":
    main()
