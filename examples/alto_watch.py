"""Watch a live ALTO cost map from a lab host (standard library only; experiment key
``alto: {serve: true, live: true}``, orchestration/alto/live.py).

    python3 examples/alto_watch.py http://ADDR:8181/ METRIC DST_PID [TIMEOUT_S]

Polls the cost map of METRIC every 100 ms and prints one JSON line per change of the cost
from its own PID (examples/alto_client.py finds it) to DST_PID: ``t`` (host clock seconds),
``cost``. Ends once the cost has fallen below half its first value and risen above that half
again (a load seen from start to end), or after TIMEOUT_S (default 60) seconds.
"""

from __future__ import annotations

import json
import sys
import time

from alto_client import get, own_address, pid_of


def watch(base: str, metric: str, dst: str, timeout_s: float = 60.0) -> list[dict]:
    """The changes seen (module docstring), as printed."""
    ird = get(base, "application/alto-directory+json")
    res = ird["resources"]
    nmap = get(res["networkmap"]["uri"], res["networkmap"]["media-type"])
    pid = pid_of(nmap, own_address(base))
    uri, media = res[f"costmap-{metric}"]["uri"], res[f"costmap-{metric}"]["media-type"]
    seen: list[dict] = []
    first, fell = None, False
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        cost = get(uri, media)["cost-map"].get(pid, {}).get(dst)
        if not seen or cost != seen[-1]["cost"]:
            seen.append({"t": time.time(), "pid": pid, "dst": dst, "cost": cost})
            print(json.dumps(seen[-1]), flush=True)
        if cost is not None:
            first = cost if first is None else first
            fell = fell or cost < first / 2
            if fell and cost >= first / 2:
                break
        time.sleep(0.1)
    return seen


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: alto_watch.py http://ADDR:PORT/ METRIC DST_PID [TIMEOUT_S]")
    watch(*sys.argv[1:4], *(float(x) for x in sys.argv[4:]))
