"""How long a link that an event took down is still sent into: the window from ``link_down``
returning (:meth:`testbed.lab.lab.Lab.set_links`) to the last packet the far end's node sent
into it, with static ECMP routes (examples/dci_failover.yaml) and with FRRouting
(examples/dci_failover_frr.yaml: eBGP with BFD).

Usage (root, host kernel): .venv/bin/python bench/link_down.py [--trials 10] [--pps 20000]
    [--modes carrier,synced] [--routing static,frr]

The lab is the example's plan: two DCs joined by two DCIs, ECMP at the border routers. A UDP
stream from a DC2 host to a DC1 host (``--pps`` datagrams of 200 bytes a second, source ports
rotating over 64 sockets, so DC2's border router spreads it over both DCIs) runs while the
first DCI goes down and comes back ``--trials`` times. Per down, the far end's interface (the
end not set down, on DC2's border router) is polled by netlink (tx_packets + tx_dropped, the
packets sent into the link: a veth end whose peer is down counts what it is given as
tx_dropped) until 1.1 s after the return; printed per mode and routing, p50 / max of:

- ``after_return``: packets sent into the link after set_links returned (the bound of
  tests/netns/test_link_faults.py is 0);
- ``window_ms``: the last change of that counter minus the return (0 when none changed);
- ``apply_ms``: how long set_links took.

Modes (testbed/live/faults.py ``DOWN_MODES``): ``carrier`` the former behaviour (one end set
down, its peer left to the kernel's linkwatch work to see the carrier loss), ``synced`` the
current one (the same, then the peer's carrier loss processed in the same step). The load
average is printed beside the figures (other work on the machine stretches the linkwatch
worker's wait, not the kernel's synchronous work).

Figures of 2026-12-07 (``--trials 6``, the machine shared with other sessions, load average
12-21), p50 / max:

    routing  mode     after_return   window_ms        other_after_return  apply_ms
    static   carrier  5634 / 9822    530.1 / 926.1    0 / 0               3.16 / 7.81
    static   synced      0 / 0         0.0 / 0.0      0 / 0               6.47 / 16.7
    frr      carrier  3394 / 3519    285.2 / 295.5    9 / 10              1.08 / 4.35
    frr      synced      0 / 0         0.0 / 0.0      0 / 0               4.20 / 48.9

(``other``: the daemons' BFD and BGP packets; after the sync they meet the no-op qdisc.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestration.run.runner import prepare  # noqa: E402
from testbed.lab.lab import Lab  # noqa: E402
from testbed.live import faults  # noqa: E402
from testbed.ns.netns import run_in  # noqa: E402

LINK = "dc1-b1-dc2-b1"
ETH_P_ALL, SO_RCVBUFFORCE, SO_TIMESTAMPNS = 3, 33, 35  # linux/if_ether.h, asm/socket.h
EXAMPLES = {"static": ROOT / "examples" / "dci_failover.yaml",
            "frr": ROOT / "examples" / "dci_failover_frr.yaml"}
SENDER = """
import socket, sys, time
dst, pps, n = sys.argv[1], float(sys.argv[2]), 64
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(n)]
payload = b"x" * 200
gap, t, k = 1.0 / pps, time.monotonic(), 0
while True:
    try:
        socks[k % n].sendto(payload, (dst, 9))
    except OSError:
        pass
    k += 1
    t += gap
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)
"""


def _tap(fd: int, ifname: str) -> socket.socket:
    """An AF_PACKET socket on ``ifname`` in namespace ``fd``: it gets a copy of every frame
    handed to the interface's driver (``dev_queue_xmit_nit``, after the qdisc), stamped by
    the kernel. Reading it changes nothing in the kernel's link state (a netlink read of
    the interface's counters would not do: an RTM_GETLINK made the pending carrier change
    take effect here, so polling counters hid the window it measures)."""
    def make() -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.bind((ifname, 0))
        s.setblocking(False)
        return s
    return run_in(fd, make)


def _drain(tap: socket.socket) -> list[tuple[float, bool]]:
    """(kernel stamp in seconds since the epoch, whether it is the UDP stream's datagram) of
    every frame sent out of the interface since the last drain."""
    out = []
    while True:
        try:
            data, anc, _, addr = tap.recvmsg(128, 256)
        except BlockingIOError:
            return out
        if addr[2] != socket.PACKET_OUTGOING:
            continue
        sec, nsec = struct.unpack("qq", anc[0][2][:16])
        data_pkt = (len(data) >= 38 and data[12:14] == b"\x08\x00" and data[23] == 17
                    and data[36:38] == b"\x00\x09")  # IPv4, UDP, port 9 (the stream)
        out.append((sec + nsec * 1e-9, data_pkt))


def trial(lab: Lab, tap: socket.socket, sync: bool) -> dict:
    deadline = time.monotonic() + 30  # FRR: BFD and BGP bring the next hop back
    while True:
        _drain(tap)
        time.sleep(0.05)
        if sum(d for _, d in _drain(tap)) > 10:
            break
        if time.monotonic() > deadline:
            raise SystemExit("no traffic through the DCI 30 s after it came back")
    _drain(tap)
    t0 = time.monotonic()
    faults.prepare_links(lab, [LINK], False, sync_carrier=sync).apply()
    returned = time.time()
    t1 = time.monotonic()
    time.sleep(1.1)  # the linkwatch work waits up to 1 s (HZ) for a non-urgent event
    after = [(t, d) for t, d in _drain(tap) if t > returned]
    lab.set_links([LINK], up=True)
    data = [t for t, d in after if d]
    return {"after_return": len(data), "other_after_return": len(after) - len(data),
            "window_ms": (max(data) - returned) * 1e3 if data else 0.0,
            "apply_ms": (t1 - t0) * 1e3}


def run(routing: str, mode: str, trials: int, pps: float, state: Path) -> dict:
    plan = prepare(EXAMPLES[routing]).plan
    rows = []
    with Lab(plan, state_dir=state) as lab:
        link = next(lk for lk in lab.plan.links if lk.name == LINK)
        far = next(ep for ep in (link.a, link.b) if ep not in faults.down_ends(lab, [link]))
        src = next(n.name for n in plan.hosts() if n.name.startswith("dc2-"))
        dst = next(n.name for n in plan.hosts() if n.name.startswith("dc1-"))
        proc = lab.popen(src, [sys.executable, "-c", SENDER, str(plan.address_of(dst)),
                               str(pps)])
        try:
            tap = _tap(lab.node_io(far.node).fd, far.ifname)
            try:
                for _ in range(trials):
                    time.sleep(0.2)
                    rows.append(trial(lab, tap, mode == "synced"))
            finally:
                tap.close()
        finally:
            proc.kill()
            proc.wait()
    out: dict = {"routing": routing, "mode": mode, "trials": trials,
                 "far_end": f"{far.node}:{far.ifname}"}
    for key in ("after_return", "other_after_return", "window_ms", "apply_ms"):
        vals = [r[key] for r in rows]
        out[f"{key}_p50"] = round(statistics.median(vals), 3)
        out[f"{key}_max"] = round(max(vals), 3)
    out["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--pps", type=float, default=20000)
    ap.add_argument("--modes", default="carrier,synced")
    ap.add_argument("--routing", default="static,frr")
    args = ap.parse_args()
    rows = []
    for routing in args.routing.split(","):
        for mode in args.modes.split(","):
            state = Path(tempfile.mkdtemp(prefix="aitb-linkdown-", dir="/run"))
            state.chmod(0o755)  # FRR's daemons (user frr) traverse it
            try:
                rows.append(run(routing, mode, args.trials, args.pps, state))
            finally:
                shutil.rmtree(state, ignore_errors=True)
            print(json.dumps(rows[-1]), flush=True)
    by = {(r["routing"], r["mode"]): r for r in rows}
    for routing in args.routing.split(","):
        old, new = by.get((routing, "carrier")), by.get((routing, "synced"))
        if old and new:
            print(f"{routing}: packets into the link after the return, max: carrier "
                  f"{old['after_return_max']} vs synced {new['after_return_max']}; window max "
                  f"{old['window_ms_max']} ms vs {new['window_ms_max']} ms; apply p50 "
                  f"{old['apply_ms_p50']} ms vs {new['apply_ms_p50']} ms "
                  f"(ratio {new['apply_ms_p50'] / max(old['apply_ms_p50'], 1e-9):.2f})")


if __name__ == "__main__":
    main()
