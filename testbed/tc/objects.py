"""The data types of a tc recipe: one :class:`TcObject` (qdisc, class or filter) and the
:class:`DirectionRecipe` of one link direction. Pure: built by :mod:`testbed.tc.recipe`, turned into
netlink by :mod:`testbed.tc.msgs`, applied by :mod:`testbed.lab.realise`, read back by
:mod:`testbed.lab.verify`; each kind's words come from its module in :mod:`testbed.tc.qdiscs`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from testbed.tc import qdiscs

__all__ = ["TcObject", "DirectionRecipe", "Verb"]

Verb = Literal["qdisc", "class", "filter"]


@dataclass(frozen=True, slots=True)
class TcObject:
    """One qdisc, class or filter on interface ``dev`` of node ``node``.

    parent/handle use tc's spelling (``"root"``, ``"ingress"``, ``"1:"``, ``"1:1"``); params
    hold numbers whose unit is in the key (``rate_bps``, ``limit_packets``, ``delay_s``).
    """

    verb: Verb
    node: str
    dev: str
    parent: str
    handle: str | None
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def tc_argv(self, action: str = "add") -> list[str]:
        """The equivalent ``tc`` command (argv list, without ``ip netns exec``).

        Raises LabError for a kind no module of :mod:`testbed.tc.qdiscs` handles."""
        where = [self.parent] if self.parent in ("root", "ingress") else ["parent", self.parent]
        head = ["tc", self.verb, action, "dev", self.dev, *where]
        words = qdiscs.module(self.kind).words(self)
        if self.verb == "filter":
            return head + words
        ident = ["handle", self.handle] if self.verb == "qdisc" and self.handle else []
        if self.verb == "class":
            ident = ["classid", self.handle or ""]
        return head + ident + [self.kind] + words


@dataclass(frozen=True, slots=True)
class DirectionRecipe:
    """Everything one direction of a link needs: objects on ``tx`` and on ``rx``.

    ifb: name of the IFB device to create in ``rx``'s namespace (``None`` without delay line).
    egress: objects on tx's interface; ingress: objects on rx's interface and on the IFB.
    delay_line: the :mod:`testbed.delay` backend of the delay line (``None`` without one).
    """

    tx_node: str
    tx_dev: str
    rx_node: str
    rx_dev: str
    ifb: str | None
    egress: tuple[TcObject, ...]
    ingress: tuple[TcObject, ...]
    delay_line: str | None = None

    def objects(self) -> tuple[TcObject, ...]:
        """Egress then ingress objects, in the order they must be created."""
        return self.egress + self.ingress

    def kinds(self) -> set[str]:
        """Qdisc/filter kinds this recipe needs from the kernel (for capability checks)."""
        return {o.kind for o in self.objects()}

    def needs_netem(self) -> bool:
        """True when the recipe has a delay line (netem)."""
        return self.ifb is not None

    def commands(self) -> list[list[str]]:
        """Equivalent commands for people: ``ip netns exec``-less argv lists, in order."""
        out = [o.tc_argv() for o in self.egress]
        if self.ifb:
            out.append(["ip", "link", "add", self.ifb, "type", "ifb"])
            out.append(["ip", "link", "set", self.ifb, "up"])
        return out + [o.tc_argv() for o in self.ingress]
