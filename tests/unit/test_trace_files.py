"""Trace files (models.trace): the aitb row format and mahimahi's delivery traces, good and bad;
every refusal names the file and line."""

from __future__ import annotations

import os

import pytest

from models.errors import SpecError
from models.trace import (
    FLOOR_RATE_BPS,
    MAX_TRACE_BYTES,
    TraceStep,
    parse_aitb_trace,
    parse_mahimahi_trace,
    read_trace,
)


def test_aitb_rows_keep_missing_values_as_none():
    text = "# a cellular edge\nt, rate, delay, loss\n0s, 20Mbit, 20ms, 0%\n\n5s, 5Mbit\n" \
           "7.5s, , 40ms  # only the delay\n10s\n"
    steps, period = parse_aitb_trace(text, "cell.trace")
    assert steps == (TraceStep(0.0, 20_000_000, 0.02, 0.0), TraceStep(5.0, 5_000_000),
                     TraceStep(7.5, None, 0.04), TraceStep(10.0))
    assert period == 10.0


def test_aitb_columns_in_any_order_after_t():
    steps, _ = parse_aitb_trace("t,loss,rate\n0ms,1%,1Gbit\n", "x")
    assert steps == (TraceStep(0.0, 1_000_000_000, None, 1.0),)


@pytest.mark.parametrize(("text", "line", "what"), [
    ("t, rate\n0s, 10Mbit\n2s, 5\n", 3, "column rate: a rate '5' has no unit"),
    ("t, rate\n0s, 10Mbit\n2, 5Mbit\n", 3, "column t: a duration '2' has no unit"),
    ("t, rate\n0s, 10Mbit\n2s, 5Mbit\n1s, 1Mbit\n", 4, "not after the row before"),
    ("t, rate\n0s, 10Mbit\n0s, 5Mbit\n", 3, "times must strictly increase"),
    ("t, rate\n-1s, 10Mbit\n", 2, "negative"),
    ("t, delay\n0s, -5ms\n", 2, "column delay: duration '-5ms' is negative"),
    ("t, loss\n0s, 1\n", 2, "column loss: a percentage '1' has no unit"),
    ("t, loss\n0s, 101%\n", 2, "outside 0% to 100%"),
    ("t, rate\n0s, 0bit\n", 2, "must be above 0"),
    ("t, rate\n0s, 10Mbps\n", 2, "column rate"),
    ("t, rate\n0s, 1Mbit, 3ms\n", 2, "3 fields but the header names 2 columns"),
    ("t, rate\n, 1Mbit\n", 2, "every row needs a time"),
    ("\n# c\nrate, t\n", 3, "header starting with 't'"),
    ("t, bandwidth\n", 1, "unknown column 'bandwidth'"),
    ("t, rate, rate\n", 1, "appears twice"),
    ("t, rate\n", 1, "no rows"),
])
def test_aitb_bad_rows_name_file_and_line(text, line, what):
    with pytest.raises(SpecError) as err:
        parse_aitb_trace(text, "cell.trace")
    msg = str(err.value)
    assert msg.startswith(f"cell.trace:{line}: "), msg
    assert what in msg


def test_aitb_empty_file_names_it():
    with pytest.raises(SpecError, match=r"^cell.trace: the trace is empty"):
        parse_aitb_trace("# nothing\n", "cell.trace")


def test_mahimahi_constant_12mbit_trace():
    # mm-link(1)'s example: one opportunity every millisecond = 1500 B * 8 / 1 ms = 12 Mbit/s
    steps, period = parse_mahimahi_trace("\n".join(str(i) for i in range(1, 1001)), "12M")
    assert steps == (TraceStep(0.0, 12_000_000),)
    assert period == 1.0


def test_mahimahi_single_line_trace_repeats_every_millisecond():
    # mahimahi ships "12Mbps" traces as the single line "1": period 1 ms, one opportunity
    steps, period = parse_mahimahi_trace("1\n", "one", window_s=0.1)
    assert steps == (TraceStep(0.0, 12_000_000),) and period == 0.001


