"""The shared engine's compact half records expand to the per-host agents' dicts: the
controller's merge turns them into the same FlowRecord (key, sizes, ranks, TCP_INFO delta)."""

from __future__ import annotations

import dataclasses

from models.records import FlowRecord, TcpInfo
from traffic_gen.engine import TCP_KEYS, entry_key, half_record
from traffic_gen.merge import merge_phase


def test_tcp_keys_are_the_tcp_info_fields():
    assert TCP_KEYS == tuple(f.name for f in dataclasses.fields(TcpInfo))


def test_compact_halves_merge_into_a_flow_record():
    opinfo = (1, 0, "c1.0", "collective", "tcp", None)
    entry = (3, 5243, (2,), (opinfo, "rs3", 4, 5, 0, 3), None, False)
    send_info = {"src_node": "h4", "dst_node": "h5", "src_ip": "198.18.0.4", "sport": 40000,
                 "dst_ip": "198.18.0.5", "dport": 5001}
    recv_info = {"dst_node": "h5", "dst_ip": "198.18.0.5", "dport": 5001,
                 "src_ip": "198.18.0.4", "sport": 40000}
    tcp = (2, 2896, 8139, 0, 0.007, 0.001, 10, 9_000_000, "cubic", 1, 0.0001, 0, 3, True)
    send = half_record(("s", entry, 10.0, 10.1, 1e-4, send_info, tcp, True, 10.2, 5243))
    recv = half_record(("r", entry, 10.05, 10.15, 2e-4, recv_info))
    assert send["key"] == recv["key"] == entry_key(entry) == "1/0/4/5/tcp/3/0"
    (flow,) = [r for r in merge_phase("run", [send, recv], 10.0, {}, {})
               if isinstance(r, FlowRecord)]
    assert (flow.src_rank, flow.dst_rank, flow.size_bytes, flow.step) == (4, 5, 5243, "rs3")
    assert flow.iteration == 1 and flow.collective_id == "c1.0"
    assert flow.t_start == 10.0 and flow.t_end == 10.15 and flow.t_first_byte == 10.05
    assert flow.tcp is not None and flow.tcp.total_retrans == 2 and flow.tcp.dsack_dups == 1
    assert (flow.tcp.delivered_ce, flow.tcp.ecn) == (3, True)
    assert flow.send_cpu_s == 1e-4 and flow.recv_cpu_s == 2e-4
