"""ECN marking at a queue threshold, without root: the shaping keys and their refusals, the
plan's round trip, the byte sizes the marker gets, the assembled program's shape, and the
per-transfer CE count of the agents' TCP_INFO records."""

from __future__ import annotations

import struct

import pytest

from models.plan import plan_from_dict, plan_to_dict
from models.shaping import Shaping
from models.units import BufferSize, UnitError
from testbed.tc.ecn_marker import bytes_of, program
from topologies.shaping import to_shaping
from traffic_gen.tcpinfo import TCP_INFO_FIELDS, tcp_info_delta


def test_an_ecn_threshold_reads_as_a_buffer_size_and_needs_ecn_a_fifo_and_a_rate():
    s = to_shaping({"rate": "20Mbit", "ecn": True, "ecn_threshold": "20p"})
    assert s.ecn_threshold == BufferSize(packets=20)
    assert to_shaping({"rate": "1Gbit", "ecn": True, "ecn_threshold": "30KiB"}
                      ).ecn_threshold == BufferSize(size_bytes=30 * 1024)
    with pytest.raises(UnitError, match="needs ecn: true"):
        Shaping(rate_bps=10**7, ecn_threshold=BufferSize(packets=20))
    with pytest.raises(UnitError, match="marks on a fifo buffer; aqm red"):
        Shaping(rate_bps=10**7, aqm="red", ecn=True, ecn_threshold=BufferSize(packets=20))
    with pytest.raises(UnitError, match="needs a rate"):
        Shaping(ecn=True, ecn_threshold=BufferSize(packets=20))
    with pytest.raises(UnitError, match="or an ecn_threshold"):
        Shaping(rate_bps=10**7, ecn=True)


def test_a_plan_with_an_ecn_threshold_survives_plan_json():
    from ipaddress import ip_interface

    from models.plan import Endpoint, LabPlan, LinkPlan, NodePlan
    shaping = Shaping(rate_bps=10**7, ecn=True, ecn_threshold=BufferSize(size_bytes=30000))
    link = LinkPlan("h1-h2", Endpoint("h1", "eth0", ip_interface("198.18.0.1/30")),
                    Endpoint("h2", "eth0", ip_interface("198.18.0.2/30")), a_to_b=shaping)
    plan = LabPlan("p", nodes=(NodePlan("h1", "host"), NodePlan("h2", "host")), links=(link,))
    assert plan_from_dict(plan_to_dict(plan)).links[0].a_to_b == shaping


def test_the_marker_counts_packets_as_full_frames_and_no_buffer_as_1000_packets():
    assert bytes_of(BufferSize(packets=20), 1500) == 20 * 1514
    assert bytes_of(BufferSize(size_bytes=30000), 1500) == 30000
    assert bytes_of(None, 9000) == 1000 * 9014


def test_the_program_is_whole_instructions_whose_jumps_land_inside_it():
    code = program(7)
    assert len(code) % 8 == 0
    insns = [struct.unpack("<BBhi", code[i:i + 8]) for i in range(0, len(code), 8)]
    assert insns[-1][0] == 0x95  # exit
    for pc, (op, _regs, off, _imm) in enumerate(insns):
        if op & 0x07 == 0x05 and op not in (0x85, 0x95):  # a jump
            assert 0 <= pc + 1 + off < len(insns)
    lds = [i for i, (op, regs, _, imm) in enumerate(insns) if op == 0x18]
    assert len(lds) == 1 and insns[lds[0]][1] >> 4 == 1 and insns[lds[0]][3] == 7  # the map


def test_a_transfer_record_holds_its_ce_marks_and_whether_ecn_was_negotiated():
    before = dict.fromkeys(TCP_INFO_FIELDS, 0) | {"delivered_ce": 5, "options": 8}
    after = before | {"delivered_ce": 12, "bytes_sent": 100}
    got = tcp_info_delta(before, after, "cubic", 100)
    assert (got.delivered_ce, got.ecn) == (7, True)
    assert tcp_info_delta(before, after | {"options": 7}).ecn is False
    old = {k: v for k, v in got.to_dict().items() if k not in ("delivered_ce", "ecn")}
    from models.records import TcpInfo
    assert (TcpInfo.from_dict(old).delivered_ce, TcpInfo.from_dict(old).ecn) == (0, None)


def test_scale_divides_the_ecn_threshold_like_the_buffer():
    from topologies.scaling import scale_changes
    got = scale_changes({"ecn_threshold": BufferSize(packets=20),
                         "buffer": BufferSize(size_bytes=300_000)}, 10, 1500)
    assert got == {"ecn_threshold": BufferSize(packets=2), "buffer": BufferSize(size_bytes=30_000)}
    assert scale_changes({"ecn_threshold": BufferSize(size_bytes=3000)}, 10, 1500) == {
        "ecn_threshold": BufferSize(size_bytes=1514)}  # never below one frame
