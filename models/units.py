"""The one place where unit strings become numbers.

Every quantity inside aitb is a plain number whose unit is in its name (``rate_bps``,
``delay_s``, ``size_bytes``, ``loss_pct``). Strings with units ("10Gbit", "5ms", "0.1%",
"64KiB", "100p") come from files and the command line and are turned into numbers here and
nowhere else. Parsing is case-insensitive and accepts tc(8)'s spellings.

Conventions (tc(8), "PARAMETERS" section of the tc man page, iproute2):

* rates: ``bit``, ``kbit``, ``mbit``, ``gbit``, ``tbit`` are decimal bits per second
  (1 kbit = 1000 bit/s); ``kibit``, ``mibit``, ``gibit``, ``tibit`` are binary (1024).
  A trailing ``/s`` or ``ps`` is accepted (``10gbit/s``, ``10gbps`` is *not*: see below).
* tc reads ``bps``, ``kbps``, ``mbps``... as *bytes* per second, while most people write
  "Gbps" for gigabits. A silent factor of 8 is worse than an error, so any ``*bps`` spelling
  is refused with a message that says which spelling to use instead.
* sizes: a bare ``b`` is bytes; ``k``/``kb``/``kib``, ``m``/``mb``/``mib``, ``g``/``gb``/``gib``
  are binary multiples (1024, as tc uses them); ``kbit``/``mbit``/``gbit`` are bits (decimal).
* durations: ``s``/``sec``/``secs``, ``ms``/``msec``/``msecs``, ``us``/``usec``/``usecs``/``µs``,
  ``ns``/``nsec``/``nsecs``.
* percentages: a number followed by ``%``.
* packet counts (buffers): a number followed by ``p``, ``pkt``, ``pkts``, ``packet`` or
  ``packets``.

A number without a unit is refused for rates, sizes and durations: the unit is not guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TypeVar

__all__ = [
    "UnitError",
    "RateBps",
    "DurationS",
    "SizeBytes",
    "LossPct",
    "BufferSize",
    "parse_rate_bps",
    "parse_duration_s",
    "parse_size_bytes",
    "parse_pct",
    "parse_buffer",
    "format_rate",
    "format_duration",
    "format_size",
    "read_rate_bps",
    "read_duration_s",
    "read_size_bytes",
    "read_pct",
    "plain",
]

UINT64_MAX = 2**64 - 1
# Sanity bounds: values past these are typos (1e9 Gbit/s), not experiments; each is refused
# with the bound in the message. 10 Tbit/s is above any single link in service (1.6 Tbit/s
# Ethernet); a day of delay or duration, and a pebibyte per transfer, are past any run.
MAX_RATE_BPS = 10 * 10**12
MAX_DURATION_S = 86_400.0
MAX_SIZE_BYTES = 2**50


_N = TypeVar("_N", int, float)


class UnitError(ValueError):
    """A string could not be read as a quantity; the message says what was expected."""


class _AsWritten:
    """Mixin of the typed quantities: a number (bit/s, s, bytes, percent) that remembers the
    string it was read from, which ``str()`` and the spec models' serialisation give back (so
    messages and ``experiment.json`` show what the user wrote); ``repr()`` names the type.
    A subclass names its number type (``_base``) and how a value without text is written
    (``_written``)."""

    text: str
    _base: type

    def __new__(cls, value: float, text: str | None = None) -> _AsWritten:
        """``value`` read from ``text`` (None: the value formatted)."""
        obj = cls._base.__new__(cls, value)
        obj.text = text if text is not None else cls._written(cls._base(value))
        return obj

    @staticmethod
    def _written(value: float) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.text!r})"

    def __reduce__(self) -> tuple[type, tuple[object, str]]:
        return type(self), (self._base(self), self.text)


class RateBps(_AsWritten, int):
    """A rate in bit/s read from a spec string (:func:`read_rate_bps`); an ``int``."""

    _base = int
    _written = staticmethod(lambda v: format_rate(v))


class SizeBytes(_AsWritten, int):
    """A size in bytes read from a spec string (:func:`read_size_bytes`); an ``int``."""

    _base = int
    _written = staticmethod(lambda v: format_size(v))


class DurationS(_AsWritten, float):
    """A duration in seconds read from a spec string (:func:`read_duration_s`); a ``float``."""

    _base = float
    _written = staticmethod(lambda v: format_duration(v))


class LossPct(_AsWritten, float):
    """A percentage read from a spec string (:func:`read_pct`); a ``float`` in [0, 100]."""

    _base = float
    _written = staticmethod(lambda v: f"{_trim(v)}%")


_NUMBER = r"(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)"
_SPLIT = re.compile(rf"^\s*{_NUMBER}\s*(?P<unit>[^\s\d].*?)?\s*$", re.IGNORECASE)

_RATE_UNITS: dict[str, int] = {
    "bit": 1,
    "kbit": 10**3,
    "mbit": 10**6,
    "gbit": 10**9,
    "tbit": 10**12,
    "kibit": 2**10,
    "mibit": 2**20,
    "gibit": 2**30,
    "tibit": 2**40,
}
_SIZE_UNITS: dict[str, tuple[int, int]] = {
    # unit: (numerator, denominator) in bytes
    "b": (1, 1),
    "byte": (1, 1),
    "bytes": (1, 1),
    "k": (2**10, 1),
    "kb": (2**10, 1),
    "kib": (2**10, 1),
    "m": (2**20, 1),
    "mb": (2**20, 1),
    "mib": (2**20, 1),
    "g": (2**30, 1),
    "gb": (2**30, 1),
    "gib": (2**30, 1),
    "t": (2**40, 1),
    "tb": (2**40, 1),
    "tib": (2**40, 1),
    "bit": (1, 8),
    "kbit": (10**3, 8),
    "mbit": (10**6, 8),
    "gbit": (10**9, 8),
}
_TIME_UNITS: dict[str, Decimal] = {
    "s": Decimal(1),
    "sec": Decimal(1),
    "secs": Decimal(1),
    "ms": Decimal("1e-3"),
    "msec": Decimal("1e-3"),
    "msecs": Decimal("1e-3"),
    "us": Decimal("1e-6"),
    "usec": Decimal("1e-6"),
    "usecs": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ns": Decimal("1e-9"),
    "nsec": Decimal("1e-9"),
    "nsecs": Decimal("1e-9"),
}
_PKT_UNITS = {"p", "pkt", "pkts", "packet", "packets"}


def _split(text: object, what: str, example: str) -> tuple[Decimal, str]:
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise UnitError(f"expected {what} as a string with a unit, like {example!r}; got {text!r}")
    if isinstance(text, int | float):
        raise UnitError(f"{what} {text!r} has no unit; write it with one, like {example!r}")
    m = _SPLIT.match(text)
    if not m:
        raise UnitError(
            f"cannot read {text!r} as {what}; expected a number and a unit, like {example!r}")
    try:
        num = Decimal(m.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise UnitError(f"cannot read the number in {text!r}") from exc
    unit = (m.group("unit") or "").strip().lower()
    if not unit:
        raise UnitError(f"{what} {text!r} has no unit; write it with one, like {example!r}")
    return num, unit


def _whole(value: Decimal, text: str, what: str) -> int:
    if value < 0:
        raise UnitError(f"{what} {text!r} is negative")
    if value != value.to_integral_value():
        raise UnitError(f"{what} {text!r} is not a whole number of its base unit")
    out = int(value)
    if out > UINT64_MAX:
        raise UnitError(f"{what} {text!r} does not fit in 64 bits")
    return out


def _bounded(value: _N, bound: _N, text: str, what: str, bound_words: str) -> _N:
    """``value``, or UnitError naming the sanity bound it is past (module constants)."""
    if value > bound:
        raise UnitError(f"{what} {text!r} is above the sanity bound of {bound_words}")
    return value


def parse_rate_bps(text: str) -> int:
    """Read a rate such as ``"10Gbit"``, ``"400gbit"``, ``"1.5mbit/s"`` as bits per second.

    Returns an ``int`` (bit/s, exact: ``"400Gbit"`` gives 400_000_000_000).
    Raises :class:`UnitError` for a missing or unknown unit, a negative rate, a fraction of a
    bit per second, a value above :data:`MAX_RATE_BPS`, or a ``*bps`` spelling (tc reads it as bytes
    per second; see the module docstring).
    """
    if isinstance(text, RateBps):
        return int(text)
    num, unit = _split(text, "a rate", "10Gbit")
    base = unit.removesuffix("/s")
    if base.endswith("bps"):
        raise UnitError(
            f"rate {text!r} is ambiguous: tc reads '{unit}' as BYTES per second, most people mean "
            f"bits; write '{num}{unit[:-3]}bit' for bits per second"
        )
    if base not in _RATE_UNITS:
        raise UnitError(
            f"unknown rate unit {unit!r} in {text!r}; use one of {', '.join(_RATE_UNITS)}"
        )
    return _bounded(_whole(num * _RATE_UNITS[base], text, "rate"), MAX_RATE_BPS, text, "rate",
                    "10Tbit")


def parse_duration_s(text: str) -> float:
    """Read a duration such as ``"5ms"``, ``"100us"``, ``"2s"`` as seconds (``float``).

    Raises :class:`UnitError` for a missing or unknown unit, a negative duration or one above
    :data:`MAX_DURATION_S`.
    """
    if isinstance(text, DurationS):
        return float(text)
    num, unit = _split(text, "a duration", "5ms")
    if unit not in _TIME_UNITS:
        raise UnitError(
            f"unknown time unit {unit!r} in {text!r}; "
            "use one of s, ms, us, ns (or tc's sec, msec, usec)"
        )
    if num < 0:
        raise UnitError(f"duration {text!r} is negative")
    return _bounded(float(num * _TIME_UNITS[unit]), MAX_DURATION_S, text, "duration", "1 day")


def parse_size_bytes(text: str) -> int:
    """Read a size such as ``"64KiB"``, ``"1.5m"``, ``"1500b"`` as bytes (``int``).

    k/m/g multiples are binary (1024), as in tc(8). Raises :class:`UnitError` for a missing or
    unknown unit, a negative size, a size that is not a whole number of bytes or one above
    :data:`MAX_SIZE_BYTES`.
    """
    if isinstance(text, SizeBytes):
        return int(text)
    num, unit = _split(text, "a size", "64KiB")
    if unit not in _SIZE_UNITS:
        raise UnitError(
            f"unknown size unit {unit!r} in {text!r}; use b, KiB, MiB, GiB (k/kb/m/mb/g/gb are "
            "binary, as in tc) or kbit/mbit/gbit"
        )
    mul, div = _SIZE_UNITS[unit]
    return _bounded(_whole(num * mul / div, text, "size"), MAX_SIZE_BYTES, text, "size",
                    "1PiB")


def parse_pct(text: str) -> float:
    """Read a percentage such as ``"0.1%"`` as a number of percent (``0.1``), in [0, 100].

    Raises :class:`UnitError` without a ``%`` sign or outside [0, 100].
    """
    if isinstance(text, LossPct):
        return float(text)
    num, unit = _split(text, "a percentage", "0.1%")
    if unit != "%":
        raise UnitError(f"percentage {text!r} needs a '%' sign, like '0.1%'")
    if num < 0 or num > 100:
        raise UnitError(f"percentage {text!r} is outside 0% to 100%")
    return float(num)


@dataclass(frozen=True, slots=True)
class BufferSize:
    """A queue limit: exactly one of ``packets`` or ``size_bytes`` is set."""

    packets: int | None = None
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        if (self.packets is None) == (self.size_bytes is None):
            raise UnitError("a buffer is either a packet count or a byte size, not both or neither")
        value = self.packets if self.packets is not None else self.size_bytes
        if value is not None and value <= 0:
            raise UnitError("a buffer must hold at least one packet or byte")

    def __str__(self) -> str:
        return f"{self.packets}p" if self.packets is not None else format_size(self.size_bytes or 0)


def parse_buffer(text: str) -> BufferSize:
    """Read a buffer limit: ``"100p"``/``"100 packets"`` in packets, ``"256KiB"`` in bytes.

    Raises :class:`UnitError` for an unknown unit or a non-positive limit.
    """
    if isinstance(text, BufferSize):
        return text
    num, unit = _split(text, "a buffer", "100p or 256KiB")
    if unit in _PKT_UNITS:
        return BufferSize(packets=_whole(num, text, "buffer"))
    return BufferSize(size_bytes=parse_size_bytes(text))


def _trim(x: float) -> str:
    return f"{x:.6g}"


def format_rate(rate_bps: int) -> str:
    """Format bit/s for people and for tc, exactly when possible: 400e9 -> ``"400gbit"``."""
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        mul = _RATE_UNITS[unit]
        if rate_bps >= mul and rate_bps % mul == 0:
            return f"{rate_bps // mul}{unit}"
    return f"{rate_bps}bit"


def format_duration(delay_s: float) -> str:
    """Format seconds for people: 0.005 -> ``"5ms"``."""
    if delay_s == 0:
        return "0s"
    for unit, mul in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(delay_s) >= mul:
            return f"{_trim(delay_s / mul)}{unit}"
    return f"{_trim(delay_s / 1e-9)}ns"


def format_size(size_bytes: int) -> str:
    """Format bytes for people with binary multiples: 65536 -> ``"64KiB"``."""
    for unit, mul in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= mul:
            value = size_bytes / mul
            shown = round(value) if math.isclose(value, round(value)) else _trim(value)
            return f"{shown}{unit}"
    return f"{size_bytes}B"


def read_rate_bps(text: object) -> RateBps:
    """:func:`parse_rate_bps`, keeping ``text``: what spec models hold (models.unit_fields)."""
    if isinstance(text, RateBps):
        return text
    return RateBps(parse_rate_bps(text), str(text))  # type: ignore[arg-type]


def read_duration_s(text: object) -> DurationS:
    """:func:`parse_duration_s`, keeping ``text``."""
    if isinstance(text, DurationS):
        return text
    return DurationS(parse_duration_s(text), str(text))  # type: ignore[arg-type]


def read_size_bytes(text: object) -> SizeBytes:
    """:func:`parse_size_bytes`, keeping ``text``."""
    if isinstance(text, SizeBytes):
        return text
    return SizeBytes(parse_size_bytes(text), str(text))  # type: ignore[arg-type]


def read_pct(text: object) -> LossPct:
    """:func:`parse_pct`, keeping ``text``."""
    if isinstance(text, LossPct):
        return text
    return LossPct(parse_pct(text), str(text))  # type: ignore[arg-type]


def plain(value: _N | None) -> _N | None:
    """A typed quantity as the plain ``int`` or ``float`` it stands for (None passes): what
    builders put into plans, programs and messages, so that ``f"{x} B"`` prints a number."""
    if value is None or type(value) in (int, float):
        return value
    return int(value) if isinstance(value, int) else float(value)  # type: ignore[return-value]
