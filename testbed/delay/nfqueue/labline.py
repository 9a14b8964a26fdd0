"""Where a lab's native delay lines sit and what each one's helper is told (pure: no root).

One link direction with a delay line = one NFQUEUE queue in one namespace:

- normally the lab's *wire* namespace (:data:`WIRE_NODE`; a :class:`testbed.lab.lab.Lab`
  runs such a link through it, :class:`WireLink`): ``mangle PREROUTING -m physdev
  --physdev-in PORT`` on the bridge port the sender's end feeds. Every receive stamp (AF_PACKET
  taps, SO_TIMESTAMP) is taken in ``__netif_receive_skb``, before netfilter, so a line in the
  receiver's own PREROUTING would hold packets its kernel had already stamped as arrived; in
  the wire it holds them after the sender stamped their departure and before the receiver
  stamps their arrival. A lab without a wire (``Lab.line_hold`` ``receiver``: the Mininet
  backend) keeps the receiving node's ``mangle PREROUTING -i IF`` (hosts, routers), or for a
  Linux-bridge switch port ``-m physdev --physdev-in PORT`` (br_netfilter; the lab turns
  ``bridge-nf-call-iptables``/``ip6tables`` on in that namespace only);
- when the receiver is an OVS switch (its datapath, kernel or user-space, takes frames before
  netfilter sees them) the *sending* node's: ``mangle POSTROUTING -o IF`` (a bridge switch
  sender: ``--physdev-out``). A link whose two ends are OVS switches has no place for it
  and is refused;
- also the sending node's when the direction's buffer has a segmenter (a buffer given in
  packets, or in bytes too few for two GSO packets: testbed/tc/qdiscs/tbf.py ``segmented``) and
  the sender is a router or a Linux-bridge switch (:data:`FORWARDERS`). The segmenter
  cuts GSO packets into wire-sized ones; after it the line would handle every 1448-byte
  segment (about 1 CPU-second per Gbit/s here), before it one 64 KB GSO packet per ~45. The
  line then sits before the bottleneck queue instead of after it, which changes nothing for a
  constant delay: a FIFO queue is time-invariant, so delaying every arrival by d delays every
  departure and keeps every drop (with jitter, arrivals to the queue are jittered instead of
  departures from it). A host sender keeps the line at the receiver: packets its sockets send
  count against TCP small queues (``tcp_limit_output_bytes``) until they leave the host, so a
  line on the host's own egress would throttle its TCP flows to a few packets per delay. (A
  router's own TCP, BGP, is throttled the same way on such a link: at BGP's volumes that
  costs nothing; BFD, OSPF, ARP and ND are not TCP; the wire namespace is not such a host:
  a packet's socket charge ends when the wire receives it.) A capture on the sending
  interface of such a direction sees its packets after the delay (in the wire, the sender's
  capture sees them when they leave), so an RTT measured from that capture point includes
  this direction's delay.

A line before the sender's queue (``hook`` ``out``) holds what the sender offers, not what
the link's rate lets through, so its queue length is sized from :data:`UNSHAPED_LINE_RATE_BPS`
(up to :data:`MAX_HELD_BYTES` of MTU-sized packets), not from the link's rate. Queue lengths
count packets, GSO ones included, so what a line pins in memory is bounded by the traffic
(TCP's windows), and :func:`problems` checks the link's rate x delay against the cap.

Queue numbers are unique per namespace (0, 1, ... in plan order); one helper per namespace
serves them all. Every rule carries ``-m comment --comment aitb:<run_id>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from models.errors import LabError
from models.plan import LabPlan, LinkPlan
from models.shaping import Shaping
from models.trace import planned_changes
from models.units import format_duration
from testbed.delay.nfqueue.rules import QueueParams, maxlen_for_bdp
from testbed.tc.qdiscs.tbf import segmented

__all__ = ["LinePlace", "place", "places", "wants_wire", "WIRE_NODE", "WireLink",
           "queue_params", "problems", "plan_problems",
           "FORWARDERS",
           "trace_problems", "restore_text",
           "MAX_HELD_BYTES", "UNSHAPED_LINE_RATE_BPS", "REFUSED_KEYS"]

# What one direction's line may hold at once: 2 x the bytes in flight (rate x (delay + jitter))
# must stay below this. The kernel keeps every queued packet (nfnetlink_queue holds the skb,
# about 2 x its length in truesize) until the helper's verdict, so this bounds the kernel
# memory one direction can pin: 256 MiB, ~1/100 of this machine's 24 GiB, lets 1 Gbit/s hold
# 1 s of delay.
MAX_HELD_BYTES = 256 * 2**20
# rate assumed for an unshaped direction (no HTB before the line): what one veth flow reaches
# on these machines (testbed/KERNEL measurements: about 17 Gbit/s unshaped); only sizes the
# queue, never limits traffic
UNSHAPED_LINE_RATE_BPS = 20 * 10**9
BDP_FACTOR = 2.0  # margin over the bytes in flight (GSO packets, the HTB burst, timer slack)
# node kinds whose packet-counted directions get the line before their queue: nodes that
# forward (no socket of theirs sends the traffic, see the module docstring); of the switches,
# Linux bridges only (an OVS datapath bypasses netfilter)
FORWARDERS = ("router", "switch")
# keys the NFQUEUE line cannot do: a verdict accepts or drops a packet but cannot emit a
# copy (duplicate); the helper draws every packet's delay independently (no correlation)
REFUSED_KEYS = {
    "duplicate_pct": "duplicate (an NFQUEUE verdict cannot emit a second copy of a packet)",
    "delay_correlation_pct": "delay correlation (the native line draws each packet's delay "
                             "independently)",
}

# the lab's wire namespace (aitb-<run_id>-_wire, a node of testbed.lab.layout's): it holds the
# native delay lines between the two ends of a link; "_" cannot start a node name
# (models.plan.NAME_RE), so it never meets one
WIRE_NODE = "_wire"


@dataclass(frozen=True)
class WireLink:
    """A link that runs through the wire namespace: ``a_port`` (the peer of the link's ``a``
    end) and ``b_port`` (the ``b`` end's) joined by bridge ``bridge``, all in namespace
    :data:`WIRE_NODE`; a native delay line holds what enters the bridge from one port before
    it leaves by the other."""

    link: str
    bridge: str
    a_port: str
    b_port: str

    def port_from(self, direction: str) -> str:
        """The port packets of ``direction`` (a_to_b, b_to_a) enter the wire by."""
        return self.a_port if direction == "a_to_b" else self.b_port

    def port_to(self, direction: str) -> str:
        """The port packets of ``direction`` leave the wire by (towards the receiver)."""
        return self.b_port if direction == "a_to_b" else self.a_port

    def port_of(self, link: LinkPlan, node: str, ifname: str) -> str:
        """The wire port peered with endpoint (``node``, ``ifname``) of ``link``."""
        return self.a_port if (link.a.node, link.a.ifname) == (node, ifname) else self.b_port


@dataclass(frozen=True, slots=True)
class LinePlace:
    """Where the line of (``link``, ``direction``) sits: namespace of ``node``, ``hook``
    ``wire`` (the wire namespace's PREROUTING, entering its bridge by port ``dev``), ``in``
    (PREROUTING, arriving on ``dev``) or ``out`` (POSTROUTING, leaving on ``dev``),
    ``physdev`` when ``dev`` is a Linux bridge port; ``queue_num`` in that namespace."""

    link: str
    direction: str
    node: str
    hook: str
    dev: str
    physdev: bool
    queue_num: int = 0


def _ends(link: LinkPlan, direction: str) -> tuple[tuple[str, str], tuple[str, str]]:
    a, b = (link.a.node, link.a.ifname), (link.b.node, link.b.ifname)
    return (a, b) if direction == "a_to_b" else (b, a)


def place(plan: LabPlan, link: LinkPlan, direction: str, wire_port: str | None = None
          ) -> LinePlace:
    """The place of one direction's line (queue number 0). ``wire_port``: the port this
    direction enters the wire namespace by, when the link runs through it
    (``Layout.wires``): the line holds packets there instead of in the receiver's
    PREROUTING. Raises LabError naming the link when both ends are OVS switches."""
    (tx, tx_dev), (rx, rx_dev) = _ends(link, direction)
    kind = {n.name: (n.kind, n.datapath) for n in plan.nodes}
    if segmented(getattr(link, direction), link.mtu) and kind[tx][0] in FORWARDERS \
            and kind[tx] != ("switch", "ovs"):
        return LinePlace(link.name, direction, tx, "out", tx_dev, kind[tx][0] == "switch")
    if kind[rx] != ("switch", "ovs"):
        if wire_port is not None:
            return LinePlace(link.name, direction, WIRE_NODE, "wire", wire_port, True)
        return LinePlace(link.name, direction, rx, "in", rx_dev, kind[rx][0] == "switch")
    if kind[tx] != ("switch", "ovs"):
        return LinePlace(link.name, direction, tx, "out", tx_dev, kind[tx][0] == "switch")
    raise LabError(f"link {link.name} {direction}: both ends ({tx}, {rx}) are OVS switches, "
                   "whose datapath takes frames before netfilter, so the native delay line has "
                   "no place on this link; move the delay to a link with a host, router or "
                   "Linux-bridge end, or use delay_line: netem (on a kernel with netem)")


def wants_wire(plan: LabPlan, link: LinkPlan, direction: str) -> bool:
    """Whether the line of (``link``, ``direction``) would sit in the receiver's PREROUTING
    (``hook`` ``in``), the place a wire namespace replaces. False for a link
    :func:`place` refuses. Pure."""
    try:
        return place(plan, link, direction).hook == "in"
    except LabError:
        return False


def places(plan: LabPlan, wanted: Iterable[tuple[str, str]],
           wires: Mapping[str, WireLink] | None = None) -> list[LinePlace]:
    """Places of the ``wanted`` (link name, direction) pairs, queue numbers 0, 1, ... per
    namespace in the order given; ``wires``: the links that run through the wire namespace
    (``Layout.wires``). Raises LabError as :func:`place`."""
    links = {lk.name: lk for lk in plan.links}
    out: list[LinePlace] = []
    used: dict[str, int] = {}
    wires = wires or {}
    for name, d in wanted:
        w = wires.get(name)
        p = place(plan, links[name], d, w.port_from(d) if w else None)
        num = used.get(p.node, 0)
        used[p.node] = num + 1
        out.append(LinePlace(p.link, p.direction, p.node, p.hook, p.dev, p.physdev, num))
    return out


def _held_bytes(shaping: Shaping) -> float:
    rate = shaping.rate_bps or UNSHAPED_LINE_RATE_BPS
    return BDP_FACTOR * rate / 8 * (shaping.delay_s + shaping.jitter_s)


def problems(link: LinkPlan, direction: str, shaping: Shaping) -> list[str]:
    """Why the native line cannot do ``shaping`` on (``link``, ``direction``): refused keys
    (:data:`REFUSED_KEYS`) and a line holding more than :data:`MAX_HELD_BYTES`; sentences
    naming link, direction and key. Empty when it can."""
    where = f"link {link.name} {direction}"
    out = [f"{where}: {key} = {getattr(shaping, key):g}% is not possible on the native delay "
           f"line: {why}; drop the key or use delay_line: netem (on a kernel with netem)"
           for key, why in REFUSED_KEYS.items() if getattr(shaping, key)
           and not (key == "delay_correlation_pct" and not shaping.jitter_s)]
    held = _held_bytes(shaping)
    if held > MAX_HELD_BYTES:
        rate = shaping.rate_bps or UNSHAPED_LINE_RATE_BPS
        out.append(f"{where}: delay {format_duration(shaping.delay_s + shaping.jitter_s)} at "
                   f"{rate / 1e9:g} Gbit/s{'' if shaping.rate_bps else ' (unshaped)'} makes the "
                   f"native delay line hold {held / 2**20:.0f} MiB (2 x rate x delay), beyond its "
                   f"cap of {MAX_HELD_BYTES // 2**20} MiB per direction "
                   "(testbed/delay/nfqueue/labline.py MAX_HELD_BYTES); lower the delay or the rate")
    return out


def plan_problems(plan: LabPlan) -> list[str]:
    """Every reason the native lines of ``plan`` (links with ``delay_line: native``, resolved)
    cannot be made: :func:`problems` of each direction with a delay or impairment, and links
    between two OVS switches (:func:`place`), then :func:`trace_problems`. Pure."""
    out: list[str] = []
    for lk in plan.links:
        if lk.delay_line != "native":
            continue
        for d in ("a_to_b", "b_to_a"):
            if getattr(lk, d).needs_netem:
                out += problems(lk, d, getattr(lk, d))
                try:
                    place(plan, lk, d)
                except LabError as exc:
                    out.append(str(exc))
    return out + trace_problems(plan)


def trace_problems(plan: LabPlan) -> list[str]:
    """Every step of a link trace (one period of a looped one) that the native line of its
    direction could not make when played (testbed/live/trace_player.py): :func:`problems` of the
    shaping after the step (a delay beyond the memory cap), and a delay or loss step on a
    direction that starts without one (the line is made at bring-up only). One sentence per
    trace and reason, naming the trace file, link, direction and the step's time. Pure."""
    links = {lk.name: lk for lk in plan.links}
    out: list[str] = []
    for tr in plan.traces:
        lk = links.get(tr.link)
        if lk is None or lk.delay_line != "native":
            continue
        base = getattr(lk, tr.direction)
        bad: list[tuple[float, list[str]]] = []
        for change in planned_changes([tr], {(tr.link, tr.direction): base},
                                      until_s=tr.period_s):
            if change.loop:  # one period: the next pass repeats it
                break
            if not change.shaping.needs_netem:
                continue
            why = problems(lk, tr.direction, change.shaping)
            if not base.needs_netem:
                why.append(f"link {lk.name} {tr.direction}: it starts without a delay or "
                           "impairment, so no native delay line is made for it at bring-up; "
                           "give it its first delay in the link itself (a later step to 0 "
                           "keeps the line)")
            if why:
                bad.append((change.t_s, why))
        if bad:
            (t_s, why), more = bad[0], len(bad) - 1
            also = f" (and {more} later step{'s' * (more > 1)})" if more else ""
            out.append(f"trace {tr.file}, step at {format_duration(t_s)}{also}: "
                       + "; ".join(why))
    return out


def queue_params(shaping: Shaping, mtu: int, queue_num: int, seed: int = 1,
                 before_queue: bool = False) -> QueueParams:
    """The helper's parameters for ``shaping`` (netem semantics: jitter as netem's; reorder
    gap 1 as tc's default). Packets keep FIFO order unless ``shaping.jitter_reorder``: the
    helper then releases each at its own arrival + drawn delay, so a later packet with a
    smaller draw passes an earlier one, as in netem's time-sorted queue without a rate
    (``reorder_pct`` sends packets at once in either case). Queue length from the BDP
    (:func:`testbed.delay.nfqueue.rules.maxlen_for_bdp`) at the link's rate, or for a line
    before the sender's queue (``before_queue``: its place's hook is ``out``) at
    :data:`UNSHAPED_LINE_RATE_BPS` up to :data:`MAX_HELD_BYTES`.
    Call :func:`problems` first: a refused key raises ValueError here."""
    ge = shaping.loss_gemodel
    dist = shaping.jitter_distribution if shaping.jitter_s else "uniform"
    return QueueParams(
        queue_num=queue_num, delay_s=shaping.delay_s, jitter_s=shaping.jitter_s,
        distribution=dist, reorder_allowed=shaping.jitter_reorder,
        loss_pct=shaping.loss_pct,
        ge_p_pct=ge.p_pct if ge else 0.0, ge_r_pct=ge.r_pct if ge else 0.0,
        ge_1h_pct=ge.bad_loss_pct if ge else 0.0, ge_1k_pct=ge.good_loss_pct if ge else 0.0,
        reorder_pct=shaping.reorder_pct, reorder_gap=1 if shaping.reorder_pct else 0,
        corrupt_pct=shaping.corrupt_pct, duplicate_pct=shaping.duplicate_pct, seed=seed,
        maxlen_packets=_maxlen(shaping, mtu, before_queue))


def _maxlen(shaping: Shaping, mtu: int, before_queue: bool) -> int:
    held_s = shaping.delay_s + shaping.jitter_s
    shaped = maxlen_for_bdp(shaping.rate_bps or UNSHAPED_LINE_RATE_BPS, held_s, mtu, BDP_FACTOR)
    if not before_queue:
        return shaped
    offered = maxlen_for_bdp(UNSHAPED_LINE_RATE_BPS, held_s, mtu, BDP_FACTOR)
    return max(shaped, min(offered, MAX_HELD_BYTES // mtu))


def _rule(p: LinePlace, run_id: str) -> str:
    out = p.hook == "out"
    chain = "POSTROUTING" if out else "PREROUTING"
    if p.physdev:
        match = f"-m physdev --physdev-{'out' if out else 'in'} {p.dev}"
        if out:
            match += " --physdev-is-bridged"
    else:
        match = f"{'-o' if out else '-i'} {p.dev}"
    return (f"-A {chain} {match} -m comment --comment aitb:{run_id} "
            f"-j NFQUEUE --queue-num {p.queue_num}\n")


def restore_text(lines: Iterable[LinePlace], run_id: str) -> str:
    """``iptables-restore --noflush`` (and ip6tables-restore) input adding the rules of
    ``lines`` (all in one namespace) to the mangle table."""
    return "*mangle\n" + "".join(_rule(p, run_id) for p in lines) + "COMMIT\n"


def by_node(lines: Iterable[LinePlace]) -> Mapping[str, list[LinePlace]]:
    """node -> its lines, in order."""
    out: dict[str, list[LinePlace]] = {}
    for p in lines:
        out.setdefault(p.node, []).append(p)
    return out
