"""bench/delay_accuracy_vm.py's matching: iperf3 sequence numbers out of captured frames,
per-datagram added delay minus configured, and the percentiles printed (no timing measured)."""

import importlib.util
import math
import struct
from decimal import Decimal
from pathlib import Path

from pcap_synth import T0, write_pcap
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

_PATH = Path(__file__).resolve().parents[2] / "bench" / "delay_accuracy_vm.py"
_spec = importlib.util.spec_from_file_location("delay_accuracy_vm", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _datagram(seq, t, dport=5201, size=1472, options=False):
    payload = struct.pack("!III", 1764500000, 0, seq) + b"x" * (size - 12)
    ip = IP(src="10.233.1.1", dst="10.233.2.2",
            options=[b"\x01\x01\x01\x00"] if options else [])
    p = Ether() / ip / UDP(sport=40000, dport=dport) / Raw(payload)
    p.time = T0 + Decimal(str(t))
    return p


def _small(t):
    p = Ether() / IP(src="10.233.1.1", dst="10.233.2.2") / UDP(dport=5201) / Raw(b"9876")
    p.time = T0 + Decimal(str(t))
    return p


def _tcp(t):
    p = Ether() / IP() / TCP(dport=5201) / Raw(b"y" * 1400)
    p.time = T0 + Decimal(str(t))
    return p


def test_sequence_numbers_and_times_from_a_headers_only_capture(tmp_path):
    pkts = [_small(0.0), _tcp(0.0001), _datagram(1, 0.001), _datagram(2, 0.002, options=True),
            _datagram(3, 0.003, dport=5202), _datagram(4, 0.004, size=500), _datagram(2, 0.005)]
    path = write_pcap(tmp_path / "a.pcap", pkts, nano=True)
    # the capture keeps 96 bytes per packet, as the bench's tcpdump does
    raw = path.read_bytes()
    cut = bytearray(raw[:24])
    pos = 24
    while pos < len(raw):
        sec, frac, caplen, wire = struct.unpack_from("<IIII", raw, pos)
        keep = min(caplen, 96)
        cut += struct.pack("<IIII", sec, frac, keep, wire) + raw[pos + 16:pos + 16 + keep]
        pos += 16 + caplen
    path.write_bytes(bytes(cut))
    times, dups = bench.datagram_times_ns([path])
    base = int(T0) * 10**9
    assert times == {1: base + 1_000_000, 2: base + 2_000_000}
    assert dups == 1  # the second copy of 2 is counted, not taken


def test_errors_are_per_matched_datagram_minus_the_configured_delay():
    sent = {1: 1_000, 2: 2_000, 3: 3_000}
    got = {1: 10_001_000 + 5_000, 3: 10_003_000 + 250_000, 4: 1}
    assert bench.added_errors_us(sent, got, 0.010) == [5.0, 250.0]


def test_summary_percentiles_and_empty():
    s = bench.summary_us([float(x) for x in range(1, 101)])
    assert (s["n"], s["early"], s["min_us"], s["p50_us"], s["p99_us"], s["max_us"]) == \
        (100, 0, 1.0, 50.5, 99.0, 100.0)
    assert bench.summary_us([-2.0, -0.5, 0.0, 3.0])["early"] == 2  # released before the delay
    empty = bench.summary_us([])
    assert empty["n"] == 0 and empty["early"] == 0 and math.isnan(empty["p99_us"])
