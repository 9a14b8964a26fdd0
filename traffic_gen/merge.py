"""Turn the agents' half records of one phase into FlowRecords, CollectiveRecords,
BurstRecords and RankOpRecords (pure)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from models.records import (
    BurstRecord,
    CollectiveRecord,
    FlowRecord,
    RankOpRecord,
    RoundRecord,
    TcpInfo,
    UdpStats,
)

__all__ = ["merge_phase"]


def _flow(run_id: str, send: Mapping[str, Any], recv: Mapping[str, Any] | None) -> FlowRecord:
    r = recv or {}
    t_end = r.get("t_end")
    udp = None
    if send["proto"] == "udp":
        got = r.get("packets_received", 0)
        udp = UdpStats(send["packets_sent"], got, r.get("lost", send["packets_sent"] - got),
                       r.get("reordered", 0), send["size_bytes"])
    ident = send["id"]
    return FlowRecord(
        run_id=run_id, kind=send["proto"], src_node=send["src_node"],
        dst_node=send.get("dst_node", r.get("dst_node", "")), src_rank=send["src_rank"],
        dst_rank=send["dst_rank"], src_ip=send["src_ip"], dst_ip=send["dst_ip"],
        sport=send["sport"], dport=send["dport"], size_bytes=send["size_bytes"],
        t_start=send["t_start"], t_first_byte=r.get("t_first_byte"), t_end=t_end,
        fct_s=(t_end - send["t_start"]) if t_end is not None else None,
        iteration=send["iteration"], op_index=send["op_index"], step=send["step"],
        collective_id=ident if send["op_kind"] == "collective" else None,
        burst_id=ident if send["op_kind"] == "burst" else None,
        tcp=_tcp(send), udp=udp, background=bool(send.get("background", False)),
        send_cpu_s=send.get("cpu_s"), recv_cpu_s=r.get("cpu_s"),
        tls_cipher=send.get("tls_cipher"), tls_handshake_s=send.get("tls_handshake_s"))


def _tcp(send: Mapping[str, Any]) -> TcpInfo | None:
    return TcpInfo.from_dict(send["tcp"]) if send.get("tcp") else None


def _collectives(run_id: str, ops: list[Mapping[str, Any]],
                 meta: Mapping[str, Mapping[str, Any]]) -> list[CollectiveRecord]:
    by_id: dict[str, dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for o in ops:
        if o["kind"] == "collective":
            by_id[f"c{o['iteration']}.{o['op_index']}"][o["rank"]] = o
    out = []
    for cid, per_rank in by_id.items():
        m = meta[cid]
        ranks = [r for r in m["ranks"] if r in per_rank]
        out.append(CollectiveRecord.build(
            run_id=run_id, collective_id=cid, op=m["op"], algorithm=m["algorithm"],
            group=m["group"], group_kind=m["group_kind"], ranks=ranks,
            hosts=tuple(m["hosts"][m["ranks"].index(r)] for r in ranks),
            size_bytes=m["size_bytes"], iteration=m["iteration"], op_index=m["op_index"],
            rank_t_start=[per_rank[r]["t_start"] for r in ranks],
            rank_t_end=[per_rank[r]["t_end"] for r in ranks],
            chunk_bytes=m["chunk_bytes"], label=m["label"]))
    return out


def _bursts(run_id: str, sends: list[Mapping[str, Any]], planned: float,
            meta: Mapping[str, Mapping[str, Any]]) -> list[BurstRecord]:
    by_id: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for s in sends:
        if s["op_kind"] == "burst" and s["conn"] == 0:  # a flow's first connection
            by_id[s["id"]].append(s)
    out = []
    for bid, flows in by_id.items():
        flows.sort(key=lambda s: (s["src_rank"], s["dst_rank"]))
        m = meta[bid]
        out.append(BurstRecord.build(
            run_id=run_id, burst_id=bid, label=m["label"], iteration=m["iteration"],
            op_index=m["op_index"], planned_start=planned,
            sender_ranks=[s["src_rank"] for s in flows],
            actual_start=[s["t_start"] for s in flows]))
    return out


def merge_phase(run_id: str, halves: list[Mapping[str, Any]], t0: float,
                collectives: Mapping[str, Mapping[str, Any]],
                bursts: Mapping[str, Mapping[str, Any]]) -> list[object]:
    """All records of one phase started at host-clock ``t0`` from the agents' halves. A send
    half without its receive half (a failed phase) gives a FlowRecord with t_end None."""
    sends = [h for h in halves if h["half"] == "send"]
    recvs = {h["key"]: h for h in halves if h["half"] == "recv"}
    ops = [h for h in halves if h["half"] == "rank_op"]
    # a zero-byte step (a collective smaller than its group splits into empty chunks) moves
    # nothing over the network: it orders the ranks but is no flow, and has no FCT
    # nor is a timed op's token or control message (``flow`` false: tiny, thousands)
    out: list[object] = [_flow(run_id, s, recvs.get(s["key"])) for s in sends
                         if s["size_bytes"] > 0 and s.get("flow", True)]
    out += _collectives(run_id, ops, collectives)
    out += _bursts(run_id, sends, t0, bursts)
    out += [RankOpRecord(run_id=run_id, **{k: o[k] for k in (
        "rank", "node", "iteration", "op_index", "kind", "label", "t_start", "t_end",
        "slowdown")}) for o in ops]
    out += [_round(run_id, h) for h in halves if h["half"] == "round"]
    return out


def _round(run_id: str, h: Mapping[str, Any]) -> RoundRecord:
    """A gather root's round half as a RoundRecord (models/records.py)."""
    return RoundRecord(
        run_id=run_id, round=h["round"], t_start=h["t_start"], t_end=h["t_end"],
        round_time_s=h["t_end"] - h["t_start"], clients_selected=len(h["selected_hosts"]),
        clients_finished=len(h["finished_hosts"]), clients_dropped=tuple(h["dropped_hosts"]),
        deadline_s=h["deadline_s"], bytes_down=h["bytes_down"], bytes_up=h["bytes_up"],
        aggregator=h["aggregator"], level=h["level"], iteration=h["iteration"],
        op_index=h["op_index"], quorum=h["quorum"],
        selected_hosts=tuple(h["selected_hosts"]), finished_hosts=tuple(h["finished_hosts"]),
        drop_reasons=dict(h["drop_reasons"]), label=h["label"])
