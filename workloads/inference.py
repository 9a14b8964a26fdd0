"""Inference serving: users' requests to inference servers as one Timed op (pure, seeded).

Clients send requests at Poisson arrivals (rate per client) or at the instants of a trace.
Consecutive requests of a client form sessions: of ``session_requests`` requests each, or of
lengths drawn from ``session_length`` (workloads.sessions: fixed, exponential or lognormal,
seeded by ``session_seed`` and the client). A session's context stays on the instance that
bootstrapped it until the session ends (the nominal end of its last request, known here in
hindsight) and costs ``context_bytes`` of the instance's context memory there
(``memory_bytes``, per server; absent: unlimited). A cold request (the instance does not hold
its session's context) admits the context; when it does not fit, the instance evicts its
least recently used contexts (LRU: the context whose session's latest request there is the
oldest) until it fits, and an evicted session's next request is a cold choice again: the
policy chooses afresh (affinity, oracle and ``per_session`` homes are forgotten) and the
chosen instance bootstraps. Every request records its server's ``server_contexts`` (the
contexts held there once its own is admitted), ``server_memory_bytes`` (their bytes) and
``evicted`` (the sessions whose contexts its admission evicted, LRU first). Each request
is a prompt (client -> server, ``prompt_bytes``), then ``tokens`` response tokens of
``token_bytes`` streamed back at ``token_rate_per_s`` (token k+1 leaves 1/rate after token k).
The first token leaves ``prefill_s`` after the prompt has arrived and, if the request
bootstraps, after the coarse layer of the bootstrap has arrived.

Bootstrap: the first request of a session on a server makes that server fetch the session's
context / model parameters (``bootstrap_bytes``) from the ``holders``: it sends each holder a
small fetch message, and each holder returns its shard (size / holders) at once, an incast on
the server when there are several. Layered delivery (``layers``, fractions summing to 1): each
holder sends its shard layer by layer (coarse first); the first token waits only for layer 0
of every holder, the rest streams in behind it (Wu et al., "Layered model delivery" ideas for
edge inference; here simply a split of the bytes).

Instance selection (``policy``), decided when the schedule is built, from the plan's
configured delays and the schedule's own timing:
* ``nearest``: the server with the least configured round-trip path delay to the client
  (workloads.paths); ties: the first listed.
* ``least_loaded``: the server with the fewest requests in service at the arrival instant,
  a request being in service for its nominal time prefill_s + tokens / token_rate_per_s
  (bootstrap and network time not predicted); ties: the most free context memory, then
  nearest, then first listed.
* ``affinity``: context affinity: a session stays on the server of its first request (chosen
  least loaded), so only its first request bootstraps.
* ``cats`` (computing-aware traffic steering, as in the IETF CATS framework: compute metrics
  of each instance combined with network metrics of the path to it): the server with the
  least predicted first-token time, ``cats_weights`` = (w_delay, w_load, w_bootstrap,
  w_memory) times the path's configured round trip, the queueing the instance advertises
  (requests in service x their nominal service time), unless the instance already holds
  the session's context the bootstrap's transfer time B until the first token can leave
  (the coarse layer of every holder's shard, bootstrap_bytes x layers[0] / holders, all of
  it without layers, over the slowest configured rate from a holder, ``bw_bps``), and, for
  a cold choice with ``memory_bytes``, the memory term min(1, (used + context_bytes) /
  memory) x B from the context memory the instance advertises in use: the share of one
  more bootstrap that its memory pressure threatens (at 1 the admission evicts a context,
  whose session pays a bootstrap again); ties: first listed. Each request records the terms,
  the instance's free context memory and the runner-up (``why``).
* ``oracle`` (best in hindsight, a reference for the online policies): per session, knowing
  in advance every request the session will make (their number and arrival instants, which
  no online policy knows), the one server that minimises the session's summed predicted
  first-token time under the ``cats`` predictor with unit weights: for each request the
  path's round trip plus the queueing at its arrival, plus one bootstrap for the cold start
  (a session stays where the oracle put it, its context held there). Queueing counts the
  requests already placed, i.e. of sessions that started earlier. It does not predict
  evictions (no memory term); when its session's context is evicted, the session's next
  request is a cold choice by the same rule over the session's remaining requests. ``why``
  gives the session's mean predicted first-token time there and on the runner-up.
With ``per_session`` the policy (``nearest``, ``least_loaded`` or ``cats``) decides at a
session's first request only and the session's later requests follow it (``affinity`` and
``oracle`` always do). Every request records ``why``: the rule or the cost terms that chose
its server.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from models.requests import tag
from models.schedule import Message, Schedule, Timed
from workloads.sessions import SessionLength, assign_sessions

__all__ = ["POLICIES", "InferenceParams", "Arrival", "poisson_arrivals", "inference_schedule"]

POLICIES = ("nearest", "least_loaded", "affinity", "cats", "oracle")
FETCH_BYTES = 64  # the server's fetch request to a holder: a small control message


@dataclass(frozen=True)
class InferenceParams:
    """Numbers of an inference workload (sizes bytes, times seconds, rates per second)."""

    prompt_bytes: int
    tokens: int
    token_bytes: int
    token_rate_per_s: float
    policy: str = "nearest"
    session_requests: int = 4
    prefill_s: float = 0.0
    bootstrap_bytes: int = 0
    layers: tuple[float, ...] = (1.0,)
    cats_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # delay, load, bootstrap, memory
    session_length: SessionLength | None = None  # None: fixed, session_requests
    session_seed: int = 0
    per_session: bool = False
    context_bytes: int = 0  # memory a held context costs on its instance
    memory_bytes: dict[str, int] | None = None  # server -> context memory; None: unlimited

    def lengths(self) -> SessionLength:
        """The session-length distribution: ``session_length``, else fixed
        ``session_requests``."""
        return self.session_length or SessionLength("fixed", float(self.session_requests))

    def service_s(self) -> float:
        """Nominal time a request keeps a server busy: prefill + tokens / rate."""
        return self.prefill_s + self.tokens / self.token_rate_per_s


@dataclass(frozen=True)
class Arrival:
    """A request arriving ``at_s`` after the start from ``client`` (a host name);
    ``session`` None: assigned by counting the client's requests."""

    at_s: float
    client: str
    session: str | None = None


