"""capture:/counters: experiment keys and the pure parts of capture (no root, no network):
validation errors name file, key and line; interface selection; the tcpdump command."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import topologies
from models.errors import SpecError
from orchestration.observe.local import warn_incomplete
from orchestration.run.runner import prepare
from testbed.capture.points import CapturePoint, select_interfaces
from testbed.capture.tcpdump import CaptureConfig, kernel_buffer_kib, pcap_base, tcpdump_argv
from testbed.counters.loop import _quantile

ROOT = Path(__file__).resolve().parents[2]
BASE = ("name: t\n"
        "topology: {file: %s}\n"
        "workloads:\n  - kind: incast\n    receiver: rx\n    size: 64KiB\n"
        % (ROOT / "topologies/examples/incast.yaml"))


def refused(tmp_path: Path, extra: str) -> list[str]:
    path = tmp_path / "exp.yaml"
    path.write_text(BASE + extra)
    with pytest.raises(SpecError) as info:
        prepare(path)
    return [str(i) for i in info.value.issues]


def test_defaults_capture_the_bottleneck_and_sample_every_10ms(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(BASE)
    obs = prepare(path).observe
    assert [(p.node, p.ifname) for p in obs.points] == [("s1", "rx")] + [
        ("s1", f"eth{i}") for i in range(7)]
    assert obs.capture == CaptureConfig(128, 100 * 2**20, 4)
    assert obs.counters is not None and obs.counters.interval_s == 0.01 and obs.counters.tcp


def test_disabled_means_nothing_to_start(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(BASE + "capture: {enabled: false}\ncounters: {enabled: false}\n")
    obs = prepare(path).observe
    assert obs.points == () and obs.counters is None


@pytest.mark.parametrize(("extra", "where", "what"), [
    ("capture: {snaplen: 128, colour: red}\n", "capture.colour", "unknown key"),
    ("capture: {snaplen: 20}\n", "capture.snaplen", "64"),
    ("capture: {snaplen: '128'}\n", "capture.snaplen", "integer"),
    ("capture: {rotate_size: 100}\n", "capture.rotate_size", "no unit"),
    ("capture: {files: 0}\n", "capture.files", "1"),
    ("capture: {interfaces: busiest}\n", "capture.interfaces", "bottleneck"),
    ("capture: {enabled: yes please}\n", "capture.enabled", "bool"),
    ("counters: {interval: 10}\n", "counters.interval", "no unit"),
    ("counters: {interval: 100us}\n", "counters.interval", "1ms"),
    ("counters: {tcp: true, rate: 5}\n", "counters.rate", "unknown key"),
])
def test_bad_keys_are_refused_with_file_key_and_line(tmp_path, extra, where, what):
    issues = refused(tmp_path, extra)
    assert any("exp.yaml" in i and where in i and what in i for i in issues), issues
    assert any(":7" in i or "line 7" in i for i in issues), issues  # the key's line


def test_unknown_interfaces_are_named_with_what_the_node_has(tmp_path):
    issues = refused(tmp_path, "capture:\n  interfaces: [s1:rx, s1:eth9, nosuch:eth0, rx]\n")
    text = "\n".join(issues)
    assert "capture.interfaces[1]" in text and "node s1 has no interface 'eth9'" in text
    assert "eth0, eth1" in text  # lists what s1 has
    assert "capture.interfaces[2]" in text and "unknown node 'nosuch'" in text
    assert "capture.interfaces[3]" in text and "not node:ifname" in text
    assert "capture.interfaces[0]" not in text


def test_bottleneck_picks_dci_ends_and_rate_drops():
    plan = topologies.generate("multi_dc_leaf_spine")  # unshaped fabric, 100G DCI
    assert [(p.node, p.ifname) for p in select_interfaces(plan, "bottleneck")] == [
        ("dc1-b1", "dci-dc2-1"), ("dc2-b1", "dci-dc1-1")]
    # a 10G DCI behind a 100G fabric: also its rate drop; host ports: the fan-in points
    shaped = topologies.generate("multi_dc_leaf_spine", dci="campus-uplink",
                                 fabric="dc-fabric-100g", host_link="dc-fabric-100g")
    got = {(p.node, p.ifname) for p in select_interfaces(shaped, "bottleneck")}
    assert {("dc1-b1", "dci-dc2-1"), ("dc2-b1", "dci-dc1-1"), ("dc1-l1", "eth0")} <= got
    assert not any(node.startswith("dc1-s") for node, _ in got)  # 100G -> 100G: no drop
    assert len(select_interfaces(shaped, "all")) == 2 * len(shaped.links)


def test_unshaped_lab_falls_back_to_ports_toward_hosts():
    plan = topologies.generate("single_switch", hosts=3)
    assert [p.node for p in select_interfaces(plan, "bottleneck")] == ["s1"] * 3


def test_tcpdump_command_is_headers_only_packet_buffered_and_rotating():
    point = CapturePoint("s1", "rx", "rx-s1")
    argv = tcpdump_argv(point, Path("/r/captures") / pcap_base(point),
                        CaptureConfig(snaplen_bytes=96, rotate_size_bytes=2_500_000, files=3))
    assert argv[:5] == ["tcpdump", "-i", "rx", "-s", "96"]
    assert "-U" in argv and argv[argv.index("-w") + 1] == "/r/captures/s1__rx.pcap"
    assert argv[argv.index("-C") + 1] == "3" and argv[argv.index("-W") + 1] == "3"
    assert argv[argv.index("-Z") + 1] == "root"  # rotated files are opened after -Z
    assert argv[argv.index("-B") + 1] == "2048"  # libpcap's default ring unless told


def test_kernel_ring_shares_a_budget_between_2_and_32_mib():
    # a few interfaces get 32 MiB each (a small run's headers fit even if tcpdump stalls),
    # many share 256 MiB, never below libpcap's 2 MiB
    assert [kernel_buffer_kib(n) for n in (0, 1, 3, 8, 16, 128, 1000)] == [
        32768, 32768, 32768, 32768, 16384, 2048, 2048]


def test_interval_quantiles_are_nearest_rank():
    gaps = sorted([0.010] * 98 + [0.020, 0.100])
    assert _quantile(gaps, 0.5) == 0.010 and _quantile(gaps, 0.99) == 0.020
    assert _quantile([], 0.5) is None


def test_sampler_store_spills_chunks_and_reports_when_full(tmp_path, monkeypatch):
    import pandas as pd

    from testbed.counters import store
    monkeypatch.setattr(store, "CHUNK_ROWS", 10)
    s = store.Store(tmp_path, max_rows=25)
    row = (1.5, 1e-4, "s1", "rx", 1, 2, 3, 4, 5, 6)
    for _ in range(3):
        s.add("links", [row] * 8)
        assert len(s.tables["links"].rows) < 10  # written out once 10 are held
    assert not s.full()
    s.add("links", [row] * 8)
    assert s.full() and s.rows()["links"] == 32
    s.close()
    frame = pd.read_parquet(tmp_path / "links.parquet")
    assert len(frame) == 32 and frame["rx_bytes"].dtype == "int64"
    assert len(pd.read_parquet(tmp_path / "tcp.parquet")) == 0  # empty, with its columns
    assert list(pd.read_parquet(tmp_path / "qdisc.parquet").columns)[:4] == [
        "t_s", "t_err_s", "node", "ifname"]


def test_a_capture_with_kernel_drops_is_reported_as_incomplete(caplog):
    index = {"snaplen": 96, "interfaces": [
        {"node": "s1", "ifname": "eth0", "link": "h1-s1", "files": [], "packets_captured": 900,
         "packets_dropped_by_kernel": 1891, "kernel_buffer_kib": 2048},
        {"node": "s1", "ifname": "eth1", "link": "h2-s1", "files": [], "packets_captured": 900,
         "packets_dropped_by_kernel": 0, "kernel_buffer_kib": 2048}]}
    with caplog.at_level(logging.WARNING, logger="aitb.run"):
        warn_incomplete(index)
    assert len(caplog.records) == 1
    msg = caplog.records[0].getMessage()
    assert "capture incomplete" in msg and "s1:eth0 1891 (ring 2048 KiB)" in msg
    assert "eth1" not in msg
    caplog.clear()
    index["interfaces"][0]["packets_dropped_by_kernel"] = 0
    warn_incomplete(index)
    assert caplog.records == []
