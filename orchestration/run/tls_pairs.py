"""Which connections of a run are encrypted (``transport: {encryption: tls, encrypt_between:
[[site, site], ...]}``), and the refusal of UDP flows that would need it (pure).

Without ``encrypt_between`` every TCP connection runs TLS 1.3; with it, a connection between
hosts a and b does exactly when the unordered pair {site(a), site(b)} is listed (aitb.paths.
site_of: label ``site``, else the node's group). The agents get the host address pairs
(:func:`tls_address_pairs`, traffic_gen/endpoints.py decides per connection from them).

UDP: Python's ssl has no DTLS (the ``ssl`` module wraps stream sockets only: SSLContext
.wrap_socket needs SOCK_STREAM), so a UDP flow that would be encrypted cannot be, and
:func:`check_udp` refuses the experiment before anything runs rather than send it in the
clear.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aitb.errors import SpecError, SpecIssue
from aitb.paths import site_of
from aitb.plan import LabPlan
from aitb.schedule import Burst

__all__ = ["encrypts", "tls_address_pairs", "check_tls"]


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
    return [[str(plan.address_of(a)), str(plan.address_of(b))]
            for i, a in enumerate(hosts) for b in hosts[i:] if encrypts(plan, between, a, b)]


def check_tls(transport: Any, plan: LabPlan, workloads: Sequence[Any], source: str) -> None:
    """With ``transport.encryption`` tls: every site of ``encrypt_between`` is a site of
    ``plan``, and no UDP flow of the built ``workloads`` (their schedules and placements)
    would need encryption. Raises SpecError naming ``transport.encrypt_between[i]`` or
    ``workloads[i]`` (the flow's hosts and why UDP cannot be encrypted)."""
    if transport.encryption != "tls":
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
    for i, w in enumerate(workloads):
        for op in w.schedule.ops:
            if not isinstance(op, Burst):
                continue
            for f in op.flows:
                a, b = w.placement[f.src], w.placement[f.dst]
                if f.protocol == "udp" and encrypts(plan, transport.encrypt_between, a, b):
                    issues.append(SpecIssue(
                        f"a UDP flow {a} -> {b} cannot run over TLS: encryption: tls covers "
                        "TCP only (DTLS, TLS for datagrams, is not in Python's ssl module); "
                        "use protocol: tcp, or leave this site pair out of "
                        "transport.encrypt_between", file=source, key_path=("workloads", i)))
                    break
            else:
                continue
            break
    if issues:
        raise SpecError(issues)
