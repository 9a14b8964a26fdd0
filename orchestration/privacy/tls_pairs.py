"""Which connections of a run are encrypted (``transport: {encryption: tls, encrypt_between:
[[site, site], ...]}``), and the refusal of UDP flows that would need it (pure).

Without ``encrypt_between`` every TCP connection runs TLS 1.3; with it, a connection between
hosts a and b does exactly when the unordered pair {site(a), site(b)} is listed (models.paths.
site_of: label ``site``, else the node's group). The agents get the host address pairs
(:func:`tls_address_pairs`, traffic_gen/endpoints.py decides per connection from them): every
address of a with every address of b (models.paths.host_addresses), so a multi-NIC host's
connections from or to any of its NICs are covered, not only its first address's.

Per workload (``transport: {encryption: tls | none}`` of a workload entry): the connections
between every two hosts the workload is placed on (all pairs of its placed hosts, its own
included: a schedule need not use every pair, and counting one too many encrypts or clears
nothing it does not use) follow the workload's choice instead of the experiment's. The
agents keep one set of connections per pair of hosts, shared by the workloads between them,
so two workloads that share a pair of hosts and decide differently are refused
(:func:`workload_tls_pairs`); with any override the agents get the explicit list of the
encrypted host pairs.

UDP: Python's ssl has no DTLS (the ``ssl`` module wraps stream sockets only: SSLContext
.wrap_socket needs SOCK_STREAM), so a UDP flow that would be encrypted cannot be, and
:func:`check_udp` refuses the experiment before anything runs rather than send it in the
clear.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.errors import SpecError, SpecIssue
from models.paths import host_addresses, site_of
from models.plan import LabPlan
from models.schedule import Burst

__all__ = ["encrypts", "tls_address_pairs", "check_tls", "workload_tls_pairs",
           "uses_tls"]


def _pairs(between: Sequence[Sequence[str]] | None) -> set[frozenset[str]] | None:
    return None if between is None else {frozenset(p) for p in between}


def encrypts(plan: LabPlan, between: Sequence[Sequence[str]] | None, a: str, b: str) -> bool:
    """Whether a connection between hosts ``a`` and ``b`` runs TLS (module docstring), given
    that the run's encryption is ``tls``."""
    pairs = _pairs(between)
    return pairs is None or frozenset((site_of(plan, a) or "", site_of(plan, b) or "")) in pairs


def tls_address_pairs(plan: LabPlan, between: Sequence[Sequence[str]] | None
                      ) -> list[list[str]] | None:
    """The host address pairs whose connections run TLS (None: every connection), for the
    agents' ``tls.pairs`` option."""
    if between is None:
        return None
    hosts = [h.name for h in plan.hosts() if plan.address_of(h.name) is not None]
    return [p for i, a in enumerate(hosts) for b in hosts[i:] if encrypts(plan, between, a, b)
            for p in _address_pairs(plan, a, b)]


def _address_pairs(plan: LabPlan, a: str, b: str) -> list[list[str]]:
    """Every (address of host a, address of host b) pair (both NIC lists in link order)."""
    return [[x, y] for x in host_addresses(plan, a) for y in host_addresses(plan, b)]


def _override(entry: Any) -> str | None:
    t = getattr(entry, "transport", None)
    return None if t is None else t.encryption


def uses_tls(transport: Any, entries: Sequence[Any]) -> bool:
    """Whether any connection of the run may run TLS (the experiment's or a workload's)."""
    return transport.encryption == "tls" or any(_override(e) == "tls" for e in entries)


def _host_pairs(w: Any) -> set[frozenset[str]]:
    hosts = sorted(set(w.placement.values()))
    return {frozenset((a, b)) for i, a in enumerate(hosts) for b in hosts[i:]}


def _decides(transport: Any, plan: LabPlan, entry: Any, a: str, b: str) -> bool:
    over = _override(entry)
    if over is not None:
        return over == "tls"
    return transport.encryption == "tls" and encrypts(plan, transport.encrypt_between, a, b)


