"""FRRouting in the routers of a ``routing: frr`` lab (:class:`models.plan.FrrRouting`). Root.

Each router gets its own zebra, bfdd (with ``bfd: true``) and bgpd or ospfd, started by the
lab inside the router's namespace as processes it owns (registered with the run, ended by pid
at teardown and by ``aitb clean``; zebra removes the routes it installed when it ends). Their
configuration files (rendered from the plan by the jinja2 templates in ``frr_templates/``),
pid files, zebra's API socket, bfdd's control socket, the vty sockets (``vtysh --vty_socket
<dir>``) and logs live in ``<state_dir>/<run_id>/frr/<node>/``, removed with the run; nothing
goes to /etc/frr or /var/run/frr. The daemons run in the foreground (no ``-d``), drop to
Debian's ``frr`` user (which owns the router's directory; the vty sockets need its
``frrvty`` group), and open no vty TCP port (``-P 0``).

BGP (RFC 4271, RFC 7938's eBGP-per-router design): router k of the plan (routers in plan
order, from 0) has the private ASN ``ASN_BASE + k`` (RFC 6996); one numbered session per
router-to-router link (the link's addresses), every connected subnet redistributed,
``maximum-paths`` with ``as-path multipath-relax`` so that equal-length paths through
different neighbours form one multipath route; BFD (RFC 5880) on each session through the
profile ``aitb``. OSPF: every interface in area 0, point-to-point towards a single router,
passive towards hosts.

Convergence is read from the kernel, not from the daemons: a router has converged at
bring-up once its main table holds a route to every link subnet of the plan it is not on
(:func:`wanted_destinations`); after an event once its table (routes, next hops and their
flags) stayed unchanged for ``settle_s`` (:class:`ConvergenceWatch`).
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from models.errors import LabError
from models.plan import FrrRouting, LabPlan, NodePlan
from testbed.ns import netns
from testbed.ns.nl import dump
from testbed.routing.routes import RTM_GETROUTE, dumped_route_key

Lab = Any  # testbed.lab.lab.Lab, which calls this module (no import back: no cycle)

__all__ = ["DAEMON_DIR", "ASN_BASE", "daemons_of", "missing_daemons", "routed_by_frr",
           "router_configs", "wanted_destinations", "start", "check_alive",
           "wait_converged", "table", "expected_hops", "ConvergenceWatch", "RTPROT_BGP",
           "RTPROT_OSPF"]

DAEMON_DIR = Path("/usr/lib/frr")  # Debian's frr package
ASN_BASE = 4200000000  # RFC 6996 private 4-byte ASNs 4200000000-4294967294
FRR_USER = "frr"  # the user and group Debian's frr package creates
START_TIMEOUT_S = 10.0
POLL_S = 0.01  # the convergence poll: one main-table dump per router
RTPROT_BGP, RTPROT_OSPF = 186, 188  # include/uapi/linux/rtnetlink.h
RT_TABLE_MAIN = 254
RTNH_F_DEAD, RTNH_F_LINKDOWN = 1, 16
_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("frr_templates"))),
    undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    keep_trailing_newline=True, autoescape=False)


def daemons_of(routing: FrrRouting) -> list[str]:
    """The daemons of each router, in start order: zebra, bfdd (with bfd), bgpd or ospfd."""
    return ["zebra", *(["bfdd"] if routing.bfd else []), f"{routing.protocol}d"]


def missing_daemons(routing: FrrRouting) -> list[str]:
    """The daemon executables ``routing`` needs that this machine lacks (paths)."""
    return [str(DAEMON_DIR / d) for d in daemons_of(routing)
            if not os.access(DAEMON_DIR / d, os.X_OK)]


def routed_by_frr(plan: LabPlan, node: NodePlan) -> bool:
    """True when ``node``'s routes come from FRR (a router of a ``routing: frr`` plan): the
    lab then installs none of its planned static routes."""
    return plan.routing is not None and node.kind == "router"


@dataclass(frozen=True, slots=True)
class _Peer:
    node: str
    ifname: str
    address: str
    asn: int


@dataclass(frozen=True, slots=True)
class _Iface:
    ifname: str
    peers: tuple[_Peer, ...] = field(default_factory=tuple)


def _routers(plan: LabPlan) -> list[NodePlan]:
    return [n for n in plan.nodes if n.kind == "router"]


def _asns(plan: LabPlan) -> dict[str, int]:
    return {n.name: ASN_BASE + k for k, n in enumerate(_routers(plan))}


def _interfaces(plan: LabPlan, node: str, asns: dict[str, int]) -> list[_Iface]:
    """``node``'s addressed interfaces with the routers on the same subnet (its peers)."""
    ends = [ep for lk in plan.links for ep in (lk.a, lk.b) if ep.ipv4 is not None]
    out = []
    for ep in ends:
        if ep.node != node:
            continue
        assert ep.ipv4 is not None
        peers = tuple(_Peer(o.node, ep.ifname, str(o.ipv4.ip), asns[o.node])
                      for o in ends if o.node != node and o.node in asns
                      and o.ipv4 is not None and o.ipv4.network == ep.ipv4.network)
        out.append(_Iface(ep.ifname, peers))
    return out


