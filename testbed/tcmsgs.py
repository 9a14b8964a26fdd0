"""tc objects (:class:`testbed.tc.TcObject`) as rtnetlink messages.

pyroute2 0.9's tc plugins cover HTB, pfifo, fq_codel, ingress, u32 and mirred, but not bfifo,
red, netem's Gilbert-Elliott loss, delay distributions or 64-bit latencies, and its HTB helper
truncates the burst to whole microseconds (0 at 400 Gbit/s). :class:`TcMsg` is pyroute2's
``tcmsg`` with option classes for those kinds; HTB bursts are computed here in scheduler
ticks (64 ns, ``PSCHED_SHIFT`` in include/net/pkt_sched.h).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from pyroute2.netlink import nla
from pyroute2.netlink.rtnl.tcmsg import cls_u32, sched_htb, sched_pfifo, tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import red_eval_ewma, red_eval_idle_damping, red_eval_P

from aitb.errors import LabError

__all__ = ["TcMsg", "handle", "tc_message", "RTM_NEWQDISC", "RTM_NEWTCLASS", "RTM_NEWTFILTER",
           "RTM_DELQDISC", "RTM_GETQDISC", "RTM_GETTCLASS", "pct_u32", "dist_table"]

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_GETTCLASS = 40, 42
RTM_NEWTFILTER = 44
TC_H_ROOT, TC_H_INGRESS = 0xFFFFFFFF, 0xFFFFFFF1
PSCHED_TICK_NS = 64
TC_LINKLAYER_ETHERNET = 1  # tc_ratespec.linklayer, include/uapi/linux/pkt_sched.h
ETH_P_ALL = 0x0003
DIST_DIRS = ("/usr/lib/tc", "/usr/lib/x86_64-linux-gnu/tc", "/usr/lib64/tc", "/usr/share/tc")


class NetemOptions(nla):
    """struct tc_netem_qopt followed by netem attributes (include/uapi/linux/pkt_sched.h)."""

    fields = (("delay", "I"), ("limit", "I"), ("loss", "I"), ("gap", "I"),
              ("duplicate", "I"), ("jitter", "I"))
    nla_map = (
        ("TCA_NETEM_UNSPEC", "none"), ("TCA_NETEM_CORR", "corr"),
        ("TCA_NETEM_DELAY_DIST", "cdata"), ("TCA_NETEM_REORDER", "pair"),
        ("TCA_NETEM_CORRUPT", "pair"), ("TCA_NETEM_LOSS", "loss"),
        ("TCA_NETEM_RATE", "hex"), ("TCA_NETEM_ECN", "uint32"),
        ("TCA_NETEM_RATE64", "uint64"), ("TCA_NETEM_PAD", "hex"),
        ("TCA_NETEM_LATENCY64", "int64"), ("TCA_NETEM_JITTER64", "int64"),
    )

    class corr(nla):
        fields = (("delay_corr", "I"), ("loss_corr", "I"), ("dup_corr", "I"))

    class pair(nla):
        fields = (("probability", "I"), ("correlation", "I"))

    class loss(nla):
        nla_map = (("NETEM_LOSS_UNSPEC", "none"), ("NETEM_LOSS_GI", "hex"),
                   ("NETEM_LOSS_GE", "gemodel"))

        class gemodel(nla):
            fields = (("p", "I"), ("r", "I"), ("h", "I"), ("k1", "I"))


class RedOptions(nla):
    """TCA_RED_PARMS (struct tc_red_qopt), STAB and MAX_P."""

    nla_map = (("TCA_RED_UNSPEC", "none"), ("TCA_RED_PARMS", "parms"),
               ("TCA_RED_STAB", "cdata"), ("TCA_RED_MAX_P", "uint32"))

    class parms(nla):
        fields = (("limit", "I"), ("qth_min", "I"), ("qth_max", "I"), ("Wlog", "B"),
                  ("Plog", "B"), ("Scell_log", "B"), ("flags", "B"))


class HtbOptions(nla):
    """HTB options without rate tables: since Linux 3.x HTB computes its rates from the
    ratespec (``psched_ratecfg_precompute``) and ignores TCA_HTB_RTAB when the ratespec names
    its link layer; pyroute2 would compute two 256-entry tables per class for nothing."""

    nla_map = (("TCA_HTB_UNSPEC", "none"), ("TCA_HTB_PARMS", "parms"),
               ("TCA_HTB_INIT", "glob"), ("TCA_HTB_CTAB", "hex"), ("TCA_HTB_RTAB", "hex"),
               ("TCA_HTB_DIRECT_QLEN", "uint32"), ("TCA_HTB_RATE64", "uint64"),
               ("TCA_HTB_CEIL64", "uint64"))

    class parms(nla):
        fields = tuple((name, fmt) for name, fmt in sched_htb.options.htb_parms.fields)

    class glob(nla):
        fields = sched_htb.options.htb_glob.fields


class TcMsg(tcmsg):
    """pyroute2's tcmsg, with option classes for htb, bfifo, netem and red."""

    # pyroute2 keeps "NLA table compiled" as a class attribute that subclasses inherit: once
    # its own tcmsg has been used in this process (e.g. by the capability probe), TcMsg would
    # reuse tcmsg's table and its option classes, dropping TCA_NETEM_LATENCY64 and friends.
    _nlmsg_base__compiled_nla = False

    @staticmethod
    def get_options(self: Any, *argv: Any, **kwarg: Any) -> Any:  # noqa: D102
        kind = self.get_attr("TCA_KIND")
        own = {"bfifo": sched_pfifo.options, "netem": NetemOptions, "red": RedOptions,
               "htb": HtbOptions}
        return own.get(kind) or tcmsg.get_options(self, *argv, **kwarg)


