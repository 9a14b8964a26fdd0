"""Sizes no transfer can carry are refused before the lab exists (orchestration/run/
size_check.py): a TCP transfer larger than the narrowest rate on its path carries within
``timeouts.transfer``, and a UDP message of more datagrams than the header's 32-bit count.
Both used to start the lab and fail in it (a transfer timeout, a struct.error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import refused_run

from models.errors import SpecError
from orchestration.run.runner import prepare
from orchestration.run.size_check import UDP_MAX_DATAGRAMS

ROOT = Path(__file__).parent.parent.parent


def _experiment(tmp_path: Path, workload: str, *, rate: str | None = "8Mbit",
                extra: str = "timeouts: {transfer: 2s}\n", scale: int = 1) -> Path:
    link = f"{{rate: {rate}}}" if rate else "{}"
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"name: sizes\nscale: {scale}\n{extra}"
        "topology:\n  inline:\n    name: x\n"
        "    generator: {name: single_switch, params: {hosts: 4, link: l}}\n"
        f"    profiles: {{l: {link}}}\n"
        "workloads:\n" + workload)
    return path


def _incast(size: str, more: str = "") -> str:
    return f"  - kind: incast\n    receiver: h1\n    size: {size}\n{more}"


def _refusal(path: Path):
    with pytest.raises(SpecError) as err:
        prepare(path)
    (issue,) = err.value.issues
    return issue


def test_a_tcp_transfer_beyond_rate_times_timeout_is_refused_at_its_size_key(tmp_path):
    # 8 Mbit/s for 2 s carries 2000000 bytes: that many pass, one more cannot end in time
    assert prepare(_experiment(tmp_path, _incast("2000000B"))).workloads
    issue = _refusal(_experiment(tmp_path, _incast("2000001B")))
    assert (issue.file, issue.key_path, issue.line) == (
        str(tmp_path / "exp.yaml"), ("workloads", 0, "size"), 12)
    assert "a transfer of 2000001 bytes" in issue.message
    assert "timeouts.transfer (2 s)" in issue.message
    assert "narrowest rate on its path is 8mbit" in issue.message
    assert "at most 2000000 bytes" in issue.message


def test_the_bound_follows_timeouts_transfer(tmp_path):
    assert prepare(_experiment(tmp_path, _incast("2000001B"),
                               extra="timeouts: {transfer: 3s}\n")).workloads


def test_a_collective_is_checked_per_transfer_not_per_message(tmp_path):
    # a ring all-reduce of S over 4 ranks moves S/4 per step
    ring = "  - kind: collective\n    op: all_reduce\n    algorithm: ring\n    size: {}\n"
    assert prepare(_experiment(tmp_path, ring.format("8000000B"))).workloads
    issue = _refusal(_experiment(tmp_path, ring.format("8000004B")))
    assert issue.key_path == ("workloads", 0, "size") and "2000001 bytes" in issue.message


def test_a_step_striped_over_connections_is_checked_per_part(tmp_path):
    # conns_per_peer: 2 cuts a step in two transfers, each with its own timeout
    conns = "timeouts: {transfer: 2s}\ntransport: {conns_per_peer: 2}\n"
    assert prepare(_experiment(tmp_path, _incast("4000000B"), extra=conns)).workloads
    issue = _refusal(_experiment(tmp_path, _incast("4000003B"), extra=conns))
    assert "a transfer of 2000002 bytes" in issue.message


def test_scale_divides_sizes_and_rates_alike(tmp_path):
    issue = _refusal(_experiment(tmp_path, _incast("20000010B"), rate="80Mbit", scale=10))
    assert "2000001 bytes" in issue.message and "8mbit" in issue.message


def test_unshaped_paths_and_changing_rates_have_no_bound(tmp_path):
    assert prepare(_experiment(tmp_path, _incast("4TiB"), rate=None)).workloads
    events = "timeouts: {transfer: 2s}\nevents:\n  - {at: 1s, kind: link_down, link: h2-s1}\n"
    path = _experiment(tmp_path, _incast("4MiB"), extra=events)
    assert prepare(path).events  # a link may come back faster: not checked


def test_a_udp_message_beyond_the_headers_datagram_count_is_refused(tmp_path):
    udp = "    protocol: udp\n    rate: 1Gbit\n"
    most = UDP_MAX_DATAGRAMS * 1400
    assert prepare(_experiment(tmp_path, _incast(f"{most}B", udp), rate=None)).workloads
    issue = _refusal(_experiment(tmp_path, _incast(f"{most + 1}B", udp), rate=None))
    assert issue.key_path == ("workloads", 0, "size") and issue.line == 12
    assert f"more than {UDP_MAX_DATAGRAMS} datagrams of 1400 bytes" in issue.message
    assert "(and 2 more host pairs)" in issue.message
    assert "32 bits" in issue.message


def test_cli_refuses_before_anything_exists(tmp_path):
    path = _experiment(tmp_path, _incast("1GiB"))
    stderr = refused_run(path, tmp_path)
    assert f"{path}:12: workloads[0].size: incast: a transfer of" in stderr


def test_an_invalid_experiment_gets_no_size_refusal_from_the_defaults_standing_in(tmp_path):
    # the typo drops the whole timeouts section from the salvaged copy (default transfer
    # timeout 60 s): 100 MB fits the user's 120 s at 8 Mbit/s (120 MB), not 60 s (60 MB)
    path = _experiment(tmp_path, _incast("100MB"),
                       extra="timeouts: {transfer: 120s, agent_strat: 30s}\n")
    with pytest.raises(SpecError) as err:
        prepare(path)
    messages = [i.message for i in err.value.issues]
    assert any("agent_strat" in m or "unknown key" in m for m in messages), messages
    assert not any("cannot end within timeouts.transfer" in m for m in messages), messages



def test_a_size_refusal_comes_with_the_same_entrys_placement_issue(tmp_path):
    # rails of 1 Gbit/s for 1 s carry 125 MB: a 2 GiB ring all-reduce moves 1 GiB parts;
    # 3 slots per server put 3 ranks on 2 NICs: both issues of the entry in one message
    text = (ROOT / "examples" / "rail_server_hosts.yaml").read_text()
    path = tmp_path / "exp.yaml"
    path.write_text(text.replace("size: 256KiB", "size: 2GiB").replace(
        "hosts: [s1, s1, s2, s2]", "ranks: 6\n    placement: {slots: 3}")
        + "timeouts: {transfer: 1s}\n")
    with pytest.raises(SpecError) as err:
        prepare(path)
    got = {tuple(i.key_path): i.message for i in err.value.issues}
    assert set(got) == {("workloads", 0, "size"), ("workloads", 0, "placement")}
    assert "cannot end within timeouts.transfer (1 s)" in got[("workloads", 0, "size")]
    assert "shrink the size" in got[("workloads", 0, "size")]
    assert "host s1 takes 2 ranks" in got[("workloads", 0, "placement")]


def test_a_kind_without_a_size_key_is_told_to_make_its_transfers_smaller(tmp_path):
    # websearch flows (sizes / 16) reach ~1.9 MB: more than 100 Mbit/s carries in 50 ms
    path = tmp_path / "exp.yaml"
    text = (ROOT / "examples" / "background.yaml").read_text()
    path.write_text(text + "timeouts: {transfer: 50ms}\n")
    with pytest.raises(SpecError) as err:
        prepare(path)
    got = {tuple(i.key_path): i.message for i in err.value.issues}
    assert "make its transfers smaller or raise" in got[("workloads", 0)]  # background
    assert "shrink the size or raise" in got[("workloads", 1, "size")]  # the all-reduce


DUAL_NIC = """\
name: dualnic
timeouts: {transfer: 1s}
topology:
  inline:
    name: dualnic
    nodes:
      a: {kind: host, ranks_per_host: 2}
      b: {kind: host}
      r1: {kind: router}
      r2: {kind: router}
    profiles: {fast: {rate: 1Gbit}}
    defaults: {link: {profile: fast}}
    links:
      - {endpoints: [a, r1], a_to_b: {rate: UPLINK}}
      - {endpoints: [a, r2]}
      - {endpoints: [b, r1]}
      - {endpoints: [r1, r2]}
