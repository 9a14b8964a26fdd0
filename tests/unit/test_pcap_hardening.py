"""Captures that would fool the analysis: an IPv4 total length beyond the wire length adds
no payload that was never on the wire (both engines)."""

from __future__ import annotations

import pytest
from pcap_synth import MSS, fast_retransmission, write_pcap
from scapy.layers.inet import IP
from scapy.packet import Raw

from analysis.tcpflows import analyse_capture


@pytest.mark.parametrize("engine", ["reference", "compiled"])
def test_ip_length_beyond_the_wire_is_capped(tmp_path, engine):
    conv = fast_retransmission()
    for p in conv.packets:
        if Raw in p:
            p[IP].len = len(p[IP]) + 1000  # claims 1000 bytes the frame does not carry
    (flow,) = analyse_capture(write_pcap(tmp_path / "long.pcap", conv.packets),
                              engine=engine).flows
    # as without the lie: 5 segments + 1 retransmission (test_pcap_synthetic)
    assert flow["payload_bytes_a_to_b"] == 6 * MSS
    assert flow["a_to_b"]["unique_payload_bytes"] == 5 * MSS
