"""Inference request records (pure data): one :class:`RequestRecord` per request served.

Field list shared with models/records.py. Times are absolute
seconds on the host clock, sizes bytes. The message tags that tie a Timed op's messages to
their request (:func:`tag`, :func:`parse_tag`) live here so that the workload generator and
the traffic generator's record builder agree on them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from models.records import SCHEMA_VERSION, _Record

__all__ = ["RequestRecord", "tag", "parse_tag", "PARTS"]

PARTS = ("prompt", "tok", "fetch", "boot")
_TAG = re.compile(r"^r(\d+):(prompt|tok|fetch|boot)(\d+)?(?:\.L(\d+))?$")


def tag(request: int, part: str, k: int | None = None, layer: int | None = None) -> str:
    """The tag of a request's message: ``r<request>:<part>[<k>][.L<layer>]``; ``part`` one
    of :data:`PARTS` (prompt; tok k = k-th token; fetch k = the server asks holder k;
    boot k = holder k's bootstrap shard, of delivery layer ``layer``)."""
    if part not in PARTS:
        raise ValueError(f"unknown request message part {part!r}; known: {', '.join(PARTS)}")
    return f"r{request}:{part}{'' if k is None else k}{'' if layer is None else f'.L{layer}'}"


def parse_tag(text: str) -> tuple[int, str, int | None, int | None] | None:
    """(request, part, k, layer) of a :func:`tag`, or None for another tag."""
    m = _TAG.match(text)
    if m is None:
        return None
    return (int(m[1]), m[2], None if m[3] is None else int(m[3]),
            None if m[4] is None else int(m[4]))


@dataclass(frozen=True, slots=True)
class RequestRecord(_Record):
    """One inference request. ``t_sent``: the client began sending the prompt;
    ``t_first_token``/``t_end``: the first/last response token fully arrived at the client;
    ``ttft_s`` = t_first_token - t_sent (time to first token); per-token latency: the gaps
    between successive token arrivals (mean and 99th percentile; None with one token);
    ``bootstrap``: this request was its session's first on ``server`` and made the server
    fetch ``bootstrap_bytes`` of context/parameters from the holder(s); ``bootstrap_s``: from
    the server's first fetch request to the last shard's arrival (every layer); ``why``: what
    chose ``server`` (the policy's rule or its cost terms, workloads/inference.py);
    ``session_length``: the session's drawn length in requests (workloads.sessions; a
    client's last session may have fewer in the run), ``session_index`` this request's place
    in it (0-based), ``server_contexts``: the session contexts ``server`` holds at the
    request's arrival, this one's included (None in records of older runs),
    ``server_memory_bytes`` the context memory they take there (bytes), ``evicted`` the
    sessions whose contexts this request's cold admission evicted from ``server`` (least
    recently used first; workloads/inference.py)."""

    kind_name: ClassVar[str] = "request"

    run_id: str
    request_id: str
    session: str
    client: str
    server: str
    t_sent: float | None
    t_first_token: float | None
    t_end: float | None
    ttft_s: float | None
    tokens: int
    per_token_latency_s_mean: float | None
    per_token_latency_s_p99: float | None
    prompt_bytes: int
    response_bytes: int
    bootstrap: bool
    bootstrap_bytes: int
    bootstrap_s: float | None
    policy: str
    why: str = ""
    session_length: int | None = None
    session_index: int | None = None
    server_contexts: int | None = None
    server_memory_bytes: int | None = None
    evicted: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION
