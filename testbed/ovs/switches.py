"""Open vSwitch switches of a lab (``datapath: ovs``): daemons, bridge, ports, rules. Root.

Each OVS switch gets its own ``ovsdb-server`` and ``ovs-vswitchd``, started by the lab inside
the switch's namespace as processes it owns (registered, ended by pid at teardown), with their
own run directory ``<state_dir>/<run_id>/ovs/<node>/`` (database, sockets, logs; removed with
the run). The bridge ``ovsbr`` uses the datapath :mod:`testbed.ovs.datapath` chose for the
switch: the kernel's (``datapath_type=system``: vswitchd makes the datapath ``ovs-system``
in the switch's namespace, where it dies with the namespace) or OVS's user-space one
(``netdev``: no kernel module needed). Since vswitchd runs and opens the ports in the
switch's namespace, nothing of the switch exists in the host's namespace. The rules
come from :mod:`testbed.ovs.flows` (OpenFlow 1.3: select groups) and are read back.

Control commands (``ovs-vsctl``, ``ovs-ofctl``) talk to the daemons over the Unix sockets in
the run directory; they are argv lists whose exit status is checked.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from models.errors import LabError
from models.plan import LabPlan
from testbed.ns.procs import run_checked
from testbed.ovs.flows import OvsRules, port_numbers

__all__ = ["OVS_BRIDGE", "SCHEMA", "OvsDaemons", "start_daemons", "configure", "check",
           "ofctl", "appctl", "controller_target"]

OVS_BRIDGE = "ovsbr"
SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
OF_VERSIONS = "OpenFlow10,OpenFlow13,OpenFlow15"
GROUPS_OF = "OpenFlow15"  # a select group's selection_method and fields (ovs-ofctl(8))
START_TIMEOUT_S = 10.0
Popen = Callable[..., "subprocess.Popen[Any]"]


class OvsDaemons:
    """Paths of one switch's OVS run directory ``rundir``."""

    def __init__(self, node: str, rundir: Path) -> None:
        self.node, self.rundir = node, rundir
        self.db = rundir / "conf.db"
        self.sock = rundir / "db.sock"

    def env(self) -> dict[str, str]:
        """Environment that points every OVS program at this run directory."""
        d = str(self.rundir)
        return {**os.environ, "OVS_RUNDIR": d, "OVS_DBDIR": d, "OVS_LOGDIR": d,
                "OVS_SYSCONFDIR": d}

    def vsctl(self, *args: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """``ovs-vsctl ARGS`` against this switch's database; raises CommandError."""
        return _run(["ovs-vsctl", f"--db=unix:{self.sock}", f"--timeout={int(timeout_s)}",
                     *args], self, timeout_s + 5)

    def mgmt(self) -> str:
        """The OpenFlow management socket of the bridge (for ``ovs-ofctl``)."""
        return f"unix:{self.rundir / (OVS_BRIDGE + '.mgmt')}"


def _run(argv: Sequence[str], d: OvsDaemons, timeout_s: float = 30.0,
         stdin: str | None = None) -> str:
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=d.env())
    if stdin is not None:
        proc.stdin.write(stdin)  # type: ignore[union-attr]
    proc.stdin.close()  # type: ignore[union-attr]
    proc.stdin = None
    return run_checked(proc, argv, f"OVS of node {d.node}", timeout_s).stdout


def start_daemons(node: str, rundir: Path, popen: Popen) -> OvsDaemons:
    """Create the database and start ovsdb-server and ovs-vswitchd for ``node``; ``popen``
    starts argv inside the switch's namespace and registers the process with the lab (e.g.
    ``functools.partial(lab.popen, node)``). Raises LabError/CommandError if they do not
    come up within :data:`START_TIMEOUT_S`."""
    d = OvsDaemons(node, rundir)
    rundir.mkdir(parents=True, exist_ok=True)
    _run(["ovsdb-tool", "create", str(d.db), str(SCHEMA)], d)
    log = open(rundir / "daemons.log", "ab")  # noqa: SIM115 - inherited by the daemons
    try:
        popen(["ovsdb-server", str(d.db), f"--remote=punix:{d.sock}",
               f"--unixctl={rundir / 'ovsdb-server.ctl'}", "--no-chdir",
               f"--log-file={rundir / 'ovsdb-server.log'}"], stdout=log, stderr=log,
              env=d.env())
        _wait_for(d.sock, node)
        d.vsctl("--no-wait", "init", "--", "set", "Open_vSwitch", ".",
                "other_config:userspace-tso-enable=true")
        popen(["ovs-vswitchd", f"unix:{d.sock}", f"--unixctl={rundir / 'ovs-vswitchd.ctl'}",
               "--no-chdir", f"--log-file={rundir / 'ovs-vswitchd.log'}"],
              stdout=log, stderr=log, env=d.env())
    finally:
        log.close()
    return d


def _wait_for(path: Path, node: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise LabError(f"node {node}: ovsdb-server made no socket {path} within "
                           f"{START_TIMEOUT_S:g} s (see {path.parent}/daemons.log)")
        time.sleep(0.01)


def configure(d: OvsDaemons, plan: LabPlan, rules: OvsRules,
              controller: str | None = None, datapath: str = "netdev") -> None:
    """Bridge :data:`OVS_BRIDGE` (``datapath``: ``system`` the kernel's, ``netdev`` the
    user-space one; secure fail mode, OpenFlow 1.3) with
    the switch's ports at fixed OpenFlow numbers, then its groups and flows. Ports get the
    ``linux-noop`` QoS, so that OVS leaves the qdiscs aitb puts on them alone (without a QoS
    record it deletes any qdisc it finds; ovs-vswitchd.conf.db(5), QoS type linux-noop);
    add the ports before the tc recipes all the same (adding a port also drops its ingress
    qdisc, the policing reset). ``controller``: an OpenFlow controller the bridge also
    connects to, see :func:`controller_target` (its rules come on top of aitb's; in secure
    fail mode aitb's stay when it is unreachable). ovs-vsctl waits
    until ovs-vswitchd has applied it. Raises CommandError naming the failing command."""
    args = ["--", "add-br", OVS_BRIDGE, "--", "set", "bridge", OVS_BRIDGE,
            f"datapath_type={datapath}", "fail-mode=secure", f"protocols={OF_VERSIONS}",
            "--", "--id=@noop", "create", "qos", "type=linux-noop"]
    for ifname, number in port_numbers(plan, d.node).items():
        args += ["--", "add-port", OVS_BRIDGE, ifname, "--", "set", "interface", ifname,
                 f"ofport_request={number}", "--", "set", "port", ifname, "qos=@noop"]
    if controller:
        args += ["--", "set-controller", OVS_BRIDGE, controller_target(controller)]
    d.vsctl(*args)
    if rules.groups:
        ofctl(d, "add-groups", "-", stdin="\n".join(rules.groups) + "\n", version=GROUPS_OF)
    ofctl(d, "add-flows", "-", stdin="\n".join(rules.flows) + "\n")


def controller_target(controller: str) -> str:
    """OVS's controller target for ``controller``: ``unix:PATH`` (a controller in any
    namespace: the socket is a file), ``tcp:HOST:PORT`` or ``ssl:...`` as given, and a bare
    ``HOST:PORT`` as ``tcp:HOST:PORT`` (reached from the switch's namespace, i.e. a controller
    inside the lab)."""
    return controller if controller.split(":", 1)[0] in ("unix", "tcp", "ssl") \
        else f"tcp:{controller}"


def appctl(d: OvsDaemons, *args: str) -> str:
    """``ovs-appctl -t <this switch's vswitchd> ARGS``; its stdout. Raises CommandError."""
    return _run(["ovs-appctl", "-t", str(d.rundir / "ovs-vswitchd.ctl"), *args], d)


def ofctl(d: OvsDaemons, command: str, *args: str, stdin: str | None = None,
          version: str = "OpenFlow13") -> str:
    """``ovs-ofctl -O VERSION COMMAND <bridge> ARGS`` on this switch; its stdout."""
    return _run(["ovs-ofctl", "-O", version, command, d.mgmt(), *args], d, stdin=stdin)


def check(d: OvsDaemons, plan: LabPlan, rules: OvsRules, controller: str | None = None
          ) -> list[str]:
    """Read the switch back: each port at its OpenFlow number, as many groups and flows as
    planned, and the controller. Returns the differences as sentences."""
    problems = []
    want = controller_target(controller) if controller else ""
    got_ctl = d.vsctl("get-controller", OVS_BRIDGE).strip()
    if got_ctl != want:
        problems.append(f"node {d.node}: OVS controller is {got_ctl!r}, planned {want!r}")
    for ifname, number in port_numbers(plan, d.node).items():
        got = d.vsctl("get", "interface", ifname, "ofport").strip()
        if got != str(number):
            problems.append(f"node {d.node}: OVS port {ifname} has OpenFlow number {got}, "
                            f"planned {number}")
    n_flows = sum(1 for line in ofctl(d, "dump-flows").splitlines() if "actions=" in line)
    groups = [line for line in ofctl(d, "dump-groups", version=GROUPS_OF).splitlines()
              if "group_id=" in line]
    if (n_flows, len(groups)) != (len(rules.flows), len(rules.groups)):
        problems.append(f"node {d.node}: OVS has {n_flows} flows and {len(groups)} groups, "
                        f"planned {len(rules.flows)} and {len(rules.groups)}")
    # each group's type and hash (what precedes its buckets): an OpenFlow before 1.5 would
    # have dropped the selection method without a word
    got = {g.strip().split(",bucket=")[0] for g in groups}
    for r in rules.groups:
        head = r.split(",bucket=")[0]
        if head not in got:
            problems.append(f"node {d.node}: OVS has no group {head}")
    return problems
