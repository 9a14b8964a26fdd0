"""Read runs' tables and plot the mean CCT of each collective group kind against the run's
DCI one-way delay (from plan.json). Usage: cct_vs_dci_delay.py OUT.png RUN_DIR..."""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import aitb  # noqa: E402
from models.paths import dci_links  # noqa: E402

points: dict[str, list[tuple[float, float]]] = {}
for run_dir in sys.argv[2:]:
    run = aitb.load_run(run_dir)
    plan = run.tables.plan
    dci = dci_links(plan)
    delay_ms = max(lk.a_to_b.delay_s for lk in plan.links if lk.name in dci) * 1e3
    colls = run.table("collectives")
    for kind, g in colls.groupby("group_kind"):
        points.setdefault(str(kind), []).append((delay_ms, g["cct_s"].mean() * 1e3))
for kind, xy in sorted(points.items()):
    xs, ys = zip(*sorted(xy), strict=True)
    plt.plot(xs, ys, marker="o", label=kind)
    print(kind, [f"{x:g} ms -> {y:.3g} ms" for x, y in zip(xs, ys, strict=True)])
plt.xlabel("DCI one-way delay (ms)")
plt.ylabel("mean CCT (ms)")
plt.legend(title="group kind")
plt.savefig(sys.argv[1], dpi=100)