def poisson_arrivals(clients: Sequence[str], rate_per_s: float, duration_s: float,
                     seed: int) -> list[Arrival]:
    """Independent Poisson arrivals of ``rate_per_s`` per client during ``duration_s``,
    drawn with ``random.Random(seed)``, sorted by time."""
    rng = random.Random(seed)
    out = []
    for c in clients:
        t = rng.expovariate(rate_per_s)
        while t < duration_s:
            out.append(Arrival(t, c))
            t += rng.expovariate(rate_per_s)
    return sorted(out, key=lambda a: (a.at_s, a.client))


class _Chooser:
    """Instance selection state: busy intervals per server, session homes."""

    def __init__(self, p: InferenceParams, servers: Sequence[str],
                 rtt_s: Callable[[str, str], float],
                 boot_s: Callable[[str], float] = lambda _s: 0.0) -> None:
        self.p, self.servers, self.rtt_s, self.boot_s = p, list(servers), rtt_s, boot_s
        self.busy: dict[str, list[float]] = {s: [] for s in servers}  # end times
        self.home: dict[str, str] = {}
        # contexts each server holds, least recently used first
        self.held: dict[str, OrderedDict[str, None]] = {s: OrderedDict() for s in servers}
        self.future: dict[str, list[float]] = {}  # session -> its arrival instants (hindsight)
        self.why = ""
        self.cold, self.evicted = False, ()  # of the latest choice
        mem = p.memory_bytes or {}
        self.cap = {s: float(mem.get(s, math.inf)) for s in servers}

    def _used(self, server: str) -> int:
        return len(self.held[server]) * self.p.context_bytes

    def _free(self, server: str) -> float:
        return self.cap[server] - self._used(server)

    def _release(self, t: float) -> None:
        """Drop the contexts of the sessions that have ended by ``t``."""
        q = self.p.service_s()
        for held in self.held.values():
            for session in [x for x in held if max(self.future[x]) + q <= t]:
                del held[session]

    def _admit(self, session: str, server: str) -> None:
        """Hold ``session``'s context on ``server`` (most recently used), evicting LRU ones."""
        held = self.held[server]
        self.cold = session not in held
        evicted = []
        if self.cold:
            while held and self._used(server) + self.p.context_bytes > self.cap[server]:
                gone, _ = held.popitem(last=False)
                evicted.append(gone)
                if self.home.get(gone) == server:
                    del self.home[gone]  # its next request is a cold choice
        held[session] = None
        held.move_to_end(session)
        self.evicted = tuple(evicted)

    def _mem_note(self, server: str) -> str:
        if math.isinf(self.cap[server]):
            return ""
        return f", {self._free(server) / 2**20:.1f} MiB context memory free"

    def _load(self, server: str, t: float) -> int:
        return sum(1 for end in self.busy[server] if end > t)

    def _nearest(self, client: str) -> str:
        return min(self.servers, key=lambda s: (self.rtt_s(client, s), self.servers.index(s)))

    def _least(self, client: str, t: float) -> str:
        return min(self.servers, key=lambda s: (self._load(s, t), -self._free(s),
                                                self.rtt_s(client, s), self.servers.index(s)))

    def _cats_terms(self, client: str, session: str, server: str, t: float
                    ) -> tuple[float, float, float, float]:
        cold = session not in self.held[server]
        boot = self.boot_s(server) if cold and self.p.bootstrap_bytes > 0 else 0.0
        mem = 0.0
        if cold and not math.isinf(self.cap[server]):
            fill = (self._used(server) + self.p.context_bytes) / self.cap[server]
            mem = min(1.0, fill) * self.boot_s(server)
        return (self.rtt_s(client, server), self._load(server, t) * self.p.service_s(),
                boot, mem)

    def _ranked(self, cost: dict[str, float], per: int = 1) -> tuple[list[str], str]:
        """Servers by ``cost`` (ties: first listed) and the runner-up for ``why``, its cost
        divided by ``per``, in ms."""
        ranked = sorted(self.servers, key=lambda s: (cost[s], self.servers.index(s)))
        nxt = f"; next {ranked[1]} {cost[ranked[1]] / per * 1e3:.1f} ms" if len(ranked) > 1 \
            else ""
        return ranked, nxt

    def _cats(self, a: Arrival, session: str) -> str:
        w = (*self.p.cats_weights, 1.0)[:4]  # three weights: memory 1
        terms = {s: self._cats_terms(a.client, session, s, a.at_s) for s in self.servers}
        cost = {s: sum(wi * x for wi, x in zip(w, terms[s], strict=True)) for s in terms}
        ranked, nxt = self._ranked(cost)
        best = ranked[0]
        d, q, b, m = terms[best]
        memory = "" if math.isinf(self.cap[best]) else \
            f"memory {m * 1e3:.1f} ms ({self._free(best) / 2**20:.1f} MiB free), "
        self.why = (f"cats: rtt {d * 1e3:.1f} ms, queue {q * 1e3:.1f} ms, bootstrap "
                    f"{b * 1e3:.1f} ms, {memory}cost {cost[best] * 1e3:.1f} ms" + nxt)
        return best

    def _oracle(self, a: Arrival, session: str) -> str:
        at = [t for t in self.future.get(session, [a.at_s]) if t >= a.at_s] or [a.at_s]
        q = self.p.service_s()
        total = {s: sum(self.rtt_s(a.client, s) + self._load(s, t) * q for t in at)
                 + (self.boot_s(s) if self.p.bootstrap_bytes > 0 else 0.0)
                 for s in self.servers}
        ranked, nxt = self._ranked(total, len(at))
        self.why = (f"oracle: session of {len(at)} requests, mean predicted first token "
                    f"{total[ranked[0]] / len(at) * 1e3:.1f} ms" + nxt)
        return ranked[0]

    def choose(self, a: Arrival, session: str) -> str:
        """The server of request ``a``; sets ``why``, ``cold`` and ``evicted``."""
        self._release(a.at_s)
        if self.p.per_session and session in self.home:
            server = self.home[session]
            self.why = f"{self.p.policy}: session home (per session)"
        elif self.p.policy == "oracle":
            if session in self.home:
                server = self.home[session]
                self.why = "oracle: session home"
            else:
                server = self._oracle(a, session)
        elif self.p.policy == "nearest":
            server = self._nearest(a.client)
            self.why = f"nearest: rtt {self.rtt_s(a.client, server) * 1e3:.1f} ms"
        elif self.p.policy == "least_loaded":
            server = self._least(a.client, a.at_s)
            self.why = (f"least_loaded: {self._load(server, a.at_s)} in service"
                        + self._mem_note(server))
        elif self.p.policy == "cats":
            server = self._cats(a, session)
        else:
            server = self.home.get(session) or self._least(a.client, a.at_s)
            self.why = "affinity: session home" if session in self.home else \
                f"affinity: least loaded ({self._load(server, a.at_s)} in service)"
        self._admit(session, server)
        self.home.setdefault(session, server)
        self.busy[server].append(a.at_s + self.p.service_s())
        return server


