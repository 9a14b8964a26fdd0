"""Write the small cellular-like mahimahi traces of examples/traces/ (deterministic).

Usage: .venv/bin/python scripts/make_cellular_trace.py examples/traces
Each trace is 6 s of 500 ms segments at the rates below (Mbit/s, a drive-test-like swing with
one 500 ms outage in the uplink); a segment of r Mbit/s has r * 1e6 * 0.5 / (1500 * 8)
delivery opportunities spread evenly over it, one integer millisecond timestamp per line
(mm-link(1)'s format; several opportunities may share a millisecond).
"""

from __future__ import annotations

import sys
from pathlib import Path

SEGMENT_MS = 500
RATES_MBIT = {
    "cell_down.mm": [12, 16, 9, 4, 2, 6, 14, 18, 10, 5, 8, 12],
    "cell_up.mm": [4, 5, 3, 1.5, 0, 2, 5, 6, 3, 1.5, 2.5, 4],
}


def timestamps(rates_mbit: list[float]) -> list[int]:
    """Integer millisecond delivery opportunities of consecutive 500 ms segments."""
    out: list[int] = []
    for k, rate in enumerate(rates_mbit):
        n = round(rate * 1e6 * SEGMENT_MS / 1000 / (1500 * 8))
        start = k * SEGMENT_MS
        out += [start + (j * SEGMENT_MS) // n for j in range(n)]
    last = len(rates_mbit) * SEGMENT_MS  # mm-link repeats the trace every last timestamp
    return [*out, last] if out[-1] < last else out


def main(out_dir: str) -> None:
    """Write every trace of RATES_MBIT into ``out_dir``."""
    for name, rates in RATES_MBIT.items():
        stamps = timestamps(rates)
        (Path(out_dir) / name).write_text("".join(f"{ms}\n" for ms in stamps))


if __name__ == "__main__":
    main(sys.argv[1])
