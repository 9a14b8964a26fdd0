"""Link layers, tags, IP options, IPv6 extension headers, fragments and non-flow frames, on
both engines (classic pcap, built with scapy)."""

from __future__ import annotations

import struct

import pytest
from pcap_synth import write_pcap
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from analysis.tcpflows import analyse_capture

ENGINES = ["reference", "compiled"]
A4, B4, A6, B6 = "198.18.0.1", "198.18.0.2", "2001:db8::1", "2001:db8::2"


def _eth(p):
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / p


def _mixed_frames():
    tcp = TCP(sport=1000, dport=2000, flags="PA", seq=1, ack=1) / Raw(b"a" * 100)
    # three IPv4 packets with distinct IP IDs: with one ID they would be one packet captured
    # three times (duplicate captures, counted once: test_pcap_hardening)
    return [
        _eth(IP(src=A4, dst=B4, id=1) / tcp),                             # plain
        _eth(Dot1AD(vlan=10) / Dot1Q(vlan=20) / IP(src=A4, dst=B4, id=2) / tcp),  # QinQ
        _eth(IP(src=A4, dst=B4, id=3, options=b"\x01" * 8) / tcp),        # IPv4 options
        _eth(IPv6(src=A6, dst=B6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / tcp),
        _eth(IPv6(src=A6, dst=B6) / IPv6ExtHdrFragment(offset=0, m=0) / UDP(sport=5, dport=6)
             / Raw(b"u" * 40)),                                           # atomic fragment
        _eth(IP(src=A4, dst=B4, flags="MF") / UDP(sport=5, dport=6) / Raw(b"f" * 40)),
        _eth(IP(src=A4, dst=B4, frag=100) / Raw(b"f" * 40)),
        _eth(IPv6(src=A6, dst=B6) / IPv6ExtHdrFragment(offset=10, m=1) / Raw(b"f" * 40)),
        _eth(IP(src=A4, dst=B4) / ICMP()),
        _eth(ARP()),
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_mixed_ethernet_frames(tmp_path, engine):
    res = analyse_capture(write_pcap(tmp_path / "m.pcap", _mixed_frames()), engine=engine)
    assert res.packets == 10
    tcp4, tcp6, udp6 = res.flows
    assert tcp4["packets"] == 3 and tcp4["payload_bytes"] == 300  # QinQ and options included
    assert tcp6["src"] == A6 and tcp6["payload_bytes"] == 100
    assert udp6["proto"] == "udp" and udp6["payload_bytes"] == 40
    assert res.decode.to_dict() == {"non_ip": 1, "unknown_link": 0, "ip_fragments": 3,
                                    "other_l4": 1, "truncated_headers": 0}


def _ip_frames():
    return [IP(src=A4, dst=B4) / TCP(sport=1, dport=2, flags="S"),
            IPv6(src=A6, dst=B6) / UDP(sport=3, dport=4) / Raw(b"x" * 10)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("linktype", [101, 12, 14, 228, 229])
def test_raw_ip_link_types(tmp_path, engine, linktype):
    path = tmp_path / "raw.pcap"
    write_pcap(path, _ip_frames(), linktype=linktype)
    res = analyse_capture(path, engine=engine)
    assert [(f["proto"], f["payload_bytes"]) for f in res.flows] == [("tcp", 0), ("udp", 10)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("order", ["<", ">"])
def test_bsd_loopback_in_either_byte_order(tmp_path, engine, order):
    frames = [struct.pack(order + "I", fam) + bytes(p)
              for fam, p in zip((2, 30), _ip_frames(), strict=True)]
    path = tmp_path / "null.pcap"  # by hand: scapy takes link type 0 for "guess"
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 0))
        for data in frames:
            fh.write(struct.pack("<IIII", 1_700_000_000, 0, len(data), len(data)) + data)
    res = analyse_capture(path, engine=engine)
    assert [f["proto"] for f in res.flows] == ["tcp", "udp"]


@pytest.mark.parametrize("engine", ENGINES)
def test_big_endian_file_and_headers_only_snaplen(tmp_path, engine):
    frames = []
    for ip_id in (1, 2, 3):  # three packets, not one captured three times
        f = _mixed_frames()[0]
        f[IP].id = ip_id
        frames.append(f)
    path = tmp_path / "be.pcap"
    with open(path, "wb") as fh:
        fh.write(struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 64, 1))
        for i, f in enumerate(frames):
            data = bytes(f)
            fh.write(struct.pack(">IIII", 1_700_000_000, i * 1000, 64, len(data)) + data[:64])
    res = analyse_capture(path, engine=engine)
    (flow,) = res.flows
    assert flow["payload_bytes"] == 300  # from the IP length: 100 B each, 10 B captured
    assert flow["end_s"] == pytest.approx(0.002, abs=1e-9)


@pytest.mark.parametrize("engine", ENGINES)
def test_unknown_link_type_is_counted_not_fatal(tmp_path, engine):
    path = write_pcap(tmp_path / "u.pcap", _ip_frames(), linktype=147)  # USER0
    res = analyse_capture(path, engine=engine)
    assert res.flows == [] and res.decode.unknown_link == 2


def test_many_flows_grow_the_compiled_tables_and_match_the_reference(tmp_path):
    """300 TCP connections and 300 UDP flows: the kernel's arrays and flow table (64 flows at
    first) grow and rehash several times; every record must stay identical."""
    frames = []
    for i in range(300):
        a, b = f"198.18.{i // 200}.{i % 200 + 1}", "198.19.0.1"
        frames.append(_eth(IP(src=a, dst=b) / TCP(sport=10000 + i, dport=80, flags="S",
                                                 seq=i)))
        frames.append(_eth(IP(src=b, dst=a) / TCP(sport=80, dport=10000 + i, flags="SA",
                                                 seq=7, ack=i + 1)))
        frames.append(_eth(IP(src=a, dst=b) / UDP(sport=i + 1, dport=53) / Raw(b"q" * i)))
    path = write_pcap(tmp_path / "many.pcap", frames)
    ref = analyse_capture(path, engine="reference")
    assert len(ref.flows) == 600
    assert analyse_capture(path, engine="compiled").to_dict() == ref.to_dict()


def test_warm_compiles_the_kernel_on_a_valid_capture(monkeypatch):
    """``make setup`` runs warm(); its hand-made frame must be a real TCP flow."""
    from analysis.tcpflows import analyse, warm_cache
    seen = []
    real = analyse.analyse_capture
    monkeypatch.setattr(analyse, "analyse_capture",
                        lambda p, engine: seen.append(real(p, engine=engine)) or seen[-1])
    warm_cache.warm()
    assert [r.format for r in seen] == ["pcap", "pcapng"]
    for res in seen:
        assert res.packets == 1 and res.flows[0]["proto"] == "tcp" and res.warnings == []