def _request_messages(n: int, a: Arrival, p: InferenceParams, rank: dict[str, int],
                      server: str, holders: Sequence[str], boot: bool
                      ) -> list[tuple[tuple, Message]]:
    """(sort key, message) pairs of request ``n``; ``after`` holds keys, resolved later."""
    c, s = rank[a.client], rank[server]
    k0 = (a.at_s, n)
    out = [((*k0, 0, 0, 0), Message(c, s, p.prompt_bytes, at_s=a.at_s, tag=tag(n, "prompt")))]
    coarse = []
    if boot:
        shard = p.bootstrap_bytes / len(holders)
        for h, holder in enumerate(holders):
            fk = (*k0, 1, 0, h)
            out.append((fk, Message(s, rank[holder], FETCH_BYTES, tag=tag(n, "fetch", h),
                                    flow=False, after=((*k0, 0, 0, 0),))))  # type: ignore[arg-type]
            for layer, frac in enumerate(p.layers):
                bk = (*k0, 2, layer, h)
                out.append((bk, Message(rank[holder], s, max(1, math.ceil(shard * frac)),
                                        after=(fk,), tag=tag(n, "boot", h, layer))))  # type: ignore[arg-type]
                if layer == 0:
                    coarse.append(bk)
    prev = [(*k0, 0, 0, 0), *coarse]
    for k in range(p.tokens):
        t_k = a.at_s + p.prefill_s + k / p.token_rate_per_s
        key = (t_k, n, 3, k, 0)
        gap = p.prefill_s if k == 0 else 1.0 / p.token_rate_per_s
        out.append((key, Message(s, c, p.token_bytes, after=tuple(prev), gap_s=gap,  # type: ignore[arg-type]
                                 tag=tag(n, "tok", k), flow=False)))
        prev = [key]
    return out


