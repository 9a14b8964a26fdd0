"""Jitter keeps a flow's order on the native delay line; only ``jitter_reorder`` (or
``reorder``) lets packets pass each other.

A numbered UDP stream, one datagram per millisecond, crosses a 20 ms +- 10 ms (uniform) link:
the jitter's spread (20 ms) is twenty gaps, so independent draws would reorder most of the
stream (about 70 % of the datagrams overtaken), while FIFO order reorders none. Host kernel, no
netem needed; lab addresses only.
"""

from __future__ import annotations

import dataclasses

import pytest
from plans import two_hosts_router
from traffic import numbered_udp_stream, overtaken

from models.shaping import Shaping
from testbed.delay import native

pytestmark = pytest.mark.netns

COUNT = 500
GAP_S = 0.001
JITTERY = Shaping(delay_s=0.020, jitter_s=0.010, jitter_distribution="uniform")


def _native(plan):
    return dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line="native")
                                                 for lk in plan.links))


def _stream_through(labs, h1_out: Shaping) -> tuple[list[int], dict]:
    """COUNT numbered datagrams h1 -> h2 over a native line shaped ``h1_out``, GAP_S apart:
    the numbers in arrival order, and the line's queue stats (testbed/delay/nfqueue/stats.py
    fields)."""
    with labs(_native(two_hosts_router(h1_out))) as lab:
        got = numbered_udp_stream(lab, "h1", "h2", "198.18.2.1", COUNT, GAP_S)
        queue = native.stats(lab)["h1-r1/a_to_b"]["queue"]
    return got, queue


def test_jitter_keeps_a_flows_order(labs):
    got, queue = _stream_through(labs, JITTERY)
    assert sorted(got) == list(range(COUNT))  # nothing lost on the way
    assert overtaken(got) == 0, f"{overtaken(got)} of {COUNT} datagrams overtaken"
    # what packets got is reported, not what was drawn: with gaps (1 ms) far below the
    # jitter's spread (20 ms) most packets wait for a larger draw ahead of them
    drawn, added = queue["drawn_delay"], queue["added_delay"]
    assert drawn["n"] >= COUNT and drawn["max_us"] <= 30_000
    assert added["p50_us"] > drawn["p50_us"]


def test_jitter_reorder_lets_jittered_packets_pass_each_other(labs):
    got, _ = _stream_through(labs, JITTERY.with_changes(jitter_reorder=True))
    assert sorted(got) == list(range(COUNT))
    assert overtaken(got) > 0


def test_reorder_still_reorders_a_fifo_jittered_line(labs):
    # reorder sends some datagrams at once, past the held ones (FIFO alone overtakes none)
    got, _ = _stream_through(labs, JITTERY.with_changes(reorder_pct=10))
    assert sorted(got) == list(range(COUNT))
    assert overtaken(got) > 0
