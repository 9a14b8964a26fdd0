"""Parameter sweep from Python: incast goodput vs block size on incast.yaml (7 senders, one
receiver, 1 Gbit/s, 100-packet buffer). Needs root. ``--dry-run`` only checks every point."""

import sys
from pathlib import Path

import aitb

HERE = Path(__file__).resolve().parent
BASE = {"name": "sweep-incast", "topology": {"file": "../../topologies/examples/incast.yaml"},
        "workloads": [{"kind": "incast", "receiver": "rx", "size": "64KiB", "repeats": 2}]}

for size in ("64KiB", "256KiB"):
    point = aitb.with_value(BASE, "workloads.0.size", size)
    if "--dry-run" in sys.argv:
        aitb.prepare(point, base_dir=HERE)  # raises SpecError for a bad point
        print(size, "ok")
        continue
    run = aitb.run(point, results_dir=sys.argv[1] if len(sys.argv) > 1 else "results",
                       base_dir=HERE)
    print(size, "goodput_bps", run.summary["goodput_bps"], "retrans",
          run.summary["retransmissions"], run.run_dir)