def inference_schedule(p: InferenceParams, arrivals: Sequence[Arrival],
                       servers: Sequence[str], holders: Sequence[str],
                       rtt_s: Callable[[str, str], float],
                       name: str = "inference",
                       bw_bps: Callable[[str, str], float] | None = None
                       ) -> tuple[Schedule, list[str]]:
    """The Schedule (one Timed op, kind ``inference``) and its hosts (rank i on hosts[i]).

    ``rtt_s(client, server)``: configured round-trip delay (s) for ``nearest`` and ``cats``;
    ``bw_bps(holder, server)``: the slowest configured rate (bit/s) on that path, for the
    bootstrap term of ``cats`` (None: bootstraps cost nothing there). Messages are
    ordered by their nominal instant, so that the token streams of overlapping requests on
    one client-server pair interleave. ``info["requests"]``: request_id, session, client,
    server, policy, bootstrap, at_s, why, session_length (the session's drawn length,
    requests), session_index (0-based), server_contexts, server_memory_bytes and evicted
    (session ids) per request (arrival order).
    Raises ValueError for an unknown policy, no server, a bootstrap without holders, a
    holder that is a server, layers that do not sum to 1, or a context larger than a
    server's memory."""
    _check(p, servers, holders)
    order = sorted(arrivals, key=lambda a: (a.at_s, a.client))
    hosts = list(dict.fromkeys([*(a.client for a in order), *servers, *holders]))
    rank = {h: i for i, h in enumerate(hosts)}
    def boot_s(server: str) -> float:
        if bw_bps is None or not holders or not p.bootstrap_bytes:
            return 0.0  # shards arrive in parallel: the slowest holder's share bounds it
        # the first token waits for the coarse layer (layers[0]) of every holder's shard
        return max(p.bootstrap_bytes * p.layers[0] / len(holders) * 8 / bw_bps(h, server)
                   for h in holders)
    chooser = _Chooser(p, servers, rtt_s, boot_s)
    assigned = assign_sessions([a.client for a in order], [a.session for a in order],
                               p.lengths(), p.session_seed)
    sessions = [x.session for x in assigned]
    for a, session in zip(order, sessions, strict=True):  # hindsight, for the oracle only
        chooser.future.setdefault(session, []).append(a.at_s)
    keyed, requests = [], []
    for n, (a, session) in enumerate(zip(order, sessions, strict=True)):
        server = chooser.choose(a, session)
        boot = p.bootstrap_bytes > 0 and chooser.cold
        keyed += _request_messages(n, a, p, rank, server, holders, boot)
        requests.append({"request_id": f"q{n}", "session": session, "client": a.client,
                         "server": server, "policy": p.policy, "bootstrap": boot,
                         "at_s": a.at_s, "why": chooser.why,
                         "session_length": assigned[n].length,
                         "session_index": assigned[n].index,
                         "server_contexts": len(chooser.held[server]),
                         "server_memory_bytes": chooser._used(server),
                         "evicted": list(chooser.evicted)})
    keyed.sort(key=lambda km: km[0])
    index = {k: i for i, (k, _) in enumerate(keyed)}
    msgs = tuple(Message(m.src, m.dst, m.size_bytes, m.at_s, tuple(index[d] for d in m.after),  # type: ignore[index]
                         m.gap_s, m.tag, m.flow) for _, m in keyed)
    info = {"requests": requests, "policy": p.policy}
    meta = {"kind": "inference", "policy": p.policy, "requests": len(requests),
            "bootstraps": sum(r["bootstrap"] for r in requests), "servers": list(servers),
            "evictions": sum(len(r["evicted"]) for r in requests)}
    op = Timed(msgs, label=name, kind="inference", info=info)
    return Schedule(name, len(hosts), {}, (op,), source="<inference>", meta=meta), hosts


