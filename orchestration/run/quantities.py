"""Quantity fields of the experiment file models: strings with units ("16MiB", "5ms",
"1Gbit") checked at validation time by the one unit parser, aitb.units, and kept as
written (the builders parse them again where they need the number).

Numbers are accepted by the type so that the unit parser can say "has no unit" instead of a
type error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator

from aitb.units import UnitError, parse_duration_s, parse_rate_bps, parse_size_bytes

__all__ = ["Quantity", "Size", "Duration", "Rate"]

Quantity = str | int | float


def _checked(parse: Callable[[Any], Any]) -> AfterValidator:
    def check(value: Quantity) -> Quantity:
        try:
            parse(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None
        return value
    return AfterValidator(check)


Size = Annotated[Quantity, _checked(parse_size_bytes)]
Duration = Annotated[Quantity, _checked(parse_duration_s)]
Rate = Annotated[Quantity, _checked(parse_rate_bps)]
