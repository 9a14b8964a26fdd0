"""Build ``kind: inference`` and ``kind: background`` experiment entries into schedules and
placements for a plan (pure; errors name the experiment file and the entry's key)."""

from __future__ import annotations

from collections.abc import Sequence

from models.errors import SpecError, SpecIssue
from models.paths import PathError
from models.plan import LabPlan
from models.schedule import Schedule, ScheduleError
from models.specfile import MAX_FLOWS, MAX_REQUEST_MESSAGES, MAX_REQUESTS
from orchestration.serving.entries import BackgroundEntry, InferenceEntry
from workloads.background import (
    BackgroundParams,
    arrival_rate_per_s,
    background_schedule,
    load_cdf,
)
from workloads.inference import Arrival, InferenceParams, inference_schedule, poisson_arrivals
from workloads.paths import path_hops, rtt_delay_s
from workloads.sessions import SessionLength
from workloads.transform import scale_schedule

__all__ = ["build_serving"]


class _Where:
    def __init__(self, source: str, index: int) -> None:
        self.source, self.prefix = source, ("workloads", index)

    def error(self, *key: str | int, message: str) -> SpecError:
        return SpecError(SpecIssue(message, file=self.source, key_path=(*self.prefix, *key)))


def _known_hosts(w: _Where, plan: LabPlan, key: str, hosts: Sequence[str]) -> None:
    known = {n.name for n in plan.hosts()}
    bad = [h for h in hosts if h not in known]
    if bad:
        raise w.error(key, message=f"not hosts of lab {plan.name}: {', '.join(bad)}; hosts "
                                   f"are {', '.join(sorted(known))}")


def _check_requests(w: _Where, e: InferenceEntry) -> None:
    """Refuse more than MAX_REQUESTS requests (poisson: their expected number, clients x
    rate x duration) or more than MAX_REQUEST_MESSAGES messages (a prompt and ``tokens`` tokens
    each) before any arrival is drawn."""
    a = e.arrivals
    if a.process == "poisson":
        n = len(e.clients) * float(a.rate_per_s or 0) * a.duration
        what = (f"{len(e.clients)} clients x {a.rate_per_s:g}/s x {a.duration} = about "
                f"{n:.0f} requests")
    else:
        n = len(a.requests or [])
        what = f"{n} listed requests"
    if not n <= MAX_REQUESTS:  # also inf and nan from extreme rates and durations
        raise w.error("arrivals", message=f"{what}; at most {MAX_REQUESTS} (MAX_REQUESTS)")
    if n * (1 + e.tokens) > MAX_REQUEST_MESSAGES:
        raise w.error("tokens", message=f"{what} x (1 prompt + {e.tokens} tokens) = about "
                      f"{n * (1 + e.tokens):.0f} messages; at most {MAX_REQUEST_MESSAGES} "
                      "(MAX_REQUEST_MESSAGES): fewer requests or tokens")


def _arrivals(w: _Where, plan: LabPlan, e: InferenceEntry, seed: int) -> list[Arrival]:
    _check_requests(w, e)
    a = e.arrivals
    if a.process == "poisson":
        return poisson_arrivals(e.clients, float(a.rate_per_s or 0),
                                float(a.duration), seed)  # type: ignore[arg-type]
    out = []
    for i, r in enumerate(a.requests or []):
        if r.client not in e.clients:
            raise w.error("arrivals", "requests", i, "client",
                          message=f"{r.client!r} is not among clients ({', '.join(e.clients)})")
        out.append(Arrival(float(r.at), r.client, r.session))
    return out


def _lengths(e: InferenceEntry) -> SessionLength | None:
    if e.session is None:
        return None
    sl = e.session.length
    return SessionLength(sl.dist, sl.mean, sl.sigma)


def _memory(w: _Where, e: InferenceEntry, context_bytes: int) -> dict[str, int] | None:
    """Server -> context memory (bytes) from ``memory`` (one size for every server, or a
    mapping); raises SpecError naming ``memory[.<server>]``."""
    if e.memory is None:
        return None
    given = e.memory if isinstance(e.memory, dict) else dict.fromkeys(e.servers, e.memory)
    out = {}
    for server, size in given.items():
        key = ("memory", server) if isinstance(e.memory, dict) else ("memory",)
        if server not in e.servers:
            raise w.error(*key, message=f"{server!r} is not among servers "
                                        f"({', '.join(e.servers)})")
        out[server] = int(size)
        if out[server] < max(context_bytes, 1):
            raise w.error(*key, message=f"{size} cannot hold one context of "
                                        f"{context_bytes} B (context_size, else the bootstrap "
                                        "size)")
    return out


