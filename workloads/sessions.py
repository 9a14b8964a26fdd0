"""Session lengths of an inference workload (pure, seeded): how many consecutive requests of
a client form one session, i.e. how long the session's context stays on its instance.

A :class:`SessionLength` is a distribution over whole numbers of requests (>= 1):

* ``fixed``: every session has ``mean`` requests (``mean`` a whole number).
* ``exponential``: the discrete memoryless length, ceil(X) with X exponential of rate
  -ln(1 - 1/mean), which is geometric on {1, 2, ...} with success probability p = 1/mean:
  P(L = k) = (1 - p)^(k-1) p, mean exactly ``mean``, variance (1 - p) / p^2 (Feller, An
  Introduction to Probability Theory, vol. 1, XIII.9: the geometric law is the discrete
  exponential). ``mean`` 1: every session has one request.
* ``lognormal``: max(1, round(X)) with X lognormal of shape ``sigma`` and mean ``mean``
  (mu = ln(mean) - sigma^2 / 2, so E[X] = exp(mu + sigma^2 / 2) = mean); the rounding and
  the floor at one request move the mean of L slightly off ``mean``:
  :func:`length_moments` gives its exact mean and variance (from the lognormal CDF).

:func:`session_lengths` draws the sessions of one client with ``random.Random`` seeded by
the experiment seed and the client's name, so a client's sessions do not depend on the
other clients' requests; :func:`assign_sessions` cuts each client's requests (in arrival
order) into consecutive sessions of the drawn lengths. A client's last session may be cut
short by the end of the arrivals: it keeps its drawn length in the records, with fewer
requests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["SessionDist", "SessionLength", "SESSION_DISTS", "session_lengths",
           "assign_sessions", "length_moments", "Assigned"]

SessionDist = Literal["fixed", "exponential", "lognormal"]
SESSION_DISTS: tuple[str, ...] = ("fixed", "exponential", "lognormal")


@dataclass(frozen=True)
class SessionLength:
    """A session-length distribution (module docstring): ``dist``, ``mean`` requests (>= 1;
    whole for ``fixed``), ``sigma`` the lognormal's shape (> 0; ignored otherwise)."""

    dist: SessionDist = "fixed"
    mean: float = 4.0
    sigma: float = 1.0

    def __post_init__(self) -> None:
        if self.dist not in SESSION_DISTS:
            raise ValueError(f"unknown session length dist {self.dist!r}; known: "
                             f"{', '.join(SESSION_DISTS)}")
        if not self.mean >= 1:
            raise ValueError(f"session length mean {self.mean} must be at least 1 request")
        if self.dist == "fixed" and self.mean != int(self.mean):
            raise ValueError(f"a fixed session length is a whole number of requests, not "
                             f"{self.mean}")
        if self.dist == "lognormal" and not self.sigma > 0:
            raise ValueError(f"lognormal sigma {self.sigma} must be positive")

    def draw(self, rng: random.Random) -> int:
        """One length (requests, >= 1) drawn with ``rng``."""
        if self.dist == "fixed" or (self.dist == "exponential" and self.mean == 1):
            return int(self.mean)
        if self.dist == "exponential":  # inverse CDF of the geometric law, p = 1 / mean
            u = 1.0 - rng.random()  # in (0, 1]
            return 1 + int(math.log(u) / math.log(1.0 - 1.0 / self.mean))
        mu = math.log(self.mean) - self.sigma ** 2 / 2
        return max(1, round(rng.lognormvariate(mu, self.sigma)))


def _client_rng(seed: int, client: str) -> random.Random:
    return random.Random(f"sessions/{seed}/{client}")  # str seeds hash with SHA-512: stable


def session_lengths(spec: SessionLength, seed: int, client: str) -> Iterator[int]:
    """The lengths of ``client``'s successive sessions (an endless, reproducible stream)."""
    rng = _client_rng(seed, client)
    while True:
        yield spec.draw(rng)


@dataclass(frozen=True)
class Assigned:
    """A request's session: its id, the session's drawn ``length`` (requests) and this
    request's ``index`` in it (0-based)."""

    session: str
    length: int
    index: int


def assign_sessions(clients: Sequence[str], explicit: Sequence[str | None],
                    spec: SessionLength, seed: int) -> list[Assigned]:
    """The session of every request, given in arrival order by its ``clients[i]`` and its
    ``explicit[i]`` session (a traced one, or None). Requests without one are cut per client
    into consecutive sessions ``<client>-s<k>`` of lengths from :func:`session_lengths`;
    a traced session's length is its number of requests."""
    streams: dict[str, Iterator[int]] = {}
    current: dict[str, tuple[int, int, int]] = {}  # client -> (session k, length, used)
    traced: dict[str, int] = {}
    for s in explicit:
        if s is not None:
            traced[s] = traced.get(s, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for client, s in zip(clients, explicit, strict=True):
        if s is not None:
            out.append(Assigned(s, traced[s], seen.get(s, 0)))
            seen[s] = seen.get(s, 0) + 1
            continue
        k, length, used = current.get(client, (-1, 0, 0))
        if used == length:
            stream = streams.setdefault(client, session_lengths(spec, seed, client))
            k, length, used = k + 1, next(stream), 0
        out.append(Assigned(f"{client}-s{k}", length, used))
        current[client] = (k, length, used + 1)
    return out


def _lognormal_cdf(x: float, mu: float, sigma: float) -> float:
    return 0.0 if x <= 0 else 0.5 * (1.0 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2)))


def length_moments(spec: SessionLength, tail: float = 1e-12,
                   cut: int = 100_000) -> tuple[float, float]:
    """(mean, variance) of the length L in requests: exact for ``fixed`` and
    ``exponential``; for ``lognormal`` summed over k of P(L = k) from the lognormal CDF F
    (P(L = 1) = F(1.5), P(L = k) = F(k + 0.5) - F(k - 0.5)) until the remaining mass is
    below ``tail`` or k reaches ``cut``, the rest from the lognormal's partial moments
    E[X^n; X > c] = exp(n mu + n^2 sigma^2 / 2) Phi((mu + n sigma^2 - ln c) / sigma)
    (rounding moves each value there by at most 0.5, i.e. by 1/(2 cut) relatively)."""
    if spec.dist == "fixed":
        return float(spec.mean), 0.0
    if spec.dist == "exponential":
        p = 1.0 / spec.mean
        return spec.mean, (1.0 - p) / p ** 2
    mu, sg = math.log(spec.mean) - spec.sigma ** 2 / 2, spec.sigma
    m1 = m2 = 0.0
    k, below = 1, 0.0
    while 1.0 - below > tail and k < cut:
        upto = _lognormal_cdf(k + 0.5, mu, sg)
        pk = upto - below
        m1 += k * pk
        m2 += k * k * pk
        below, k = upto, k + 1
    if 1.0 - below > tail:
        c = math.log(k - 0.5)
        m1 += math.exp(mu + sg ** 2 / 2) * _phi((mu + sg ** 2 - c) / sg)
        m2 += math.exp(2 * mu + 2 * sg ** 2) * _phi((mu + 2 * sg ** 2 - c) / sg)
    return m1, m2 - m1 * m1