workloads:
  - kind: collective
    op: all_reduce
    algorithm: ring
    size: 6MiB
    hosts: [a, a, b]
"""


def test_a_nic_with_its_own_table_counts_as_a_path(tmp_path):
    # a's main table reaches b over its slow eth0 uplink (a-r1-b); rank 1, bound to eth1,
    # sends its 2 MiB ring chunks to b with eth1's table (a-r2-r1-b, 1 Gbit/s) and rank 0
    # sends only to rank 1 on its own host: nothing of a's crosses the 8 Mbit/s direction
    path = tmp_path / "exp.yaml"
    path.write_text(DUAL_NIC.replace("UPLINK", "8Mbit"))
    prep = prepare(path)
    assert prep.plan.node("a").source_routes  # the per-NIC tables this depends on
    # the same lab with both of a's uplinks slow cannot carry a chunk in 1 s: refused
    path.write_text(DUAL_NIC.replace("UPLINK", "8Mbit").replace(
        "- {endpoints: [a, r2]}", "- {endpoints: [a, r2], a_to_b: {rate: 8Mbit}}"))
    issue = _refusal(path)
    assert "from a to b cannot end within timeouts.transfer (1 s)" in issue.message


def test_a_slow_edge_is_checked_in_a_lab_with_faster_links(tmp_path):
    # h1's port is 8 Mbit/s, the others 1 Gbit/s: 2 MiB to h1 cannot end in 1 s although the
    # lab's fastest links would carry it (the bound is per path, not per lab)
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: edge\ntimeouts: {transfer: 1s}\n"
        "topology:\n  inline:\n    name: edge\n"
        "    nodes: {s1: {kind: switch}, h1: {kind: host}, h2: {kind: host}, h3: {kind: host}}\n"
        "    profiles: {fast: {rate: 1Gbit}, slow: {rate: 8Mbit}}\n"
        "    links:\n      - {endpoints: [h1, s1], profile: slow}\n"
        "      - {endpoints: [h2, s1], profile: fast}\n"
        "      - {endpoints: [h3, s1], profile: fast}\n"
        "workloads:\n" + _incast("2MiB"))
    issue = _refusal(path)
    assert "to h1 cannot end within timeouts.transfer (1 s)" in issue.message
    assert "narrowest rate on its path is 8mbit" in issue.message