def _inference(w: _Where, plan: LabPlan, e: InferenceEntry,
               seed: int) -> tuple[Schedule, list[str]]:
    for key in ("clients", "servers", "holders"):
        _known_hosts(w, plan, key, getattr(e, key))
    boot_bytes = int(e.bootstrap.size) if e.bootstrap else 0
    context_bytes = int(e.context_size) if e.context_size is not None else boot_bytes
    p = InferenceParams(
        prompt_bytes=int(e.prompt), tokens=e.tokens,
        token_bytes=int(e.token_size), token_rate_per_s=e.token_rate_per_s,
        policy=e.policy, session_requests=e.session_requests,
        prefill_s=float(e.prefill),
        bootstrap_bytes=boot_bytes,
        layers=tuple(e.bootstrap.layers) if e.bootstrap else (1.0,),
        cats_weights=(cw.delay, cw.load, cw.bootstrap, cw.memory) if (cw := e.cats_weights)
        else (1.0, 1.0, 1.0, 1.0),
        context_bytes=context_bytes, memory_bytes=_memory(w, e, context_bytes),
        session_length=_lengths(e), session_seed=seed,
        per_session=e.session is not None and e.session.select == "per_session")
    arrivals = _arrivals(w, plan, e, seed)
    if not arrivals:
        raise w.error("arrivals", message="no request arrives (raise rate_per_s or duration)")
    try:
        return inference_schedule(p, arrivals, e.servers, e.holders,
                                  lambda c, s: rtt_delay_s(plan, c, s), e.name or "inference",
                                  bw_bps=lambda h, s: _slowest_bps(plan, h, s))
    except PathError as exc:
        raise w.error("servers", message=f"no path: {exc}") from None
    except ValueError as exc:
        raise w.error("holders" if "holder" in str(exc) else "policy", message=str(exc)) from None


def _slowest_bps(plan: LabPlan, src: str, dst: str) -> float:
    """The smallest configured rate (bit/s) on the path src -> dst (10 Gbit/s, about a veth's
    speed here, where every hop is unshaped)."""
    rates = [lk.egress(n).rate_bps for lk, n in path_hops(plan, src, dst)]
    return float(min((r for r in rates if r), default=10e9))


def _link_rate_bps(w: _Where, plan: LabPlan, e: BackgroundEntry) -> float:
    """The rate of ``e.link`` in the direction every sender -> receiver path crosses it."""
    link = next((lk for lk in plan.links if lk.name == e.link), None)
    if link is None:
        raise w.error("link", message=f"no link {e.link!r} in lab {plan.name}; links are "
                                      f"{', '.join(lk.name for lk in plan.links)}")
    directions = set()
    for s in e.senders:
        for r in e.receivers:
            if s == r:
                continue
            hops = [n for lk, n in path_hops(plan, s, r) if lk.name == e.link]
            if not hops:
                raise w.error("link", message=f"the path {s} -> {r} does not cross link "
                                              f"{e.link}")
            directions.add(hops[0])
    if len(directions) != 1:
        raise w.error("link", message=f"senders -> receivers cross link {e.link} in both "
                                      "directions; load one direction")
    rate = link.egress(directions.pop()).rate_bps
    if e.rate is not None:
        return float(e.rate)
    if rate is None:
        raise w.error("rate", message=f"link {e.link} is not rate-limited: give rate")
    return float(rate)


def _background(w: _Where, plan: LabPlan, e: BackgroundEntry, seed: int,
                scale: float) -> tuple[Schedule, list[str]]:
    for key in ("senders", "receivers"):
        _known_hosts(w, plan, key, getattr(e, key))
    rate = _link_rate_bps(w, plan, e)  # the plan is already scaled: sizes get the same factor
    hosts = list(dict.fromkeys([*e.senders, *e.receivers]))
    p = BackgroundParams(e.distribution, e.load, rate, float(e.duration),
                         e.size_scale * scale, seed)
    flows = arrival_rate_per_s(p.load, rate, load_cdf(p.distribution, p.size_scale).mean_bytes
                               ) * p.duration_s  # expected: checked before any is drawn
    if flows > MAX_FLOWS:
        raise w.error("duration", message=f"{e.load:g} of {rate:.6g} bit/s for {e.duration} "
                      f"is about {flows:.0f} {e.distribution} flows; at most {MAX_FLOWS} "
                      "(MAX_FLOWS): a shorter duration, lower load or smaller size_scale "
                      "(sizes are divided by it: smaller means fewer, larger flows)")
    try:
        s = background_schedule(p, [hosts.index(h) for h in e.senders],
                                [hosts.index(h) for h in e.receivers], len(hosts),
                                e.name or "background")
    except ValueError as exc:
        raise w.error("receivers", message=str(exc)) from None
    return s, hosts


def build_serving(entry: InferenceEntry | BackgroundEntry, index: int, *, plan: LabPlan,
                  source: str, seed: int, scale: float) -> tuple[Schedule, dict[int, str]]:
    """(schedule, rank -> host) of workload ``index``. ``scale`` (>= 1) divides sizes (the
    plan's rates are already divided): an inference schedule is scaled after it is built; a
    background load is computed from the scaled link rate with sizes divided by the same
    factor, so lambda and the offered load stay those of the unscaled network.
    Raises SpecError naming ``source`` and ``workloads[index].<key>``."""
    w = _Where(source, index)
    try:
        if isinstance(entry, InferenceEntry):
            schedule, hosts = _inference(w, plan, entry, seed)
            schedule = scale_schedule(schedule, scale) if scale > 1 else schedule
        else:
            schedule, hosts = _background(w, plan, entry, seed, scale)
    except ScheduleError as exc:
        raise w.error(message=str(exc)) from None
    except PathError as exc:
        raise w.error(message=str(exc)) from None
    return schedule, dict(enumerate(hosts))
