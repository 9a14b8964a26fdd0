"""RequestRecords of one phase from the agents' half records of its inference Timed ops
(pure). Messages are found by their tags (models.requests.tag)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from models.records import percentile
from models.requests import RequestRecord, parse_tag

__all__ = ["request_records"]

Half = Mapping[str, Any]


def _by_request(halves: list[Half], ident: str) -> dict[int, dict[str, list[Half]]]:
    out: dict[int, dict[str, list[Half]]] = defaultdict(lambda: defaultdict(list))
    for h in halves:
        if h.get("id") != ident or h["half"] not in ("send", "recv"):
            continue
        parsed = parse_tag(h.get("step", ""))
        if parsed is not None:
            out[parsed[0]][f"{h['half']}:{parsed[1]}"].append(h)
    return out


def _tokens(parts: Mapping[str, list[Half]]) -> list[float]:
    got = sorted(parts.get("recv:tok", []), key=lambda h: parse_tag(h["step"])[2] or 0)
    return [h["t_end"] for h in got]


def _record(run_id: str, req: Mapping[str, Any], parts: Mapping[str, list[Half]]
            ) -> RequestRecord:
    prompt = parts.get("send:prompt", [])
    t_sent = prompt[0]["t_start"] if prompt else None
    toks = _tokens(parts)
    gaps = [b - a for a, b in zip(toks, toks[1:], strict=False)]
    boots = parts.get("recv:boot", [])
    fetches = parts.get("send:fetch", [])
    boot_bytes = sum(h["size_bytes"] for h in boots)
    boot_s = None
    if boots and fetches:
        boot_s = max(h["t_end"] for h in boots) - min(h["t_start"] for h in fetches)
    first = toks[0] if toks else None
    return RequestRecord(
        run_id=run_id, request_id=req["request_id"], session=req["session"],
        client=req["client"], server=req["server"], t_sent=t_sent, t_first_token=first,
        t_end=toks[-1] if toks else None,
        ttft_s=first - t_sent if first is not None and t_sent is not None else None,
        tokens=len(toks), per_token_latency_s_mean=sum(gaps) / len(gaps) if gaps else None,
        per_token_latency_s_p99=percentile(gaps, 99) if gaps else None,
        prompt_bytes=sum(h["size_bytes"] for h in prompt),
        response_bytes=sum(h["size_bytes"] for h in parts.get("recv:tok", [])),
        bootstrap=bool(req["bootstrap"]), bootstrap_bytes=boot_bytes, bootstrap_s=boot_s,
        policy=req["policy"], why=req.get("why", ""),
        session_length=req.get("session_length"), session_index=req.get("session_index"),
        server_contexts=req.get("server_contexts"),
        server_memory_bytes=req.get("server_memory_bytes"),
        evicted=tuple(req.get("evicted") or ()))


def request_records(run_id: str, halves: list[Half],
                    timed: Mapping[str, Mapping[str, Any]]) -> list[RequestRecord]:
    """One RequestRecord per request of every inference Timed op (``timed``: id -> {"kind",
    "info": {"requests": [...]}} from the compiled Program) whose halves are in ``halves``.
    A request with missing halves (a failed phase) has None times."""
    out = []
    for ident, meta in timed.items():
        if meta.get("kind") != "inference":
            continue
        parts = _by_request(halves, ident)
        if not parts:
            continue
        for n, req in enumerate(meta["info"]["requests"]):
            out.append(_record(run_id, req, parts.get(n, {})))
    return out