def handle(text: str) -> int:
    """tc's ``"1:"``/``"1:1"``/``"root"``/``"ingress"`` as the kernel's 32-bit handle."""
    if text == "root":
        return TC_H_ROOT
    if text == "ingress":
        return TC_H_INGRESS
    major, _, minor = text.partition(":")
    return (int(major or "0", 16) << 16) | int(minor or "0", 16)


def pct_u32(pct: float) -> int:
    """A percentage as netem's u32 probability (tc's set_percent: rint(p * UINT32_MAX))."""
    return round(pct / 100 * 0xFFFFFFFF)


def _ticks(seconds: float) -> int:
    return round(seconds * 1e9 / PSCHED_TICK_NS)


def _htb_class(p: dict[str, Any]) -> dict[str, Any]:
    rate, ceil = round(p["rate_bps"] / 8), round(p["ceil_bps"] / 8)
    parms = {"rate": min(rate, 2**32 - 1), "ceil": min(ceil, 2**32 - 1),
             "rate___reserved": TC_LINKLAYER_ETHERNET, "ceil___reserved": TC_LINKLAYER_ETHERNET,
             "buffer": _ticks(p["burst_bytes"] / rate), "cbuffer": _ticks(p["cburst_bytes"] / ceil),
             "quantum": p["quantum_bytes"], "prio": 0}
    attrs: list[list[Any]] = [["TCA_HTB_PARMS", parms]]
    if rate >= 2**32:
        attrs.append(["TCA_HTB_RATE64", rate])
    if ceil >= 2**32:
        attrs.append(["TCA_HTB_CEIL64", ceil])
    return {"attrs": attrs}


def dist_table(name: str) -> bytes:
    """netem's delay distribution table ``name`` (normal, pareto, paretonormal) as the s16
    array the kernel wants, read from iproute2's ``<name>.dist``. Raises LabError if absent."""
    for d in DIST_DIRS:
        path = os.path.join(d, f"{name}.dist")
        if os.path.exists(path):
            with open(path) as f:
                words = [w for line in f if not line.startswith("#") for w in line.split()]
            return b"".join(int(w).to_bytes(2, "little", signed=True) for w in words)
    raise LabError(f"netem distribution table {name}.dist not found in {', '.join(DIST_DIRS)}"
                   " (install iproute2)")