def workload_tls_pairs(transport: Any, plan: LabPlan, entries: Sequence[Any],
                       workloads: Sequence[Any], source: str) -> list[list[str]] | None:
    """The host address pairs whose connections run TLS, for the agents' ``tls.pairs``:
    without a workload override, :func:`tls_address_pairs` of the experiment's; with one,
    the pairs of hosts of every workload (module docstring) that its own or the
    experiment's choice encrypts. Raises SpecError naming ``workloads[j].transport`` when
    workload j shares a pair of hosts with an earlier workload i that decides otherwise."""
    if not any(_override(e) is not None for e in entries):
        return tls_address_pairs(plan, transport.encrypt_between)
    decided: dict[frozenset[str], tuple[bool, int]] = {}
    issues = []
    for j, (entry, w) in enumerate(zip(entries, workloads, strict=True)):
        for pair in sorted(_host_pairs(w), key=sorted):
            a, b = sorted(pair) * (2 if len(pair) == 1 else 1)
            tls = _decides(transport, plan, entry, a, b)
            prev = decided.setdefault(pair, (tls, j))
            if prev[0] != tls:
                issues.append(SpecIssue(
                    f"workloads[{prev[1]}] and workloads[{j}] both connect {a} and {b} but "
                    f"only one encrypts them; the agents keep one set of connections per "
                    "pair of hosts: give both the same transport.encryption",
                    file=source, key_path=("workloads", j, "transport")))
                break
    if issues:
        raise SpecError(issues)
    return [p for pair, (tls, _) in decided.items() if tls
            for a, b in [tuple(sorted(pair) * (2 if len(pair) == 1 else 1))]
            for p in _address_pairs(plan, a, b)]


def check_tls(transport: Any, plan: LabPlan, workloads: Sequence[Any], source: str,
              entries: Sequence[Any] | None = None) -> None:
    """With ``transport.encryption`` tls: every site of ``encrypt_between`` is a site of
    ``plan``, and no UDP flow of the built ``workloads`` (their schedules and placements)
    would need encryption, by the experiment's choice or by its workload's ``transport``
    (``entries``: the workload entries, in order), and workloads that share a pair of hosts
    agree (:func:`workload_tls_pairs`). Raises SpecError naming
    ``transport.encrypt_between[i]``, ``workloads[i]`` (the flow's hosts and why UDP cannot
    be encrypted) or ``workloads[i].transport``."""
    entries = list(entries) if entries is not None else [None] * len(workloads)
    if not uses_tls(transport, [e for e in entries if e is not None]):
        return
    issues = []
    known = {site_of(plan, h.name) or "" for h in plan.hosts()}
    for i, pair in enumerate(transport.encrypt_between or []):
        bad = [s for s in pair if s not in known]
        if bad:
            issues.append(SpecIssue(
                f"not sites of lab {plan.name}: {', '.join(bad)}; sites are "
                f"{', '.join(sorted(known))}", file=source,
                key_path=("transport", "encrypt_between", i)))
    if issues:
        raise SpecError(issues)
    if any(e is not None for e in entries):
        workload_tls_pairs(transport, plan, entries, workloads, source)
    for i, (w, entry) in enumerate(zip(workloads, entries, strict=True)):
        over = _override(entry)
        for op in w.schedule.ops:
            if not isinstance(op, Burst):
                continue
            for f in op.flows:
                a, b = w.placement[f.src], w.placement[f.dst]
                if f.protocol == "udp" and _decides(transport, plan, entry, a, b):
                    issues.append(SpecIssue(
                        f"a UDP flow {a} -> {b} cannot run over TLS: encryption: tls covers "
                        "TCP only (DTLS, TLS for datagrams, is not in Python's ssl module); "
                        "use protocol: tcp, or " + (
                            "transport: {encryption: none} for this workload" if over else
                            "leave this site pair out of transport.encrypt_between"),
                        file=source, key_path=("workloads", i, *(("transport",) if over
                                                                  else ()))))
                    break
            else:
                continue
            break
    if issues:
        raise SpecError(issues)