def router_configs(plan: LabPlan, run_id: str) -> dict[str, dict[str, str]]:
    """router -> daemon -> its configuration file's text, rendered from the plan (pure).
    Raises ValueError for a plan without ``routing``."""
    if plan.routing is None:
        raise ValueError(f"lab {plan.name} has no routing: frr")
    r = plan.routing
    asns = _asns(plan)
    out: dict[str, dict[str, str]] = {}
    for n in _routers(plan):
        ifaces = _interfaces(plan, n.name, asns)
        rid = plan.address_of(n.name)
        ctx = {"node": n.name, "run_id": run_id, "routing": r, "asn": asns[n.name],
               "router_id": str(rid), "interfaces": ifaces,
               "peers": [p for i in ifaces for p in i.peers],
               "bfd_interval_ms": round(r.bfd_interval_s * 1000)}
        out[n.name] = {d: _TEMPLATES.get_template(f"{d}.conf.j2").render(**ctx)
                       for d in daemons_of(r)}
    return out


def wanted_destinations(plan: LabPlan, node: str) -> set[str]:
    """The IPv4 link subnets of ``plan`` that ``node`` is not on: what a converged router's
    main table holds a route to (every router redistributes or announces its subnets)."""
    own = {str(ep.ipv4.network) for lk in plan.links_of(node) for ep in (lk.a, lk.b)
           if ep.node == node and ep.ipv4 is not None}
    return {str(ep.ipv4.network) for lk in plan.links for ep in (lk.a, lk.b)
            if ep.ipv4 is not None} - own


@dataclass(slots=True)
class FrrRouter:
    """One router's daemons: their run directory and processes (daemon -> Popen)."""

    node: str
    dir: Path
    procs: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)

    def log_lines(self, daemon: str) -> list[str]:
        """The lines of ``daemon``'s log so far (none if it has no log yet)."""
        try:
            return (self.dir / f"{daemon}.log").read_text(errors="replace").splitlines()
        except OSError:
            return []

    def log_tail(self, daemon: str, lines: int = 5) -> str:
        """The last ``lines`` lines of ``daemon``'s log (empty if none)."""
        try:
            text = (self.dir / f"{daemon}.log").read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])


def _argv(daemon: str, d: Path) -> list[str]:
    argv = [str(DAEMON_DIR / daemon), "-f", str(d / f"{daemon}.conf"),
            "-i", str(d / f"{daemon}.pid"), "-z", str(d / "zserv.api"),
            "--vty_socket", str(d), "-u", FRR_USER, "-g", FRR_USER, "-P", "0",
            "--log", f"file:{d / (daemon + '.log')}", "--log-level", "info"]
    if daemon == "bfdd":
        argv += ["--bfdctl", str(d / "bfdd.sock")]
    return argv


