"""The native delay line inside a Lab: placement, registration, live change, teardown.

Host kernel (no netem needed). RTTs are read with ``ping -U`` (user-space send/receive
times): plain ping's kernel receive timestamp is taken before PREROUTING, where the line in
the pinger's own namespace holds the reply.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from plans import two_hosts_router

from aitb.errors import LabError
from aitb.shaping import Shaping
from testbed.delay_backends import native

pytestmark = pytest.mark.netns


def _native(plan):
    return dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))


def _min_rtt_ms(lab, src: str, dst: str, count: int = 10) -> float:
    out = lab.run(src, ["ping", "-U", "-c", str(count), "-i", "0.05", "-W", "2", dst]).stdout
    return min(float(x) for x in re.findall(r"time=([\d.]+) ms", out))


def test_native_line_delays_both_ways_and_leaves_nothing(labs):
    plan = _native(two_hosts_router(Shaping(delay_s=0.010), Shaping(delay_s=0.005)))
    with labs(plan) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", "198.18.2.1"])  # ARP
        rtt = _min_rtt_ms(lab, "h1", "198.18.2.1")
        recs = [r for r in lab.registry.records() if r.get("role") == "delay-line"]
        lines = lab.delay_lines()
        saved = json.loads((lab.registry.dir / "plan.json").read_text())
    # 10 ms + 5 ms one way each; the minimum of 10 may not undercut it (a line never releases
    # early) and a 5 ms margin covers scheduling of two idle namespaces
    assert 15.0 <= rtt < 20.0
    assert {r["node"] for r in recs} == {"r1", "h1"}  # h1->r1 held at r1, r1->h1 at h1
    assert lines["h1-r1/a_to_b"] == {"backend": "native", "node": "r1", "hook": "in",
                                     "dev": "e1"}
    assert lines["h1-r1/b_to_a"]["node"] == "h1"
    assert [lk["delay_line"] for lk in saved["links"]] == ["native", "native"]


def test_refused_keys_name_link_direction_and_key_before_anything_exists(labs):
    plan = _native(two_hosts_router(Shaping(delay_s=0.010, duplicate_pct=1.0)))
    lab = labs(plan)
    with pytest.raises(LabError, match=r"link h1-r1 a_to_b: duplicate_pct"):
        lab.up()
    assert not lab.registry.dir.exists()


def test_a_delay_beyond_the_memory_cap_is_one_error_naming_the_link(labs):
    plan = _native(two_hosts_router(Shaping(rate_bps=10**10, delay_s=1.0)))
    lab = labs(plan)
    with pytest.raises(LabError, match=r"link h1-r1 a_to_b: delay 1s at 10 Gbit/s .* cap of "
                                       r"256 MiB"):
        lab.up()
    assert not lab.registry.dir.exists()


def test_set_shaping_changes_the_native_line_live(labs):
    plan = _native(two_hosts_router(Shaping(delay_s=0.010)))
    with labs(plan) as lab:
        lab.run("h1", ["ping", "-c", "1", "-W", "3", "198.18.2.1"])
        lab.set_shaping("h1-r1", "a_to_b", Shaping(delay_s=0.030))
        rtt = _min_rtt_ms(lab, "h1", "198.18.2.1")
        with pytest.raises(LabError, match="h1-r1 b_to_a: no native delay line"):
            lab.set_shaping("h1-r1", "b_to_a", Shaping(delay_s=0.030))
    assert 30.0 <= rtt < 35.0  # the new 30 ms, not the old 10 ms


def test_a_dead_helper_is_reported_naming_link_and_direction(labs):
    plan = _native(two_hosts_router(Shaping(delay_s=0.010)))
    with labs(plan) as lab:
        (helper,) = native._state(lab).helpers.values()
        helper.proc.kill()
        helper.proc.wait()
        with pytest.raises(LabError, match=r"link h1-r1 a_to_b: the delay-line helper .* died "
                                           r"\(exit status -9\)"):
            native.check_alive(lab)
