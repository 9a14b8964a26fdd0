"""Numbers in human units for the report (pure): ``duration(0.0123)`` -> "12.3 ms",
``bits(3.94451e7)`` -> "39.4 Mbit/s", ``size(26214400)`` -> "25.0 MiB" (binary prefixes for
bytes, decimal for rates, as iperf3 and tc print them), and :func:`by_key`, which picks the
unit from a metric's name suffix (``_s``, ``_bps``, ``_Bps``, ``_bytes``, ``share``...)."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["duration", "bits", "bytes_rate", "size", "share", "by_key", "spans"]

NONE = "—"


def _ok(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def duration(s: Any) -> str:
    """Seconds as s, ms or us with three significant digits."""
    if not _ok(s):
        return NONE
    a = abs(s)
    if a >= 1 or a == 0:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"


def _decimal(x: float, unit: str) -> str:
    for k, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= k:
            return f"{x / k:.3g} {p}{unit}"
    return f"{x:.3g} {unit}"


def bits(bps: Any) -> str:
    """bit/s with a decimal prefix (Mbit/s, Gbit/s)."""
    return _decimal(bps, "bit/s") if _ok(bps) else NONE


def bytes_rate(bps: Any) -> str:
    """bytes/s with a decimal prefix (nccl-tests' GB/s = 1e9 bytes/s)."""
    return _decimal(bps, "B/s") if _ok(bps) else NONE


def joules(j: Any) -> str:
    """Energy in J with a decimal prefix (kJ, MJ)."""
    return _decimal(j, "J") if _ok(j) else NONE


def size(n: Any) -> str:
    """Bytes with a binary prefix (KiB, MiB, GiB)."""
    if not _ok(n):
        return NONE
    for k, p in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(n) >= k:
            return f"{n / k:.3g} {p}"
    return f"{int(n)} B"


def share(x: Any) -> str:
    """A fraction as a percentage."""
    return f"{x * 100:.3g}%" if _ok(x) else NONE


def spans(numbers: Any) -> str:
    """Sorted integers as ranges: [3, 4, 5, 9] -> "3–5, 9"; "—" for none."""
    if not numbers:
        return "—"
    xs = sorted(int(x) for x in numbers)
    out, lo, prev = [], xs[0], xs[0]
    for x in [*xs[1:], None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        out.append(str(lo) if lo == prev else f"{lo}–{prev}")
        if x is not None:
            lo = prev = x
    return ", ".join(out)


def by_key(key: str, value: Any) -> str:
    """``value`` formatted by the unit its metric name ``key`` carries; counts as integers,
    other numbers with four significant digits."""
    if value is None:
        return NONE
    if not _ok(value):
        return str(value)
    base = re.sub(r"_(mean|median|p\d+|max|min)$", "", key)  # a statistic keeps the unit
    k = base.lower()
    if base.endswith("_Bps"):
        return bytes_rate(value)
    if k.endswith("_bps"):
        return bits(value)
    if k.endswith("_bytes") or k.startswith("bytes"):
        return size(value)
    if k.endswith("_s"):
        return duration(value)
    if k.endswith(("ratio", "share", "fairness", "utilization", "utilisation")):
        return share(value) if "fairness" not in k else f"{value:.3f}"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.4g}"
