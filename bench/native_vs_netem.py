"""The native delay line through aitb's own Lab, against netem where a kernel has it.

Two figures, each on one routed lab h1 - r1 - h2 (tests/netns/plans.py's shape):

1. goodput: one TCP flow (cubic, iperf3, 10 s, first 2 s omitted) through HTB 1 Gbit/s with
   50 ms each way (RTT 100 ms), windows free to grow (tcp_rmem/wmem max 64 MiB per
   namespace); bound = 1 Gbit/s x 1448/1514 (payload per wire byte HTB counts: 0.956 Gbit/s);
2. buffer: the same link with a 100-packet bottleneck buffer at r1, one flow for 8 s: drops
   in the buffer (pfifo 10: below the segmenter, which cuts GSO packets into wire-sized ones,
   testbed/tc/qdiscs/tbf.py) and in the delay line (netem's drops, or the native helper's
   loss-model plus kernel queue drops) - the line should drop none. The native line of the
   direction into h2 sits before r1's queue (testbed/delay/nfqueue/labline.py), where packets are
   still GSO-sized: the figure shows where it sits and how many packets (mean size) it handled.
   ``--wire-packets`` instead forces wire-sized packets on every interface (the design before
   the segmenter: the line then handles every frame, ~83 000 packets/s at 1 Gbit/s).

``--line native`` (default on a kernel without netem) or ``--line netem``; ``--vm`` also runs
``--line netem`` inside aitb's stock-kernel VM (testbed/vm/run.py; under TCG its figures measure
software emulation as much as netem) and prints both. One JSON line per line kind.

Run as root:  PYTHONPATH=. .venv/bin/python bench/native_vs_netem.py [--only buffer] [--vm]
Lab traffic only: 198.18.1.0/30 and 198.18.2.0/30 inside the lab's namespaces.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "netns")]

from plans import two_hosts_router  # noqa: E402

from models.shaping import Shaping  # noqa: E402
from models.units import BufferSize  # noqa: E402
from testbed.delay import native  # noqa: E402
from testbed.lab.lab import Lab  # noqa: E402

RATE_BPS, DELAY_S = 10**9, 0.050
BOUND_BPS = RATE_BPS * 1448 / 1514
BIG = {"net.ipv4.tcp_rmem": "4096 131072 67108864", "net.ipv4.tcp_wmem": "4096 131072 67108864"}


def _plan(line: str, buffer_packets: int | None):
    s = Shaping(rate_bps=RATE_BPS, delay_s=DELAY_S,
                buffer=BufferSize(packets=buffer_packets) if buffer_packets else None)
    plan = two_hosts_router(h2_in=s, h1_in=Shaping(delay_s=DELAY_S))
    plan = dataclasses.replace(plan, links=tuple(dataclasses.replace(lk, delay_line=line)
                                                 for lk in plan.links))
    return dataclasses.replace(plan, nodes=tuple(
        dataclasses.replace(n, sysctls=BIG) if n.kind == "host" else n for n in plan.nodes))


def _iperf(lab: Lab, seconds: int, omit: int) -> float:
    srv = lab.popen("h2", ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    out = lab.run("h1", ["iperf3", "-c", "198.18.2.1", "-t", str(seconds), "-O", str(omit),
                         "-C", "cubic", "-J"], timeout_s=seconds + omit + 60).stdout
    srv.wait(timeout=10)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"]


def _line_packets(lab: Lab, line: str) -> dict:
    """Where the data direction's native line sits and what it handled."""
    if line == "netem":
        return {}
    st = native.stats(lab)["h2-r1/b_to_a"]
    q = st["queue"]
    return {"node": st["node"], "hook": st["hook"], "packets": q["in_packets"],
            "mean_packet_bytes": round(q["in_bytes"] / max(1, q["in_packets"]))}


def _qdisc_drops(lab: Lab, node: str, dev: str, kind: str) -> int:
    from pyroute2 import IPRoute
    with IPRoute(netns=lab.netns_name(node)) as ipr:
        return sum(q.get_attr("TCA_STATS2").get_attr("TCA_STATS_QUEUE")["drops"]
                   for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == kind
                   and (dev is None or q["index"] == lab.layout.nodes[node].ifindex(dev)))