def _netem(p: dict[str, Any]) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "delay": min(_ticks(p["delay_s"]), 2**32 - 1), "jitter": min(_ticks(p["jitter_s"]),
                                                                        2**32 - 1),
        "limit": p["limit_packets"], "loss": pct_u32(p.get("loss_pct", 0.0)), "gap": 0,
        "duplicate": pct_u32(p.get("duplicate_pct", 0.0)),
        "attrs": [["TCA_NETEM_LATENCY64", round(p["delay_s"] * 1e9)],
                  ["TCA_NETEM_JITTER64", round(p["jitter_s"] * 1e9)]]}
    if p.get("delay_correlation_pct"):
        opts["attrs"].append(["TCA_NETEM_CORR", {"delay_corr": pct_u32(
            p["delay_correlation_pct"]), "loss_corr": 0, "dup_corr": 0}])
    if p.get("distribution") not in (None, "uniform"):
        opts["attrs"].append(["TCA_NETEM_DELAY_DIST", dist_table(p["distribution"])])
    if p.get("reorder_pct"):
        opts["gap"] = 1  # as tc: reorder without gap reorders with probability per packet
        opts["attrs"].append(["TCA_NETEM_REORDER", {"probability": pct_u32(p["reorder_pct"]),
                                                    "correlation": 0}])
    if p.get("corrupt_pct"):
        opts["attrs"].append(["TCA_NETEM_CORRUPT", {"probability": pct_u32(p["corrupt_pct"]),
                                                    "correlation": 0}])
    if p.get("loss_gemodel"):
        gp, gr, bad, good = p["loss_gemodel"]
        opts["attrs"].append(["TCA_NETEM_LOSS", {"attrs": [["NETEM_LOSS_GE", {
            "p": pct_u32(gp), "r": pct_u32(gr), "h": 0xFFFFFFFF - pct_u32(bad),
            "k1": pct_u32(good)}]]}])  # tc stores 1-h as h (q_netem.c)
    return opts


def _red(p: dict[str, Any]) -> dict[str, Any]:
    qmin, qmax, avpkt = p["min_bytes"], p["max_bytes"], p["avpkt_bytes"]
    burst = (2 * qmin + qmax) // (3 * avpkt) + 1  # tc-red(8): (2*min+max)/(3*avpkt)
    wlog = red_eval_ewma(qmin, burst, avpkt)
    plog = red_eval_P(qmin, qmax, p["probability"])
    scell, stab = red_eval_idle_damping(wlog, avpkt, (p["bandwidth_bps"] or 10**10) / 8)
    parms = {"limit": p["limit_bytes"], "qth_min": qmin, "qth_max": qmax, "Wlog": wlog,
             "Plog": plog, "Scell_log": scell, "flags": 1 if p["ecn"] else 0}
    return {"attrs": [["TCA_RED_PARMS", parms],
                      ["TCA_RED_STAB", bytes(min(255, int(x)) for x in stab)],
                      ["TCA_RED_MAX_P", int(p["probability"] * 2**32)]]}


def _u32_redirect(p: dict[str, Any], ifindex_of: Callable[[str], int]) -> dict[str, Any]:
    return cls_u32.get_parameters({"target": 0x10001, "keys": ["0x0/0x0+0"], "action": {
        "kind": "mirred", "direction": "egress", "action": "redirect",
        "ifindex": ifindex_of(p["redirect_dev"])}})


def _fq_codel(p: dict[str, Any]) -> dict[str, Any]:
    return {"attrs": [["TCA_FQ_CODEL_LIMIT", p["limit_packets"]],
                      ["TCA_FQ_CODEL_ECN", 1 if p["ecn"] else 0]]}


def _options(obj: Any, ifindex_of: Callable[[str], int]) -> dict[str, Any] | None:
    p = dict(obj.params)
    if obj.kind == "htb":
        if obj.verb == "class":
            return _htb_class(p)
        return {"attrs": [["TCA_HTB_INIT", {"version": 3, "rate2quantum": 10,
                                            "defcls": p["default_class"], "debug": 0,
                                            "direct_pkts": 0}]]}
    builders: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "pfifo": lambda q: {"limit": q["limit_packets"]},
        "bfifo": lambda q: {"limit": q["limit_bytes"]},
        "netem": _netem, "red": _red, "fq_codel": _fq_codel,
        "u32": lambda q: _u32_redirect(q, ifindex_of)}
    return builders[obj.kind](p) if obj.kind in builders else None


def tc_message(obj: Any, ifindex_of: Callable[[str], int]) -> tuple[TcMsg, int]:
    """The request that creates (or, with NLM_F_REPLACE, changes) ``obj`` (a TcObject);
    ``ifindex_of(dev)`` resolves interface names of obj's node. Returns (message, type)."""
    msg = TcMsg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = ifindex_of(obj.dev)
    msg["parent"] = handle(obj.parent)
    msg["handle"] = handle(obj.handle) if obj.handle else 0
    if obj.verb == "filter":
        msg["info"] = (obj.params["prio"] << 16) | socket.htons(ETH_P_ALL)
    msg["attrs"] = [["TCA_KIND", obj.kind]]
    opts = _options(obj, ifindex_of)
    if opts is not None:
        msg["attrs"].append(["TCA_OPTIONS", opts])
    mtype = {"qdisc": RTM_NEWQDISC, "class": RTM_NEWTCLASS, "filter": RTM_NEWTFILTER}[obj.verb]
    return msg, mtype
