"""Fidelity self-check of a run (pure; no root): did the emulated links do what the plan
said (rate, RTT, loss per shaped link direction), and was the host's CPU saturated?

Produces ``fidelity.json`` (shape: analysis/fidelity/report.py): :func:`fidelity_report`
over the directions of the plan (:class:`DirectionRef`), the counter samples
(``counters/qdisc.parquet`` and
``counters/links.parquet``, models/counter_columns.py), the probed RTTs and the CPU samples.
"""

from analysis.fidelity.checks import (
    LOSS_Z,
    MIN_BACKLOGGED_INTERVALS,
    RATE_TOLERANCE,
    DirectionRef,
    LineCounts,
    delay_check,
    expected_rtt_s,
    loss_check,
    rate_check,
    rtt_check,
    rtt_tolerance_s,
)
from analysis.fidelity.report import (
    CHECK_NAMES,
    CPU_SATURATED_PCT,
    check_coverage,
    coverage_words,
    cpu_summary,
    direction_entry,
    fidelity_report,
    samples_in_windows,
    traffic_windows,
)

__all__ = ["DirectionRef", "LineCounts", "delay_check", "expected_rtt_s", "rate_check",
           "loss_check", "rtt_check",
           "rtt_tolerance_s", "cpu_summary", "direction_entry", "fidelity_report",
           "CPU_SATURATED_PCT", "traffic_windows",
           "samples_in_windows", "RATE_TOLERANCE", "MIN_BACKLOGGED_INTERVALS", "LOSS_Z",
           "CHECK_NAMES", "check_coverage", "coverage_words"]
