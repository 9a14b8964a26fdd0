"""Ring all-reduce CCT on uncongested shaped links against the alpha-beta bound.

Usage (root): .venv/bin/python bench/ring_cct.py [--ranks 4] [--rate-mbit 500] [--size-mib 32]
Target: within 10 % of T = 2(n-1)/n x S/B + 2(n-1) x alpha (Patarasuk and Yuan 2009;
Thakur et al. 2005 cost model), B the shaped link rate, alpha the per-message latency, here
measured in the same run as the CCT of a dissemination barrier divided by its rounds.
Lab: the netns tests' bridge star; every host's uplink shaped by HTB at B (pfifo 1000 packets,
offloads off), the bridge and downlinks unshaped, so each ring hop crosses one shaped link.
Since TCP/IP/Ethernet headers take 66 of every 1514 bytes on the wire, the best a TCP stream
can reach is B x 1448/1514 (4.4 % less); the script prints both ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "netns"))

from star import Star  # noqa: E402

from models.records import CollectiveRecord  # noqa: E402
from models.schedule import Collective, Group, Schedule  # noqa: E402
from traffic_gen import ReplayOptions, replay  # noqa: E402
from traffic_gen.jsonl import read_records  # noqa: E402
from traffic_gen.launch import NetnsExecLauncher  # noqa: E402

PAYLOAD_FRACTION = 1448 / 1514  # TCP payload per Ethernet frame with timestamps, MTU 1500


def _main(run_dir: Path) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rate-mbit", type=int, default=500)
    ap.add_argument("--size-mib", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=3)
    args = ap.parse_args()
    n, size, rate = args.ranks, args.size_mib << 20, args.rate_mbit * 10**6
    star = Star(n).up()
    try:
        for h in star.hosts:
            star.shape_from_host(h, rate, 1000)
        ops = (Collective("barrier", "g", 0, label="alpha"),
               Collective("all_reduce", "g", size, "ring", label="ring"))
        sched = Schedule("cct", n, {"g": Group("g", "dp", tuple(range(n)))}, ops,
                         iterations=args.iterations)
        res = replay(sched, {r: f"h{r}" for r in range(n)}, NetnsExecLauncher(star.hosts),
                     run_dir, star.addresses,
                     ReplayOptions(transfer_timeout_s=120))
        if not res.ok:
            raise SystemExit(f"run failed: {res.failures}")
    finally:
        star.down()
    recs = list(read_records(res.paths["collectives"], CollectiveRecord))
    rounds = (n - 1).bit_length()
    alpha = statistics.median(c.cct_s for c in recs if c.label == "alpha") / rounds
    cct = statistics.median(c.cct_s for c in recs if c.label == "ring")
    for name, b in (("link rate", rate), ("TCP payload rate", rate * PAYLOAD_FRACTION)):
        bound = 2 * (n - 1) / n * size * 8 / b + 2 * (n - 1) * alpha
        print(f"bound with B = {name} ({b / 1e6:.0f} Mbit/s): {bound * 1e3:.1f} ms; "
              f"CCT/bound = {cct / bound:.3f}")
    print(f"ring all-reduce n={n} S={args.size_mib} MiB: median CCT {cct * 1e3:.1f} ms, "
          f"alpha {alpha * 1e6:.0f} us (target: CCT within 10 % of the bound)")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="aitb-bench-") as tmp:  # records: removed after
        _main(Path(tmp))


if __name__ == "__main__":
    main()