def _check(p: InferenceParams, servers: Sequence[str], holders: Sequence[str]) -> None:
    if p.policy not in POLICIES:
        raise ValueError(f"unknown policy {p.policy!r}; known: {', '.join(POLICIES)}")
    if not servers:
        raise ValueError("an inference workload needs at least one server")
    if p.bootstrap_bytes and not holders:
        raise ValueError("a bootstrap needs holders (the hosts that hold the context)")
    if set(holders) & set(servers):
        raise ValueError(f"holders {sorted(set(holders) & set(servers))} are also servers")
    if abs(sum(p.layers) - 1.0) > 1e-9 or any(f <= 0 for f in p.layers):
        raise ValueError(f"layers {list(p.layers)} must be positive fractions summing to 1")
    if p.tokens < 1 or p.token_rate_per_s <= 0:
        raise ValueError("tokens must be at least 1 and token_rate positive")
    if len(p.cats_weights) not in (3, 4) or any(w < 0 for w in p.cats_weights):
        raise ValueError(f"cats_weights {list(p.cats_weights)} must be 3 or 4 weights >= 0")
    if p.context_bytes < 0:
        raise ValueError(f"context_bytes {p.context_bytes} must not be negative")
    for server, mem in (p.memory_bytes or {}).items():
        if server not in servers:
            raise ValueError(f"memory is given for {server!r}, which is not a server")
        if mem < p.context_bytes or mem <= 0:
            raise ValueError(f"memory {mem} B of server {server} cannot hold one context "
                             f"({p.context_bytes} B)")
