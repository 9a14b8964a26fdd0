"""Per-flow results as plain dicts: FCT, goodput, retransmissions, RTT.

Definitions (time is where the capture was taken: see :mod:`analysis.tcpflows`):

* ``start_s``: the first SYN without ACK; without one (capture began mid-connection), the
  connection's first packet, and ``syn_seen`` is false.
* ``fct_s`` = end - start, with end = the first ACK that covers the last payload byte of
  every direction that sent payload (``fct_end = "ack"``). If some payload is never acked in
  the capture, end = the FIN of every payload-sending direction (``"fin"``), else the last
  payload packet (``"last_data"``). A connection without payload has no FCT (None).
* ``goodput_bps`` = 8 x distinct payload bytes (both directions, retransmissions counted
  once) / ``fct_s``.

This FCT is not tshark's ``tcp.time_relative`` of the last frame nor the conversation
duration of ``tshark -z conv,tcp`` (first to last frame of the 5-tuple, FIN/ACK exchange and
any late RST included): it ends when the last payload byte was acknowledged, which is when
the receiver had all the data, so it leaves out the connection's teardown.

Counts are the capture point's (see :mod:`analysis.tcpflows`): ``retransmissions`` are the
segments this point saw twice, so a loss after the point shows up and a loss before it does
not (its retransmission looks like the first copy, with a ``capture_gaps`` entry where the
lost copy should have been); the sender's TCP_INFO ``total_retrans`` counts every resend of
the connection, including those of segments no capture saw. The two agree only for a
capture at the sender. ``ect0``/``ect1``/``ce``/``ece``/``cwr``: ECN per RFC 3168, counted
per segment (:mod:`analysis.tcpflows.connection`).
"""

from __future__ import annotations

import ipaddress

from analysis.tcpflows.connection import Connection
from analysis.tcpflows.direction import Direction
from analysis.tcpflows.table import UdpFlow


def _addr(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


def fct(conn: Connection) -> tuple[float | None, str | None, float]:
    """``(fct_s, how_it_ended, start_s)`` for ``conn`` (definitions in the module docstring)."""
    start = conn.syn_t if conn.syn_t is not None else conn.first_t
    senders = [d for d in (conn.a, conn.b) if d.data_end is not None]
    if not senders:
        return None, None, start
    if all(d.data_acked_t is not None for d in senders):
        return max(d.data_acked_t for d in senders) - start, "ack", start
    if all(d.fin_t is not None for d in senders):
        return max(d.fin_t for d in senders) - start, "fin", start
    return max(d.last_data_t for d in senders) - start, "last_data", start


def _direction(d: Direction) -> dict[str, object]:
    return {
        "packets": d.packets, "data_packets": d.data_packets,
        "payload_bytes": d.payload_bytes, "unique_payload_bytes": d.unique_payload_bytes(),
        "retransmissions": d.retransmissions, "fast_retransmissions": d.fast_retransmissions,
        "rto_retransmissions": d.rto_retransmissions,
        "spurious_retransmissions": d.spurious_retransmissions,
        "retransmitted_bytes": d.retransmitted_bytes, "out_of_order": d.out_of_order,
        "dup_acks": d.dup_acks, "zero_windows": d.zero_windows, "sack_packets": d.sack_packets,
        "duplicate_captures": d.duplicates, "fin_retransmissions": d.fin_retransmissions,
        "capture_gaps": d.capture_gaps, "gap_bytes": d.gap_bytes(),
        "ect0": d.ect0, "ect1": d.ect1, "ce": d.ce, "ece": d.ece, "cwr": d.cwr,
        "syn": d.syn, "fin": d.fin_t is not None, "rst": d.rst,
        "mss": d.mss, "wscale": d.wscale, "sack_permitted": d.sack_ok, "timestamps": d.ts_ok,
        "rtt_samples": d.rtt_n, "rtt_min_s": d.rtt_min, "rtt_max_s": d.rtt_max,
        "rtt_mean_s": d.rtt_sum / d.rtt_n if d.rtt_n else None,
    }


_SUMMED = ("packets", "payload_bytes", "retransmissions", "fast_retransmissions",
           "rto_retransmissions", "spurious_retransmissions", "fin_retransmissions",
           "retransmitted_bytes", "out_of_order", "dup_acks", "zero_windows",
           "duplicate_captures", "capture_gaps", "gap_bytes", "ect0", "ect1", "ce", "ece",
           "cwr")


def tcp_record(conn: Connection) -> dict[str, object]:
    """The JSON-ready record of one TCP connection (directions ``a_to_b`` and ``b_to_a``)."""
    src, dst, sport, dport = conn.key
    ab, ba = _direction(conn.a), _direction(conn.b)
    fct_s, how, start = fct(conn)
    unique = ab["unique_payload_bytes"] + ba["unique_payload_bytes"]
    rec: dict[str, object] = {
        "proto": "tcp", "src": _addr(src), "dst": _addr(dst), "sport": sport, "dport": dport,
        "start_s": start, "end_s": conn.last_t, "syn_seen": conn.syn_t is not None,
        "fct_s": fct_s, "fct_end": how, "wire_bytes": conn.wire_bytes,
        "goodput_bps": 8 * unique / fct_s if fct_s else None,
    }
    rec.update({k: ab[k] + ba[k] for k in _SUMMED})
    rec["payload_bytes_a_to_b"], rec["payload_bytes_b_to_a"] = ab["payload_bytes"], ba[
        "payload_bytes"]
    rec.update(_rtt(conn))
    rec["a_to_b"], rec["b_to_a"] = ab, ba
    return rec


def _rtt(conn: Connection) -> dict[str, object]:
    n = conn.a.rtt_n + conn.b.rtt_n
    mins = [x for x in (conn.a.rtt_min, conn.b.rtt_min) if x is not None]
    maxs = [x for x in (conn.a.rtt_max, conn.b.rtt_max) if x is not None]
    return {"rtt_samples": n, "rtt_min_s": min(mins) if mins else None,
            "rtt_mean_s": (conn.a.rtt_sum + conn.b.rtt_sum) / n if n else None,
            "rtt_max_s": max(maxs) if maxs else None,
            "handshake_rtt_s": conn.first_rtt}


def udp_record(flow: UdpFlow) -> dict[str, object]:
    """The JSON-ready record of one UDP flow."""
    src, dst, sport, dport = flow.key
    return {
        "proto": "udp", "src": _addr(src), "dst": _addr(dst), "sport": sport, "dport": dport,
        "start_s": flow.first_t, "end_s": flow.last_t, "fct_s": None, "fct_end": None,
        "packets": sum(flow.packets), "payload_bytes": sum(flow.payload_bytes),
        "payload_bytes_a_to_b": flow.payload_bytes[0], "payload_bytes_b_to_a":
            flow.payload_bytes[1], "packets_a_to_b": flow.packets[0],
        "packets_b_to_a": flow.packets[1], "goodput_bps": None,
        "retransmissions": 0, "fast_retransmissions": 0, "rto_retransmissions": 0,
        "spurious_retransmissions": 0, "dup_acks": 0, "zero_windows": 0,
        "duplicate_captures": 0,  # not looked for in UDP (no sequence number to match)
    }
