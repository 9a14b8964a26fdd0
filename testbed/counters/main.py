"""Entry point of the sampler process: ``python -m testbed.counters.main CONFIG_JSON``.

CONFIG_JSON: {"nodes": [[node, netns, tcp], ...], "interval_s": float, "out_dir": str,
"max_rows": int, "parent_pid": int, "live_every_s": float or null (optional)}. Prints
``ready`` on stdout after the first sample; SIGTERM or SIGINT end the sampling (one last
sample is taken); the Parquet files and ``sampler.json`` are written in every case, also
after an error (exit status 1 then). The process lowers its own priority (nice 10): on a
machine whose cores the emulation already saturates, the measurement yields to the traffic it
measures, and the achieved interval in sampler.json says what that cost.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path

from testbed.counters.loop import Loop, LoopConfig, summary

_NICE = 10  # CFS weight ~1/10 of a nice-0 task (kernel/sched/core.c sched_prio_to_weight)


def main(argv: list[str]) -> int:
    """Run the sampler described by ``argv[0]`` (JSON, see the module docstring)."""
    cfg = json.loads(argv[0])
    os.nice(_NICE)
    out = Path(cfg["out_dir"])
    live = cfg.get("live_every_s")
    loop = Loop(LoopConfig(tuple(tuple(n) for n in cfg["nodes"]), float(cfg["interval_s"]),
                           out, int(cfg["max_rows"]),
                           None if live is None else float(live)))

    def stop(_sig: int, _frame: object) -> None:
        loop.stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    error = None
    try:
        loop.open()
        loop.run(lambda: print("ready", flush=True), int(cfg["parent_pid"]))
    except Exception as exc:  # noqa: BLE001 - written to sampler.json, exit status 1
        error = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        try:
            loop.close()
        finally:
            (out / "sampler.json").write_text(json.dumps(summary(loop, error), indent=1))
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