def _wait_file(path: Path, router: FrrRouter, daemon: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    proc = router.procs[daemon]
    while not path.exists():
        if proc.poll() is not None:
            raise LabError(f"router {router.node}: FRR {daemon} exited with status "
                           f"{proc.returncode} at start: {router.log_tail(daemon)}")
        if time.monotonic() > deadline:
            raise LabError(f"router {router.node}: FRR {daemon} did not create {path} "
                           f"within {START_TIMEOUT_S:g} s: {router.log_tail(daemon)}")
        time.sleep(0.01)


CRASH_DIR = Path("/var/tmp/frr")  # FRR's <daemon>.<pid> crash logs (not configurable)


def start(lab: Lab) -> dict[str, FrrRouter]:
    """Write every router's configuration and start its daemons in its namespace (each
    registered with the lab before it execs, :meth:`testbed.lab.lab.Lab.popen`); waits for
    zebra's API socket before the others start and for every pid file. Returns router ->
    :class:`FrrRouter`. Raises LabError naming the router and daemon (with its log's last
    lines) when one exits or stalls; the lab's teardown ends what did start."""
    configs = router_configs(lab.plan, lab.run_id)
    try:
        who = pwd.getpwnam(FRR_USER)
    except KeyError:
        raise LabError(f"{lab.plan.source}: routing: frr needs the user {FRR_USER!r} of "
                       "Debian's frr package (scripts/setup.sh installs it)") from None
    blocked = _unreachable(lab.registry.dir, who)
    if blocked is not None:
        raise LabError(f"routing: frr: the FRR daemons run as user {FRR_USER} and cannot "
                       f"reach the run's state directory {lab.registry.dir}: {blocked} is "
                       f"mode {blocked.stat().st_mode & 0o777:o} (use a state directory "
                       "others may traverse, such as the default /run/aitb)")
    out: dict[str, FrrRouter] = {}
    for node, files in configs.items():
        d = lab.registry.dir / "frr" / node
        d.mkdir(parents=True, mode=0o750, exist_ok=True)
        os.chown(d, who.pw_uid, who.pw_gid)  # the daemons write pid files and sockets
        router = out[node] = FrrRouter(node, d)
        lab.frr[node] = router
        for daemon, text in files.items():
            (d / f"{daemon}.conf").write_text(text)
        for daemon in files:
            with (d / f"{daemon}.out").open("wb") as log:
                router.procs[daemon] = lab.popen(node, _argv(daemon, d), stdin=subprocess.DEVNULL,
                                                 stdout=log, stderr=subprocess.STDOUT)
            # FRR's crash-log directory, which it removes only when it ends cleanly: the
            # lab's teardown (and aitb clean) removes it after a SIGKILL too
            lab.registry.append([{"kind": "path", "node": node, "path": str(
                CRASH_DIR / f"{daemon}.{router.procs[daemon].pid}")}])
            _wait_file(d / (f"{daemon}.pid" if daemon != "zebra" else "zserv.api"), router,
                       daemon)
    for router in out.values():
        for daemon in router.procs:
            _wait_file(router.dir / f"{daemon}.pid", router, daemon)
    # a daemon reads its file before it writes its pid file, and goes on past a line it
    # does not know (logging it): such a line is an error of the rendered configuration
    bad = [f"router {r.node}: FRR {d} refused its configuration: {line.split('] ', 2)[-1]}"
           for r in out.values() for d in r.procs for line in r.log_lines(d)
           if "No such command" in line or "Unknown command" in line]
    if bad:
        raise LabError("\n  ".join(["FRR configuration errors:", *bad[:10]]))
    return out


def _unreachable(path: Path, who: pwd.struct_passwd) -> Path | None:
    """The first directory from / down to ``path`` that user ``who`` may not traverse
    (by owner, group or other execute bit), or None."""
    for d in reversed([path, *path.parents]):
        st = d.stat()
        if st.st_uid == who.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == who.pw_gid:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return d
    return None


def check_alive(lab: Lab) -> list[str]:
    """Every FRR daemon of ``lab`` that has exited, as a sentence naming router and daemon."""
    return [f"router {r.node}: FRR {d} exited with status {p.returncode}: {r.log_tail(d)}"
            for r in lab.frr.values() for d, p in r.procs.items() if p.poll() is not None]


def table(sock: socket.socket, node: str) -> dict[str, tuple[frozenset[Any], int, int]]:
    """``node``'s IPv4 main table: dst -> (next hops (oif, gateway, weight), their flags
    or-ed, protocol), read with one rtnetlink dump on ``sock``."""
    req = rtmsg()
    req["family"], req["table"] = socket.AF_INET, RT_TABLE_MAIN
    out = {}
    for m in dump(sock, req, RTM_GETROUTE, f"node {node}"):
        if m["table"] != RT_TABLE_MAIN or m.get_attr("RTA_TABLE") not in (None, RT_TABLE_MAIN):
            continue
        dst, hops = dumped_route_key(m)
        flags = m["flags"]
        for h in m.get_attr("RTA_MULTIPATH") or ():
            flags |= h["flags"]
        out[dst] = (hops, flags, m["proto"])
    return out


def expected_hops(lab: Lab, node: str) -> dict[str, frozenset[int]]:
    """What a converged ``node`` forwards through, from the plan and the links now up: for
    each of its :func:`wanted_destinations` not on a down link, the interface indexes of
    the plan's shortest-path next hops towards it (its planned route's) on links that are
    up; a destination whose planned next hops are all down expects a route through any
    interface (empty set). The plan's paths count link costs, BGP's AS-path hops: with link
    costs other than 1 a BGP lab may prefer other paths than these."""
    n = lab.plan.node(node)
    down_nets = {str(ep.ipv4.network) for lk in lab.plan.links if lk.name in lab.down_links
                 for ep in (lk.a, lk.b) if ep.ipv4 is not None}
    down_ifs = {lk.endpoint(node).ifname for lk in lab.plan.links_of(node)
                if lk.name in lab.down_links}
    layout = lab.layout.node(node)
    out = {}
    for dst in wanted_destinations(lab.plan, node) - down_nets:
        net = ipaddress.ip_network(dst)
        routes = [r for r in n.routes if r.dst.version == 4 and net.subnet_of(r.dst)]  # type: ignore[arg-type]
        best = max(routes, key=lambda r: r.dst.prefixlen, default=None)
        hops = {layout.ifindex(h.ifname) for h in (best.nexthops if best else ())
                if h.ifname not in down_ifs}
        out[dst] = frozenset(hops)
    return out


def _lacking(t: dict[str, tuple[frozenset[Any], int, int]], want: dict[str, frozenset[int]]
             ) -> list[str]:
    """The destinations of ``want`` that table ``t`` lacks a live route to, or whose live
    next hops miss one of the expected interfaces."""
    out = []
    for dst, ifs in want.items():
        hops, flags, _ = t.get(dst, (frozenset(), RTNH_F_DEAD, 0))
        if flags & (RTNH_F_DEAD | RTNH_F_LINKDOWN) and len(hops) <= 1:
            out.append(dst)
        elif not ifs <= {h[0] for h in hops}:
            out.append(dst)
    return out


def _sockets(lab: Lab) -> dict[str, socket.socket]:
    """A fresh rtnetlink socket per router (the lab's own stay free for its other users)."""
    return {n.name: netns.socket_in(lab.node_io(n.name).fd) for n in _routers(lab.plan)}


def wait_converged(lab: Lab, timeout_s: float | None = None) -> float:
    """Wait until every router's main table has a live route to each of its
    :func:`wanted_destinations` through (at least) the plan's next hops
    (:func:`expected_hops`): every BGP session or OSPF adjacency of the multipath routes is
    up. Returns the seconds waited. Raises LabError naming each router still lacking
    destinations after ``timeout_s`` (default: the plan's ``converge_timeout_s``) with a few
    of them, or a daemon that exited meanwhile."""
    assert lab.plan.routing is not None
    timeout_s = lab.plan.routing.converge_timeout_s if timeout_s is None else timeout_s
    socks = _sockets(lab)
    t0 = time.monotonic()
    try:
        while True:
            missing = {}
            for node, sock in socks.items():
                lack = _lacking(table(sock, node), expected_hops(lab, node))
                if lack:
                    missing[node] = sorted(lack)
            if not missing:
                return time.monotonic() - t0
            dead = check_alive(lab)
            if dead:
                raise LabError("FRR daemons ended before the routes converged:\n  "
                               + "\n  ".join(dead))
            if time.monotonic() - t0 > timeout_s:
                raise LabError(
                    f"lab {lab.plan.name}: FRR routes did not converge within {timeout_s:g} s "
                    "(routing.converge_timeout): " + "; ".join(
                        f"router {n} has no route (or not all planned next hops) to "
                        f"{', '.join(m[:4])}"
                        + (f" and {len(m) - 4} more" if len(m) > 4 else "")
                        for n, m in sorted(missing.items())))
            time.sleep(0.05)
    finally:
        for s in socks.values():
            s.close()


class ConvergenceWatch:
    """Time until every router's forwarding table is stable again after an event that began
    at ``began`` (``time.monotonic()`` seconds): a thread dumps each router's main table
    every :data:`POLL_S`; a router's convergence is the time of the last change it showed
    (routes, next hops or their dead/linkdown flags) after ``began`` (or the first dump's
    time when nothing changed), once every router forwards as the plan's shortest paths over
    the links now up say (:func:`expected_hops`) and no table changed for the plan's
    ``settle_s``.
    Gives up after ``converge_timeout_s`` (``converged: false``). ``on_done(result)`` is
    called from the thread with ``{"convergence": {router: s}, "convergence_s": max,
    "settle_s": ..., "converged": bool}`` (or ``{"error": ...}``)."""

    def __init__(self, lab: Lab, began: float, on_done: Callable[[dict[str, Any]], None]
                 ) -> None:
        assert lab.plan.routing is not None
        self.lab = lab
        self.settle_s = lab.plan.routing.settle_s
        self.timeout_s = lab.plan.routing.converge_timeout_s
        self.began = began
        self.on_done = on_done
        self.socks = _sockets(lab)
        self.result: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="frr-convergence", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the result, then stop polling (a result not reached
        by then is reported with ``converged: false``)."""
        self._thread.join(timeout_s)
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            self.result = self._watch()
        except Exception as exc:  # noqa: BLE001 - handed to on_done, which records it
            self.result = {"error": f"convergence watch: {exc}"}
        finally:
            for s in self.socks.values():
                s.close()
        self.on_done(self.result)

    def _watch(self) -> dict[str, Any]:
        last: dict[str, Any] = {}
        changed: dict[str, float] = {}
        converged = False
        while True:
            now = time.monotonic()
            lacking = False
            for node, sock in self.socks.items():
                t = table(sock, node)
                if node not in last or t != last[node]:
                    last[node] = t
                    changed[node] = now
                lacking = lacking or bool(_lacking(t, expected_hops(self.lab, node)))
            if not lacking and now - max(changed.values()) >= self.settle_s:
                converged = True
                break
            if self._stop.is_set() or now - self.began > self.timeout_s:
                break
            time.sleep(POLL_S)
        per = {n: round(max(0.0, t - self.began), 4) for n, t in sorted(changed.items())}
        return {"convergence": per, "convergence_s": max(per.values()),
                "settle_s": self.settle_s, "converged": converged}