def _line_drops(lab: Lab, line: str) -> dict:
    """Drops in the data direction's delay line: total and, natively, where (the helper's
    loss models, the kernel queue full at maxlen, the netlink socket full)."""
    if line == "netem":
        return {"total": _qdisc_drops(lab, "h2", None, "netem")}
    q = native.stats(lab)["h2-r1/b_to_a"]["queue"]
    parts = {"model": q["dropped_loss"] + q["dropped_ge"],
             "queue_full": max(0, q["kernel_queue_dropped"]),
             "socket_full": max(0, q["kernel_user_dropped"])}
    return {"total": sum(parts.values()), **parts}


def _helper_cpu(lab: Lab, line: str) -> dict:
    """Per native line: the helper's CPU seconds and CPU per second of its life."""
    if line == "netem":
        return {}
    return {k: {"cpu_s": round(v["helper_cpu_s"], 3),
                "cpu_per_s": round(v["helper_cpu_s"] / v["helper_uptime_s"], 3)}
            for k, v in native.stats(lab).items()}


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(line: str, only: str | None = None, wire_packets: bool | None = None) -> dict:
    """Both figures (``only``: one of them) for delay line ``line`` on this kernel, with the
    1-minute load average before each; ``wire_packets`` as :class:`testbed.lab.lab.Lab`'s for the
    buffer figure (None: the plan decides, GSO kept)."""
    out: dict = {"line": line}
    if only in (None, "goodput"):
        load = _load()
        with Lab(_plan(line, None)) as lab:
            lab.run("h1", ["ping", "-c", "1", "-W", "3", "198.18.2.1"])
            goodput = _iperf(lab, 10, 2)
            cpu = _helper_cpu(lab, line)
        out.update(goodput_bps=round(goodput), bound_bps=round(BOUND_BPS),
                   goodput_of_bound=round(goodput / BOUND_BPS, 4), goodput_load=load,
                   goodput_helper_cpu=cpu)
    if only in (None, "buffer"):
        load = _load()
        with Lab(_plan(line, 100), wire_packets=wire_packets) as lab:
            lab.run("h1", ["ping", "-c", "1", "-W", "3", "198.18.2.1"])
            buffered = _iperf(lab, 8, 0)
            buf_drops = _qdisc_drops(lab, "r1", "e2", "pfifo")
            line_drops = _line_drops(lab, line)
            cpu = _helper_cpu(lab, line)
            handled = _line_packets(lab, line)
            wire = lab.layout.wire_packets
        out["buffer100"] = {"goodput_bps": round(buffered),
                            "goodput_of_bound": round(buffered / BOUND_BPS, 4),
                            "buffer_drops": buf_drops, "line_drops": line_drops,
                            "wire_packets": wire, "line": handled,
                            "helper_cpu": cpu, "load": load}
    return out


def _use_helper(binary: Path | None) -> None:
    if binary is not None:
        import testbed.delay.nfqueue.build as build
        build.helper_path = lambda build_if_needed=True: binary.resolve()


def main() -> int:
    from testbed.host.kernel import missing_features
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--line", choices=("native", "netem"))
    ap.add_argument("--only", choices=("goodput", "buffer"), help="run one of the figures")
    ap.add_argument("--vm", action="store_true", help="also run --line netem in the VM")
    ap.add_argument("--wire-packets", action="store_true",
                    help="buffer figure with wire-sized packets on every interface")
    ap.add_argument("--helper", type=Path, help="helper binary to use instead of the built one "
                    "(to compare two builds under the same load)")
    args = ap.parse_args()
    _use_helper(args.helper)
    line = args.line or ("netem" if not missing_features({"netem", "ifb"}) else "native")
    print(json.dumps(measure(line, args.only, True if args.wire_packets else None)), flush=True)
    if args.vm:
        from testbed.vm.run import run_in_vm
        res = run_in_vm([sys.executable, str(Path(__file__).resolve()), "--line", "netem",
                         *(["--only", args.only] if args.only else []),
                         *(["--wire-packets"] if args.wire_packets else [])],
                        cwd=ROOT, timeout_s=1200)
        print(res.stdout.strip().splitlines()[-1] if res.returncode == 0 else
              json.dumps({"line": "netem (vm)", "error": res.stderr[-2000:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
