"""Yardstick in container hosts: torch.distributed gloo all-reduce workers run as a real
application (``kind: app``) inside containers, against aitb's own ring all-reduce on the same
lab (examples/containers/gloo_allreduce.yaml: 4 container hosts, 200 Mbit/s ports, 8 MiB,
5 timed all-reduces each).

Usage (root): .venv/bin/python bench/gloo_containers.py [--keep-image] [--results DIR]
Needs torch (``pip install -e '.[yardstick]'``); without it prints "torch not available:
skipped" and exits 0.

Steps: a docker engine (the running one, else a dockerd started here and stopped by pid); the
image ``aitb-gloo:1`` built locally (testbed.containers.images, as ``aitb image build``: this host's
Python, its stdlib, the installed torch with its requirements, the ELF closure of their
libraries, and examples/containers/gloo_worker.py at /opt/aitb/gloo_worker.py); then ``aitb
run`` of the example (runner.prepare + execute, without analysis). gloo's CCT per all-reduce is
max end - min start over ranks of the times each worker prints (the CollectiveRecord
definition); aitb's is collectives.jsonl's ``cct_s``. Both against the closed form 2(n-1)/n x S
/ B (Patarasuk and Yuan, JPDC 2009) at the TCP payload rate. The app's completion time (first
exec to last exit, from apps.jsonl) includes starting Python and importing torch.
The image is removed afterwards if it was built here (unless --keep-image).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "netns"))

from container_image import Engine  # noqa: E402

from orchestration.run.runner import execute, prepare  # noqa: E402
from testbed.containers.images import build_python_image  # noqa: E402

EXAMPLE = ROOT / "examples" / "containers" / "gloo_allreduce.yaml"
WORKER = ROOT / "examples" / "containers" / "gloo_worker.py"
TAG = "aitb-gloo:1"
PAYLOAD_FRACTION = 1448 / 1514  # TCP payload per Ethernet frame with timestamps, MTU 1500


def build(eng: Engine) -> tuple[bool, float]:
    t0 = time.perf_counter()
    built = build_python_image(eng.cli, TAG, extra={"/opt/aitb/gloo_worker.py":
                                                    WORKER.read_bytes()}, packages=["torch"])
    return built, time.perf_counter() - t0


def gloo_ccts(run_dir: Path, apps: list[dict]) -> list[float]:
    ranks = []
    for a in apps:
        lines = [x for x in (run_dir / a["log"]).read_text().splitlines() if x.startswith("{")]
        ranks.append(json.loads(lines[-1]))
    if not all(r["ok"] for r in ranks):
        raise SystemExit("gloo all-reduce returned a wrong sum")
    n = len(ranks[0]["times"])
    return [max(r["times"][i][1] for r in ranks) - min(r["times"][i][0] for r in ranks)
            for i in range(n)]


def report(run_dir: Path, build_s: float, built: bool) -> None:
    apps = [json.loads(x) for x in (run_dir / "apps.jsonl").read_text().splitlines()]
    colls = [json.loads(x) for x in (run_dir / "collectives.jsonl").read_text().splitlines()]
    g, a = gloo_ccts(run_dir, apps), [c["cct_s"] for c in colls]
    n, size, rate = len(apps), 8 * 2**20, 200e6
    bound = 2 * (n - 1) / n * size * 8 / (rate * PAYLOAD_FRACTION)
    completion = max(x["t_end"] for x in apps) - min(x["t_start"] for x in apps)
    print(f"image {TAG}: {'built' if built else 'already there'} in {build_s:.1f} s")
    print(f"all-reduce of 8 MiB over {n} container hosts, 200 Mbit/s ports; "
          f"{len(g)} gloo and {len(a)} aitb ring all-reduces")
    gm, am = statistics.median(g), statistics.median(a)
    print(f"CCT median [ms]: gloo {gm * 1e3:.1f}, aitb ring {am * 1e3:.1f}, gloo/aitb "
          f"{gm / am:.3f}, closed form {bound * 1e3:.1f}")
    print(f"CCT min..max [ms]: gloo {min(g) * 1e3:.0f}..{max(g) * 1e3:.0f}, aitb "
          f"{min(a) * 1e3:.0f}..{max(a) * 1e3:.0f}")
    print(f"gloo app completion time (exec of the first rank to exit of the last, with "
          f"Python start and torch import): {completion:.2f} s")
    print(f"run directory: {run_dir}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep-image", action="store_true", help="leave aitb-gloo:1 built")
    ap.add_argument("--results", type=Path, default=None, help="default: a temporary dir")
    a = ap.parse_args()
    if importlib.util.find_spec("torch") is None:
        print("torch not available: skipped (pip install -e '.[yardstick]')")
        return
    with tempfile.TemporaryDirectory(prefix="aitb-gloo-") as tmp:
        eng = Engine(Path(tmp) / "dockerd.log")
        built = False
        try:
            built, build_s = build(eng)
            outcome = execute(prepare(EXAMPLE), a.results or Path(tmp) / "results",
                              progress=lambda m: print(f"  {m}", flush=True), analyze=False)
            if not outcome.ok:
                raise SystemExit(f"run failed: {outcome.error}")
            report(outcome.run_dir, build_s, built)
        finally:
            if built and not a.keep_image:
                eng.cli.images.remove(TAG, force=True)
            eng.stop()


if __name__ == "__main__":
    main()
