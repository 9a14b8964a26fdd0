"""Shaping precedence, per-direction shaping, built-in profiles, node settings precedence."""

import pytest
from topo_helpers import load

from models.units import BufferSize
from topologies.profiles import BUILTIN_PROFILES

BASE = """
name: t
nodes:
  a: {kind: host}
  b: {kind: host}
"""


def one_link(tmp_path, extra: str, link: str):
    plan = load(tmp_path, BASE + extra + "links:\n  - endpoints: [a, b]\n" + link)
    return plan.links[0]


def test_precedence_direction_over_inline_over_profile_over_defaults(tmp_path):
    extra = """profiles:
  p: {rate: 10Mbit, delay: 5ms, buffer: 50p, up: {delay: 7ms}}
  d: {rate: 1Mbit, loss: 1%}
defaults:
  link: {profile: d, buffer: 20p, corrupt: 0.5%}
"""
    link = """    profile: p
    rate: 100Mbit
    a_to_b: {rate: 200Mbit}
"""
    lk = one_link(tmp_path, extra, link)
    ab, ba = lk.a_to_b, lk.b_to_a
    assert ab.rate_bps == 200_000_000 and ba.rate_bps == 100_000_000  # direction > inline
    assert ab.delay_s == pytest.approx(0.007) and ba.delay_s == pytest.approx(0.005)  # up > keys
    assert ab.buffer == BufferSize(packets=50)  # profile > defaults.link's own keys
    assert ab.loss_pct == 1.0 and ab.corrupt_pct == 0.5  # defaults fill the rest


def test_per_direction_profile_up_down(tmp_path):
    lk = one_link(tmp_path, "", "    profile: edge-lte\n")
    assert lk.a_to_b.rate_bps == 10_000_000 and lk.b_to_a.rate_bps == 40_000_000
    assert lk.a_to_b.delay_s == pytest.approx(0.025) and lk.a_to_b.needs_netem


def test_user_profile_replaces_builtin(tmp_path):
    lk = one_link(tmp_path, "profiles:\n  dci-metro: {rate: 1Gbit}\n", "    profile: dci-metro\n")
    assert lk.a_to_b.rate_bps == 10**9 and lk.a_to_b.delay_s == 0


def test_400gbit_round_trips_through_the_file(tmp_path):
    lk = one_link(tmp_path, "", "    rate: 400Gbit\n    b_to_a: {rate: 399999999999bit}\n")
    assert lk.a_to_b.rate_bps == 400_000_000_000
    assert lk.b_to_a.rate_bps == 399_999_999_999


def test_link_loss_replaces_profile_gemodel(tmp_path):
    extra = "profiles:\n  burst: {delay: 1ms, loss_gemodel: {p: 1%, r: 10%}}\n"
    lk = one_link(tmp_path, extra, "    profile: burst\n    b_to_a: {loss: 2%}\n")
    assert lk.a_to_b.loss_gemodel.p_pct == 1.0 and lk.a_to_b.loss_gemodel.r_pct == 10.0
    assert lk.b_to_a.loss_gemodel is None and lk.b_to_a.loss_pct == 2.0


def test_all_shaping_keys_convert(tmp_path):
    link = ("    rate: 1Gbit\n    delay: 10ms\n    jitter: 1ms\n    jitter_distribution: pareto\n"
            "    delay_correlation: 25%\n    reorder: 1%\n    duplicate: 0.1%\n    corrupt: 0.2%\n"
            "    buffer: 256KiB\n    aqm: fq_codel\n    ecn: true\n    loss: 0.5%\n    mtu: 9000\n")
    lk = one_link(tmp_path, "", link)
    s = lk.a_to_b
    assert (s.rate_bps, s.jitter_distribution, s.delay_correlation_pct) == (10**9, "pareto", 25)
    assert (s.reorder_pct, s.duplicate_pct, s.corrupt_pct, s.loss_pct) == (1, 0.1, 0.2, 0.5)
    assert s.buffer == BufferSize(size_bytes=256 * 1024) and s.aqm == "fq_codel" and s.ecn
    assert lk.mtu == 9000 and lk.b_to_a == s


def test_jitter_keeps_order_unless_jitter_reorder_says_otherwise(tmp_path):
    link = ("    delay: 20ms\n    jitter: 10ms\n    jitter_distribution: uniform\n"
            "    b_to_a: {jitter_reorder: true}\n")
    lk = one_link(tmp_path, "", link)
    assert not lk.a_to_b.jitter_reorder and lk.b_to_a.jitter_reorder
    assert lk.b_to_a.with_changes(jitter_reorder=False) == lk.a_to_b


def test_builtin_profiles_are_valid_and_documented():
    from topologies.shaping import link_shaping
    from topologies.spec import LinkSpec

    assert {"dci-metro", "dci-longhaul", "edge-lte", "edge-5g", "campus-uplink",
            "dc-fabric-100g"} <= set(BUILTIN_PROFILES)
    for name, prof in BUILTIN_PROFILES.items():
        assert prof.description and "typical" in prof.description, name
        ab, ba = link_shaping(LinkSpec(endpoints=("a", "b"), profile=name), BUILTIN_PROFILES,
                              None)
        assert ab.rate_bps and ba.rate_bps and ab.is_shaped, name


def test_node_settings_precedence(tmp_path):
    text = """
name: t
defaults:
  host: {tcp_congestion_control: cubic, sysctls: {net.core.rmem_max: 1, net.core.wmem_max: 2}}
  router: {ecmp_hash: l4}
groups:
  g: {kind: host, tcp_congestion_control: bbr, sysctls: {net.core.wmem_max: 3}}
nodes:
  h1: {group: g, sysctls: {net.core.rmem_max: 9}, labels: {rack: r1}}
  h2: {kind: host}
  r1: {kind: router}
links:
  - endpoints: [h1, r1]
  - endpoints: [h2, r1]
"""
    plan = load(tmp_path, text)
    h1, h2, r1 = plan.node("h1"), plan.node("h2"), plan.node("r1")
    assert h1.kind == "host" and h1.group == "g" and h1.tcp_congestion_control == "bbr"
    assert h1.sysctls == {"net.core.rmem_max": "9", "net.core.wmem_max": "3"}
    assert h2.tcp_congestion_control == "cubic" and h2.sysctls["net.core.wmem_max"] == "2"
    assert r1.ecmp_hash == "l4" and h1.labels == {"rack": "r1"}
