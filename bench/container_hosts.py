"""Container hosts against namespace hosts: bring-up plus teardown, and goodput over a shaped
link from a container to a namespace host, in one run.

    sudo .venv/bin/python bench/container_hosts.py              # 8 hosts on one switch
    sudo .venv/bin/python bench/container_hosts.py --hosts 16

Lab: N hosts plus one receiver on one switch, every host link shaped to 100 Mbit/s (HTB,
1000-packet buffer). Run 1: all N hosts are namespaces; run 2: all N are containers of a
busybox image built locally (tests/netns/container_image.py). Goodput: host 1 (a container in
run 2) sends --megabytes with busybox nc to a Python receiver on the namespace host ``rx``;
goodput = bytes received / receive time. Uses the running docker engine, or starts one for
the bench and stops it by pid (the time it takes is printed separately).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "netns"))

from container_image import TAG, Engine, build_image  # noqa: E402

import topologies  # noqa: E402
from testbed import signals  # noqa: E402
from testbed.lab.lab import Lab  # noqa: E402

RECEIVER = textwrap.dedent("""\
    import socket, time
    srv = socket.socket(); srv.bind(("0.0.0.0", 5001)); srv.listen(1); print("ready", flush=True)
    conn, _ = srv.accept(); t0 = time.monotonic(); total = 0
    while chunk := conn.recv(1 << 16):
        total += len(chunk)
    print(total, time.monotonic() - t0, flush=True)
""")


def plan(hosts: int, image: str | None):
    """N senders and a receiver on one switch, 100 Mbit/s host links."""
    box = {"image": image} if image else {}
    nodes = {f"h{i}": {"kind": "host", **box} for i in range(1, hosts + 1)}
    nodes |= {"rx": {"kind": "host"}, "s1": {"kind": "switch"}}
    spec = topologies.parse_topology({
        "name": "bench-boxes", "nodes": nodes,
        "defaults": {"link": {"rate": "100Mbit", "buffer": "1000p"}},
        "links": [{"endpoints": [n, "s1"]} for n in nodes if n != "s1"]}, "<bench>")
    return topologies.resolve(spec, "<bench>")


def goodput_bps(lab: Lab, engine: Engine, size_bytes: int, container: bool) -> float:
    """Bytes/s * 8 from h1 to rx over h1's 100 Mbit/s link, measured at the receiver."""
    rx = lab.popen("rx", [sys.executable, "-c", RECEIVER], stdout=-1, text=True)
    assert rx.stdout.readline().strip() == "ready"
    send = ["busybox", "sh", "-c", f"busybox head -c {size_bytes} /dev/zero | busybox nc "
            f"{lab.plan.address_of('rx')} 5001"]  # nc ends at the end of its input
    if container:  # the container's own busybox, through docker exec
        code, out = engine.cli.containers.get(lab.netns_name("h1")).exec_run(send)
        assert code == 0, out
    else:  # the host's busybox (Debian busybox-static) in h1's namespace
        lab.run("h1", send, timeout_s=60)
    total, elapsed = rx.stdout.readline().split()
    rx.wait(timeout=10)
    return int(total) * 8 / float(elapsed)


def once(hosts: int, image: str | None, engine: Engine, size_bytes: int) -> dict[str, float]:
    """Bring-up, goodput, teardown of one lab; seconds and bit/s."""
    lab = Lab(plan(hosts, image))
    t0 = time.perf_counter()
    with lab:  # up on entry; down on exit, also on an error or SIGINT/SIGTERM
        t1 = time.perf_counter()
        rate = goodput_bps(lab, engine, size_bytes, image is not None)
        t2 = time.perf_counter()
    return {"up_s": t1 - t0, "down_s": time.perf_counter() - t2, "goodput_bps": rate}


def main() -> None:
    """Run both labs and print one row each and the ratios."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--megabytes", type=float, default=25.0, help="sent h1 -> rx (2 s at "
                    "100 Mbit/s)")
    args = ap.parse_args()
    with signals.raising():  # SIGTERM ends the bench through the finally clauses below
        run(args)


def run(args: argparse.Namespace) -> None:
    """Engine (started if needed), image, both labs, then the rows."""
    t0 = time.perf_counter()
    engine = Engine(Path("/tmp") / f"aitb-bench-dockerd-{int(time.time())}.log")
    engine_s = time.perf_counter() - t0
    started = engine.proc is not None
    built = build_image(engine.cli)
    try:
        size = int(args.megabytes * 1e6)
        ns = once(args.hosts, None, engine, size)
        box = once(args.hosts, TAG, engine, size)
    finally:
        if built:
            engine.cli.images.remove(TAG, force=True)
        engine.stop()
    print(f"docker engine: {f'started in {engine_s:.2f} s' if started else 'already running'}")
    for name, r in (("namespace hosts", ns), ("container hosts", box)):
        print(f"{name:16s} n={args.hosts:3d}  up {r['up_s']:6.2f} s  down {r['down_s']:6.2f} s"
              f"  goodput h1->rx {r['goodput_bps'] / 1e6:6.1f} Mbit/s (link 100 Mbit/s)")
    print(f"ratio container/namespace: up {box['up_s'] / ns['up_s']:.1f}x, down "
          f"{box['down_s'] / ns['down_s']:.1f}x")


if __name__ == "__main__":
    main()
