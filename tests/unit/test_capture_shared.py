"""The shared capturer's pure parts: ring geometry, the pcap files it writes (read back by
the project's pcap reader), how interfaces are shared among capturers, and fidelity.json's
capture completeness."""

from __future__ import annotations

import json
import struct

import pytest

from analysis.pcap import open_capture
from orchestration.fidelity.run import capture_completeness
from testbed.capture.ring import PCAP_NS_MAGIC, _Writer, ring_geometry
from testbed.capture.shared import capturer_count


@pytest.mark.parametrize(("ring_kib", "snaplen", "block", "blocks"), [
    (2048, 128, 16384, 128), (32768, 128, 16384, 2048), (256, 128, 16384, 16),
    (2048, 2048, 16384, 128), (2048, 4096, 512 * 1024, 4), (256, 9000, 128 * 1024, 2),
    (2048, 262144, 512 * 1024, 4), (512, 262144, 256 * 1024, 2)])
def test_ring_geometry(ring_kib, snaplen, block, blocks):
    assert ring_geometry(ring_kib, snaplen) == (block, blocks)


def _frame(i: int) -> bytes:
    return bytes(range(14)) + struct.pack("=I", i) + b"\0" * 42


def test_writer_rotates_like_tcpdump_and_the_reader_reads_every_record(tmp_path):
    w = _Writer(tmp_path / "s1__eth0.pcap", limit=1000, files=3, snaplen=96)
    w.next_file()
    for start in range(0, 60, 7):  # blocks of up to 7 packets, as a ring hands them over
        frames = [_frame(i) for i in range(start, min(60, start + 7))]
        records = [struct.pack("=IIII", 100 + i, 5, len(f), 1500) + f
                   for i, f in zip(range(start, start + 7), frames, strict=False)]
        w.write(records, [len(r) for r in records])
    w.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    # 60 records of 76 bytes: a file closes once it is over 1000 bytes (13 records), the ring
    # keeps the newest 3 of the 5 files written
    assert names == ["s1__eth0.pcap2", "s1__eth0.pcap3", "s1__eth0.pcap4"]
    got = []
    for name in names:
        path = tmp_path / name
        assert struct.unpack_from("=I", path.read_bytes())[0] == PCAP_NS_MAGIC
        assert path.stat().st_size <= 1000 + 76
        cap = open_capture(path)
        got += [f for f in cap.frames()]
    assert len(got) == 60 - 2 * 13


def test_capturers_one_per_cpu_never_more_than_interfaces():
    assert capturer_count(1, cpus=8) == 1
    assert capturer_count(64, cpus=2) == 2
    assert capturer_count(3, cpus=8) == 3


def test_capture_completeness(tmp_path):
    assert capture_completeness(tmp_path) is None
    (tmp_path / "captures").mkdir()
    index = {"snaplen": 128, "engine": "shared", "interfaces": [
        {"node": "s1", "ifname": "eth0", "packets_captured": 10, "packets_dropped_by_kernel": 0},
        {"node": "s1", "ifname": "eth1", "packets_captured": 7, "packets_dropped_by_kernel": 3}]}
    (tmp_path / "captures" / "index.json").write_text(json.dumps(index))
    assert capture_completeness(tmp_path) == {
        "engine": "shared", "packets_captured": 17, "packets_dropped_by_kernel": 3,
        "complete": False, "interfaces_with_drops": ["s1:eth1"]}
    index["interfaces"][1]["packets_dropped_by_kernel"] = None  # a tcpdump that was killed
    (tmp_path / "captures" / "index.json").write_text(json.dumps(index))
    assert capture_completeness(tmp_path)["complete"] is None


def test_rings_share_the_budget_down_to_256_kib():
    from testbed.capture.shared import ring_kib

    assert ring_kib(3) == 32768  # as tcpdump's -B
    assert ring_kib(256) == 1024  # tcpdump would take 2 MiB each: 512 MiB in all
    assert ring_kib(4096) == 256
    assert ring_kib(1024) * 1024 <= 256 * 1024
