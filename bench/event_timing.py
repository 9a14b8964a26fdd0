"""How late the scheduler applies ``events:`` actions: applied minus planned time of N actions
on a live lab, idle and with 4 iperf3 TCP flows through it; the peer is the rate change of a
``degrade`` (the same set_shaping call as a trace step of bench/trace_timing.py).

Usage (root, host kernel): .venv/bin/python bench/event_timing.py [--events 300] [--interval 50ms]
The lab is tests/netns/plans.py's ecmp_diamond (h1 - r1 = r2 | r3 = r4 - h2). The actions cycle
every interval through: r1-r2 down (r1's end set down, r2's without carrier), r1-r2 up (both
veth ends, then the routes of r1 and r2 restored and read back), degrade h1-r1 a_to_b to
10 Mbit/s, back to 20 Mbit/s, and (``--partitions``) a partition of r1-r2 and r1-r3 (both of
r1's uplinks in one action: r1's two ends in one request) and its heal. Prints, per op (a
partition's as partition_down / heal_up), p50/p99/max in ms of:
began_late (the action began minus planned: the scheduler's own lateness), late (applied minus
planned: the action done, for ``up`` the routes read back with the carrier seen), acked_late
(``up`` only: the kernel had acked the routes, before the read-back), and each op's late p99
divided by the degrade's (the peer); and whether the target figure's p99 < 2 ms (``target``:
applied = the kernel acked the change, i.e. acked_late for an up, late for the others: the
read-back of an up waits for the kernel's linkwatch to report the carrier, which is not part
of applying it); each case at normal priority and at SCHED_FIFO 10 (the scheduler thread of
``aitb run``).

Figures of 2026-12-02 (``--events 300 --partitions``, SCHED_FIFO 10, target figure p50 / p99
in ms, 50 actions per op and case, so p99 = the maximum; the 2-core machine under the heavy
lock, other sessions' light work beside it, load average 0.7-2.2; before = both veth ends set
down, after = one end, its peer losing the carrier, testbed/live/faults.py ``down_ends``), two runs
each, interleaved (before, after, before, after):

    op        case    before run 1 / run 2    after run 1 / run 2
    down      idle    0.45/4.54   0.67/1.07   0.38/0.64   0.29/0.37
    down      iperf3  0.35/0.52   0.57/1.59   0.40/0.82   0.32/0.84
    up        idle    0.41/0.54   0.57/0.85   0.49/1.13   0.39/0.46
    up        iperf3  0.37/0.50   0.56/0.92   0.48/0.70   0.37/0.52
    partition idle    0.66/1.49   0.90/3.39   0.48/0.72   0.35/0.46
    partition iperf3  0.49/1.84   0.80/1.44   0.54/0.67   0.38/0.88
    heal      idle    0.55/0.89   0.76/2.86   0.64/1.36   0.48/0.74
    heal      iperf3  0.49/0.73   0.80/1.13   0.61/1.04   0.48/1.25
    degrade   idle    0.51/0.64   0.70/1.04   0.61/1.38   0.49/0.69   (the peer)
    degrade   iperf3  0.47/0.66   0.66/1.00   0.62/0.92   0.52/0.72

Met after in every op and case (p99 at most 1.4 ms); before, a down missed once (4.5 ms), a
partition (3.4 ms) and a heal (2.9 ms) once. With ``--events 1200`` (200 per op, one run
each, the after run on a busier machine: its degrade peer 0.67-0.76 ms at p50 against
0.52-0.56) every p99 met on both sides, links 0.59-0.90 ms before, 0.63-0.98 ms after. The
misses were one wait in the kernel: a down's second request (the peer end) slept until an
RCU grace period ended, one that the peer's carrier change (the kernel's linkwatch, right
after the first end went down) had begun. Traced here with the scheduler's tracepoints
(sched_switch to D, woken by rcu_exp_gp_kthread; tracefs instance, 200-300 downs at
SCHED_FIFO 10, quiet): both ends, 26-156 of 200 downs slept, 0.03-4.2 ms, apply p50
0.22-0.42 ms, max 1.4-4.5 ms; one end, 0-1 of 300 slept, p50 0.14-0.25 ms, max 0.32-0.58 ms.
Setting the peer down in the same buffer is not possible (RTM_SETLINK refuses a target
netnsid here: ENODEV). The peer's node stops routing over the link when that linkwatch has
run: 0.04 ms after the apply returned (p50; p90 0.05 ms, max 3.2 ms, of 300), where before
its routes went when the second request ended. At normal priority the p99s miss on both
sides (2.6-10.7 ms): the thread wakes late (began_late p99 2-10 ms) behind other processes.
An up read back (late) is 1.2-2.6 ms p50, 1.8-4.5 ms p99 at SCHED_FIFO 10 (the linkwatch
reporting the carrier, a kernel worker at normal priority).
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

from plans import ecmp_diamond  # noqa: E402

from models.events import EventAction  # noqa: E402
from models.units import parse_duration_s  # noqa: E402
from testbed.lab.lab import Lab  # noqa: E402
from testbed.live.trace_player import TracePlayer  # noqa: E402

TARGET_MS = 2.0


def _quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile of ``values`` (Hyndman & Fan definition 1)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.5) - 1))]


def actions(n: int, interval_s: float, partitions: bool = False) -> list[EventAction]:
    out = []
    both = ("r1-r2", "r1-r3")
    for k in range(n):
        t, phase = round(k * interval_s, 6), k % (6 if partitions else 4)
        if phase == 4:
            out.append(EventAction(k, "partition", "down", t, links=both))
        elif phase == 5:
            out.append(EventAction(k, "heal", "up", t, links=both))
        elif phase == 0:
            out.append(EventAction(k, "link_down", "down", t, links=("r1-r2",)))
        elif phase == 1:
            out.append(EventAction(k, "link_up", "up", t, links=("r1-r2",)))
        else:
            out.append(EventAction(k, "degrade", "shape", t, directions=(("h1-r1", "a_to_b"),),
                                   changes={"rate_bps": 10**7 if phase == 2 else 2 * 10**7}))
    return out


def play(lab: Lab, acts: list[EventAction], out: Path, rt: int | None) -> list[dict]:
    out.unlink(missing_ok=True)
    player = TracePlayer(lab, out.with_suffix(".trace.jsonl"), traces=[], events=acts,
                         events_out=out, rt_priority=rt)
    player.start(time.time() + 0.2)
    player.wait()
    player.stop()
    if player.errors or player.rt_error:
        raise SystemExit(f"event errors: {player.errors[:3]} {player.rt_error or ''}")
    return [json.loads(x) for x in out.read_text().splitlines()]


def summary(case: str, recs: list[dict]) -> list[dict]:
    rows = []
    named = {"partition": "partition_down", "heal": "heal_up"}
    for op in ("down", "up", "shape", "partition_down", "heal_up"):
        mine = [r for r in recs if named.get(r["kind"], r["op"]) == op]
        if not mine:
            continue
        row: dict = {"case": case, "op": op, "n": len(mine)}
        cols = {"began_late_ms": [r["began_t_s"] - r["planned_t_s"] for r in mine],
                "late_ms": [r["late_s"] for r in mine]}
        if op in ("up", "heal_up"):
            cols["acked_late_ms"] = [r["acked_t_s"] - r["planned_t_s"] for r in mine]
        for label, vals in cols.items():
            ms = [v * 1e3 for v in vals]
            row.update({f"{label}_p50": round(_quantile(ms, 0.5), 3),
                        f"{label}_p99": round(_quantile(ms, 0.99), 3),
                        f"{label}_max": round(max(ms), 3)})
        # the target figure: applied = the kernel acked the change (for an up: the links and
        # the restored routes), not the read-back after it
        target = "acked_late_ms" if op in ("up", "heal_up") else "late_ms"
        row["target"] = target
        row[f"target_p99_under_{TARGET_MS:g}ms"] = row[f"{target}_p99"] < TARGET_MS
        rows.append(row)
    peer = next(r for r in rows if r["op"] == "shape")["late_ms_p99"]
    for r in rows:
        r["late_p99_vs_degrade"] = round(r["late_ms_p99"] / peer, 2) if peer else None
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--interval", default="50ms")
    ap.add_argument("--partitions", action="store_true",
                    help="also partition both of r1's uplinks at once and heal them")
    args = ap.parse_args()
    acts = actions(args.events, parse_duration_s(args.interval), args.partitions)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            Lab(ecmp_diamond(), state_dir=Path(tmp)) as lab:
        for rt in (None, 10):  # normal priority, then SCHED_FIFO 10 (what aitb run uses)
            tag = "" if rt is None else ", SCHED_FIFO 10"
            rows += summary("idle" + tag, play(lab, acts, Path(tmp) / "idle.jsonl", rt))
            seconds = int(args.events * parse_duration_s(args.interval)) + 3
            srv = lab.popen("h2", ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
            time.sleep(0.5)
            cli = lab.popen("h1", ["iperf3", "-c", "198.18.9.1", "-t", str(seconds), "-P",
                                   "4"], stdout=subprocess.DEVNULL)
            time.sleep(1.0)
            rows += summary("iperf3 -P4 through the lab" + tag,
                            play(lab, acts, Path(tmp) / "loaded.jsonl", rt))
            cli.wait(timeout=seconds + 60)
            srv.wait(timeout=30)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