def test_mahimahi_windows_counts_outage_and_partial_last_window():
    # 0-100 ms: 4 opportunities (two at 20 ms); 100-200: none; 200-250 (last, 50 ms): 2
    steps, period = parse_mahimahi_trace("10\n20\n20\n90\n210\n250\n", "m", window_s=0.1)
    assert period == 0.25
    # window 0 also gets the opportunity at T=250 ms (the next pass's 0 ms): 5 of them
    assert steps == (TraceStep(0.0, 5 * 12000 * 10), TraceStep(0.1, FLOOR_RATE_BPS),
                     TraceStep(0.2, round(1 * 12000 / 0.05)))


def test_mahimahi_merges_equal_windows():
    text = "\n".join(str(i) for i in range(1, 401))  # 400 ms at 12 Mbit/s
    steps, _ = parse_mahimahi_trace(text, "m", window_s=0.05)
    assert steps == (TraceStep(0.0, 12_000_000),)


@pytest.mark.parametrize(("text", "line", "what"), [
    ("1\n2\n1\n", 3, "timestamp 1 ms is before the line before (2 ms)"),
    ("1\n2.5\n", 2, "'2.5' is not a whole number of milliseconds"),
    ("1\n-3\n", 2, "not a whole number"),
    ("1\n5ms\n", 2, "not a whole number"),
])
def test_mahimahi_bad_lines_name_file_and_line(text, line, what):
    with pytest.raises(SpecError) as err:
        parse_mahimahi_trace(text, "up.trace")
    assert str(err.value).startswith(f"up.trace:{line}: ") and what in str(err.value)


@pytest.mark.parametrize(("text", "window", "what"), [
    ("", 0.1, "no timestamps"), ("0\n0\n", 0.1, "no length"),
    ("1\n", 0.001, "below the minimum of 10 ms"),
    ("100000000\n", 0.01, "use a larger window"),
])
def test_mahimahi_bad_traces(text, window, what):
    with pytest.raises(SpecError, match=what):
        parse_mahimahi_trace(text, "up.trace", window_s=window)


def test_read_trace_missing_fifo_directory_and_large(tmp_path):
    with pytest.raises(SpecError, match=r"nope.trace: trace file not found"):
        read_trace(tmp_path / "nope.trace", "aitb")
    with pytest.raises(SpecError, match="regular file"):
        read_trace(tmp_path, "aitb")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="regular file"):  # and does not block on open
        read_trace(fifo, "mahimahi")
    big = tmp_path / "big"
    big.write_bytes(b"1\n" * (MAX_TRACE_BYTES // 2 + 1))
    with pytest.raises(SpecError, match=f"at most {MAX_TRACE_BYTES}"):
        read_trace(big, "mahimahi")
    binary = tmp_path / "bin"
    binary.write_bytes(b"t,rate\n\xff\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        read_trace(binary, "aitb")


def test_read_trace_formats(tmp_path):
    f = tmp_path / "a.trace"
    f.write_text("t,rate\n0s,10Mbit\n1s,5Mbit\n")
    assert read_trace(f, "aitb") == ((TraceStep(0.0, 10**7), TraceStep(1.0, 5 * 10**6)), 1.0)
    with pytest.raises(SpecError, match="window applies to mahimahi traces only"):
        read_trace(f, "aitb", window_s=0.1)
    with pytest.raises(SpecError, match="unknown trace format 'csv'"):
        read_trace(f, "csv")  # type: ignore[arg-type]


def test_mahimahi_windows_match_a_count_by_hand_on_a_random_trace():
    import random

    rng = random.Random(7)
    stamps = sorted(rng.randrange(0, 2000) for _ in range(3000)) + [2000, 2000]
    window_ms = 30
    steps, period = parse_mahimahi_trace("\n".join(map(str, stamps)), "r", window_ms / 1000)
    n = -(-2000 // window_ms)
    counts = [0] * n
    for ms in stamps:
        counts[(ms % 2000) // window_ms] += 1
    rates = []
    for k, c in enumerate(counts):
        length_s = (min((k + 1) * window_ms, 2000) - k * window_ms) / 1000
        rate = round(12000 * c / length_s) or FLOOR_RATE_BPS
        if not rates or rates[-1][1] != rate:
            rates.append((k * window_ms / 1000, rate))
    assert period == 2.0 and [(s.t_s, s.rate_bps) for s in steps] == rates


def test_mahimahi_blank_lines_and_spaces_are_ignored():
    steps, _ = parse_mahimahi_trace("\n1\n\n  2  \n", "m", window_s=0.01)
    assert steps == (TraceStep(0.0, round(12000 * 2 / 0.002)),)
