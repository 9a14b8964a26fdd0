"""AQMs at the bottleneck (red with ECN, fq_codel): this host kernel lacks both, so they run in
the stock-kernel VM (`make test-vm`). The lab reads every qdisc back after bring-up, so a
lab that comes up proves the kernel accepted our encoding of the parameters; traffic through
it proves the qdisc forwards."""

from __future__ import annotations

import pytest
from plans import two_hosts_router
from pyroute2 import IPRoute

from models.shaping import Shaping
from models.units import BufferSize

pytestmark = [pytest.mark.vm, pytest.mark.netns]


@pytest.mark.parametrize("aqm,ecn", [("fq_codel", False), ("fq_codel", True), ("red", True),
                                     ("red", False)])
def test_aqm_bottleneck_is_installed_read_back_and_forwards(labs, aqm, ecn):
    shaping = Shaping(rate_bps=10**7, aqm=aqm, ecn=ecn, buffer=BufferSize(size_bytes=200_000)
                      if aqm == "red" else BufferSize(packets=200))
    with labs(two_hosts_router(h2_in=shaping)) as lab:
        out = lab.run("h1", ["ping", "-c", "3", "-i", "0.2", "-W", "2", "198.18.2.1"])
        assert " 0% packet loss" in out.stdout, out.stdout
        with IPRoute(netns=lab.netns_name("r1")) as ipr:
            idx = lab.layout.nodes["r1"].ifindex("e2")
            kinds = {q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index=idx)}
    assert {"htb", aqm} <= kinds
