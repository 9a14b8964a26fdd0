"""pydantic field types for unit strings in spec files ("16MiB", "5ms", "1Gbit"), the one set
every file model uses (topologies/spec.py, the experiment and workload entries of
orchestration/run/). Values are checked at validation time by the one unit parser,
:mod:`aitb.units`, and kept as written (the builders parse them again where they need the
number). Apart from aitb/units.py so that importing the parser does not import pydantic (the
traffic agents start without it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field

from aitb.units import UnitError, parse_duration_s, parse_rate_bps, parse_size_bytes

__all__ = ["Quantity", "Size", "Duration", "Rate", "unit_check", "described_unit"]

# Numbers are accepted by the type so that the unit parser can say "has no unit" instead of
# a type error.
Quantity = str | int | float


def unit_check(parse: Callable[[Any], object]) -> Callable[[Any], Any]:
    """A pydantic validator function: runs ``parse`` on the value (None passes), turns a
    UnitError into the ValueError pydantic reports, and keeps the value as written."""

    def check(value: Any) -> Any:
        if value is None:
            return None
        try:
            parse(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        return value

    return check


Size = Annotated[Quantity, AfterValidator(unit_check(parse_size_bytes))]
Duration = Annotated[Quantity, AfterValidator(unit_check(parse_duration_s))]
Rate = Annotated[Quantity, AfterValidator(unit_check(parse_rate_bps))]


def described_unit(parse: Callable[[str], object], description: str, example: str,
                   required: bool = False) -> Any:
    """A string field (``None`` by default unless ``required``) checked by ``parse`` before
    validation, with ``description`` and ``example`` for the JSON schema (topology files)."""
    if required:
        return Annotated[str, BeforeValidator(unit_check(parse)),
                         Field(description=description, examples=[example])]
    return Annotated[
        str | None,
        BeforeValidator(unit_check(parse)),
        Field(default=None, description=description, examples=[example]),
    ]
