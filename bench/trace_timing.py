"""How late the trace player applies a step: applied minus planned time of every step of a rate
trace on a live lab, idle and with one iperf3 TCP flow filling the traced link.

Usage (root, host kernel): .venv/bin/python bench/trace_timing.py [--steps 200] [--interval 50ms]
The lab is h1 - r1 - h2 (tests/netns/plans.py); the trace alternates h1 -> r1 between 20 and
10 Mbit/s every interval (an HTB class change in place, then the read-back of both nodes).
Prints p50/p99/max in ms of: late (set_shaping returned, read-back included, minus planned:
an upper bound), began_late (the call began minus planned: a lower bound; the netlink change
itself is sent first thing in the call) and call (its duration); and how many steps were
skipped because a later one was already due.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))

from plans import two_hosts_router  # noqa: E402

from models.shaping import Shaping  # noqa: E402
from models.trace import LinkTrace, TraceStep  # noqa: E402
from models.units import parse_duration_s  # noqa: E402
from testbed.lab.lab import Lab  # noqa: E402
from testbed.live.trace_player import TracePlayer  # noqa: E402


def _quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile of ``values`` (Hyndman & Fan definition 1)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.5) - 1))]


def _trace(steps: int, interval_s: float) -> LinkTrace:
    rows = tuple(TraceStep(round(k * interval_s, 6), 20 * 10**6 if k % 2 == 0 else 10**7)
                 for k in range(steps))
    return LinkTrace(link="h1-r1", direction="a_to_b", file="<bench>", format="aitb",
                     loop=False, period_s=rows[-1].t_s, steps=rows)


def play(lab: Lab, trace: LinkTrace, out: Path) -> list[dict]:
    player = TracePlayer(lab, out, traces=[trace])
    player.start(time.time() + 0.2)
    player.wait()
    player.stop()
    return [json.loads(x) for x in out.read_text().splitlines()]


def summary(name: str, recs: list[dict]) -> dict:
    done = [r for r in recs if not r.get("skipped")]
    late = [(r["applied_t_s"] - r["planned_t_s"]) * 1e3 for r in done]
    began = [(r["began_t_s"] - r["planned_t_s"]) * 1e3 for r in done]
    call = [(r["applied_t_s"] - r["began_t_s"]) * 1e3 for r in done]
    row = {"case": name, "steps": len(recs), "skipped": len(recs) - len(done),
           "errors": sum("error" in r for r in recs)}
    for label, vals in (("late_ms", late), ("began_late_ms", began), ("call_ms", call)):
        row.update({f"{label}_p50": round(_quantile(vals, 0.5), 2),
                    f"{label}_p99": round(_quantile(vals, 0.99), 2),
                    f"{label}_max": round(max(vals), 2)})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--interval", default="50ms")
    args = ap.parse_args()
    trace = _trace(args.steps, parse_duration_s(args.interval))
    with tempfile.TemporaryDirectory() as tmp, \
            Lab(two_hosts_router(Shaping(rate_bps=20 * 10**6)), state_dir=Path(tmp)) as lab:
        rows = [summary("idle", play(lab, trace, Path(tmp) / "idle.jsonl"))]
        seconds = int(args.steps * parse_duration_s(args.interval)) + 3
        srv = lab.popen("h2", ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        cli = lab.popen("h1", ["iperf3", "-c", "198.18.2.1", "-t", str(seconds)],
                        stdout=subprocess.DEVNULL)
        time.sleep(1.0)
        rows.append(summary("iperf3 through the link",
                            play(lab, trace, Path(tmp) / "loaded.jsonl")))
        cli.wait(timeout=seconds + 30)
        srv.wait(timeout=30)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
