"""One module per tc discipline, behind one registry (kind name -> module).

**To add a qdisc: one module here + one line in** :data:`MODULES` **below.** An AQM (a leaf
that takes the place of the bottleneck fifo) also puts its name in the
``models.shaping.Aqm`` Literal, the spec side that the ground validates without root;
tests/unit/test_qdisc_registry.py checks that both lists agree and that every module has the
whole interface.

A discipline module holds everything aitb knows about its kind, by phase:

- ``KINDS``: the kernel's ``TCA_KIND`` names it handles (pfifo and bfifo share sch_fifo.c);
- ``CAPABILITIES``: the names :mod:`testbed.host.capabilities` probes and ``aitb doctor`` lists;
- ``KMODS``: the kernel modules the stock-kernel VM loads (:mod:`testbed.vm.boot`);
- ``NLA``: kind -> pyroute2 option class that decodes its ``TCA_OPTIONS`` (:mod:`testbed.tc.msgs`);
- ``AQM`` and ``leaf(shaping, mtu) -> (kind, params)`` (AQMs only): the recipe of the
  bottleneck buffer, pure data (:mod:`testbed.tc.recipe`);
- ``words(obj)``: its ``tc`` command-line words (:meth:`testbed.tc.objects.TcObject.tc_argv`);
- ``options(obj, ifindex_of)``: its netlink ``TCA_OPTIONS`` (:func:`testbed.tc.msgs.tc_message`);
- ``problems(obj, opts)``: readback against the plan (:mod:`testbed.lab.verify`);
- ``stats(opts)``: what the lab state shows beyond the counters (:mod:`testbed.lab.state`).

``obj`` is a :class:`testbed.tc.objects.TcObject`; ``opts`` its dumped ``TCA_OPTIONS``.
Where the delay line sits (IFB, or a user-space queue) is not a discipline: see
:mod:`testbed.delay`.
"""

from __future__ import annotations

import difflib
from types import ModuleType

from models.errors import LabError
from testbed.tc.qdiscs import fifo, fq_codel, head_drop, htb, ingress, netem, red, tbf, u32

__all__ = ["MODULES", "BY_KIND", "AQM_MODULES", "module", "aqm", "known", "nla_options",
           "capabilities", "kernel_modules", "unknown_name_error"]

MODULES: tuple[ModuleType, ...] = (  # order: the order `aitb doctor` lists capabilities in
    htb,
    tbf,
    netem,
    fq_codel,
    red,
    fifo,
    head_drop,
    ingress,
    u32,
)
BY_KIND: dict[str, ModuleType] = {kind: m for m in MODULES for kind in m.KINDS}
AQM_MODULES: dict[str, ModuleType] = {m.AQM: m for m in MODULES if hasattr(m, "AQM")}


def unknown_name_error(what: str, name: str, known_names: list[str]) -> LabError:
    """A LabError (exit code 2: bad input) for an unknown ``what`` ``name``, with the closest
    known name as a "did you mean" and the list of the valid ones."""
    close = difflib.get_close_matches(name, known_names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    err = LabError(f"unknown {what} {name!r}{hint}; known: {', '.join(sorted(known_names))}")
    err.exit_code = 2
    return err


def module(kind: str) -> ModuleType:
    """The module of tc kind ``kind``. Raises LabError listing the known kinds."""
    try:
        return BY_KIND[kind]
    except KeyError:
        raise unknown_name_error("qdisc kind", kind, list(BY_KIND)) from None


def aqm(name: str) -> ModuleType:
    """The module realising ``Shaping.aqm`` ``name``. Raises LabError listing the known AQMs."""
    try:
        return AQM_MODULES[name]
    except KeyError:
        raise unknown_name_error("aqm", name, list(AQM_MODULES)) from None


def known(kind: str | None) -> ModuleType | None:
    """The module of ``kind`` or None: for kinds read from the kernel (noqueue, clsact, ...)."""
    return BY_KIND.get(kind or "")


def nla_options(kind: str | None) -> type | None:
    """aitb's own decoder of ``kind``'s TCA_OPTIONS, or None to use pyroute2's."""
    m = known(kind)
    return m.NLA.get(kind) if m is not None else None


def capabilities() -> tuple[str, ...]:
    """The qdisc capability names ``aitb doctor`` probes, in :data:`MODULES` order."""
    return tuple(c for m in MODULES for c in m.CAPABILITIES)


def kernel_modules() -> tuple[str, ...]:
    """The kernel modules the disciplines need on a modular (stock) kernel."""
    return tuple(k for m in MODULES for k in m.KMODS)
