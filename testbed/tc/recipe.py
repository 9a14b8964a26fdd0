"""tc recipes as pure data: what one direction of one link needs, before anything is applied.

A :class:`~testbed.tc.objects.DirectionRecipe` lists the queueing objects (qdiscs, classes,
filters) for the traffic that node ``tx`` sends to node ``rx`` over one veth pair. It is built
by a pure function from a :class:`~models.shaping.Shaping` (no root, golden-tested), applied
through netlink by :mod:`testbed.lab.realise` (messages from :mod:`testbed.tc.msgs`), and printed
as equivalent ``tc`` command lines for people and for exports. What each kind's objects hold
is the business of its module in :mod:`testbed.tc.qdiscs`; the delay line's of its backend in
:mod:`testbed.delay`.

Layout (the bottleneck buffer is independent of the delay line, see models/shaping.py)::

    tx egress:  htb 1: (default 1) -> class 1:1 rate=ceil=R -> leaf 10: = the bottleneck buffer
                (the AQM's leaf: pfifo / bfifo / fq_codel / red); a buffer given in packets
                (pfifo), or in bytes too few for two GSO packets (bfifo), hangs below the
                segmenter tbf 9: (parent 9:1), which cuts GSO packets into wire-sized ones
                first (testbed/tc/qdiscs/tbf.py ``segmented``)
    rx ingress: the delay line's backend; for netem: ingress ffff: -> u32 match-all -> mirred
                redirect -> IFB (in rx's namespace), whose netem 1: is the delay line (delay,
                jitter, loss, reorder, duplicate, corrupt), its limit sized so that it never
                drops (see :func:`testbed.tc.qdiscs.netem.netem_limit_packets`)

So queueing drops happen only in the leaf qdisc; netem drops only what its loss model says.
"""

from __future__ import annotations

from models.shaping import Shaping
from testbed import delay as delay_backends
from testbed.tc import qdiscs
from testbed.tc.objects import DirectionRecipe, TcObject
from testbed.tc.qdiscs import htb, tbf
from testbed.tc.qdiscs.common import UNSHAPED_RATE_BPS

__all__ = ["direction_recipe", "SEGMENTER_HANDLE"]


SEGMENTER_HANDLE = "9:"


def _leaf(shaping: Shaping, mtu: int, node: str, dev: str) -> tuple[TcObject, ...]:
    kind, params = qdiscs.aqm(shaping.aqm).leaf(shaping, mtu)
    if not tbf.segmented(shaping, mtu):
        return (TcObject("qdisc", node, dev, "1:1", "10:", kind, params),)
    return (TcObject("qdisc", node, dev, "1:1", SEGMENTER_HANDLE, "tbf", tbf.segmenter(mtu)),
            TcObject("qdisc", node, dev, SEGMENTER_HANDLE + "1", "10:", kind, params))


def _egress(shaping: Shaping, mtu: int, node: str, dev: str) -> tuple[TcObject, ...]:
    if shaping.rate_bps is None and shaping.buffer is None and shaping.aqm == "fifo":
        return ()
    rate = shaping.rate_bps if shaping.rate_bps is not None else UNSHAPED_RATE_BPS
    root, cls = htb.rate_limiter(rate, mtu)
    return (
        TcObject("qdisc", node, dev, "root", "1:", "htb", root),
        TcObject("class", node, dev, "1:", "1:1", "htb", cls),
        *_leaf(shaping, mtu, node, dev),
    )


def direction_recipe(shaping: Shaping, mtu: int, tx: tuple[str, str], rx: tuple[str, str],
                     ifb: str, delay_line: str = delay_backends.DEFAULT) -> DirectionRecipe:
    """The recipe for traffic from ``tx`` = (node, ifname) to ``rx`` = (node, ifname).

    Args: shaping of that direction; mtu of the link (bytes, IP MTU); ifb: the name the IFB
    device gets in rx's namespace if a delay line needs one; delay_line: the backend name in
    :mod:`testbed.delay`. Returns a recipe with no objects for an unshaped direction.
    Pure: no root, no I/O. Raises LabError for an unknown AQM or delay-line backend.
    """
    egress = _egress(shaping, mtu, *tx)
    if not shaping.needs_netem:
        return DirectionRecipe(tx[0], tx[1], rx[0], rx[1], None, egress, ())
    line_ifb, ingress = delay_backends.backend(delay_line).ingress(shaping, mtu, rx, ifb)
    return DirectionRecipe(tx[0], tx[1], rx[0], rx[1], line_ifb, egress, ingress, delay_line)
