"""pydantic field types for unit strings in spec files ("16MiB", "5ms", "1Gbit"), the one set
every file model uses (topologies/spec.py, the experiment and workload entries of
orchestration/run/). Values are read at validation time by the one unit parser,
:mod:`models.units`, into typed numbers that remember what was written (``RateBps``
bit/s, ``DurationS`` s, ``SizeBytes`` bytes, ``LossPct`` percent, an ``int`` or ``float``
each; a buffer is a ``BufferSize``): builders use them as numbers and never parse again;
``str()`` and the models' serialisation give the text back. Apart from models/units.py so
that importing the parser does not import pydantic (the traffic agents start without it).

:class:`SpecModel` is the base of every model of a spec file (topology, workload, experiment,
campaign, cluster): it refuses ``true``/``false`` wherever a number is expected. YAML booleans
are Python bools, a subclass of int, and pydantic's lax mode takes ``true`` as 1; the base
checks each field's raw value against the field's type, so a new numeric field of any spec
model refuses booleans without a word of its own (tests/unit/test_spec_bools.py walks them).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from models.units import (
    BufferSize,
    DurationS,
    LossPct,
    RateBps,
    SizeBytes,
    UnitError,
    parse_buffer,
    parse_duration_s,
    parse_pct,
    parse_rate_bps,
    parse_size_bytes,
    read_duration_s,
    read_pct,
    read_rate_bps,
    read_size_bytes,
)

__all__ = ["Quantity", "Size", "Duration", "Rate", "Seed", "MAX_SEED", "unit_check",
           "unit_read", "as_written",
           "described_unit", "SpecModel",
           "takes", "boolean_where_number", "BOOLEAN_NUMBER", "AT_KEY", "error_at"]

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


# A random seed: what every seeded generator of aitb (random, numpy, the delay line's C PRNG)
# takes without wrapping; larger ones (2**64) are refused with the bound in the message.
MAX_SEED = 2**32 - 1
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]

_TYPED = (RateBps, DurationS, SizeBytes, LossPct, BufferSize)


def as_written(value: Any) -> Any:
    """Serialise a typed quantity as the text it was read from (other values unchanged)."""
    return str(value) if isinstance(value, _TYPED) else value


def unit_read(read: Callable[[Any], object]) -> Callable[[Any], Any]:
    """A pydantic validator function: ``read`` the value into its typed quantity (None
    passes), a UnitError becoming the ValueError pydantic reports."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        try:
            return read(value)
        except UnitError as exc:
            raise ValueError(str(exc)) from None

    return convert


_WRITTEN = PlainSerializer(as_written)
# Field types of spec models: read into RateBps / DurationS / SizeBytes at validation.
Size = Annotated[Quantity, AfterValidator(unit_read(read_size_bytes)), _WRITTEN]
Duration = Annotated[Quantity, AfterValidator(unit_read(read_duration_s)), _WRITTEN]
Rate = Annotated[Quantity, AfterValidator(unit_read(read_rate_bps)), _WRITTEN]

_READERS: dict[Callable[..., object], Callable[[Any], object]] = {
    parse_rate_bps: read_rate_bps, parse_duration_s: read_duration_s,
    parse_size_bytes: read_size_bytes, parse_pct: read_pct, parse_buffer: parse_buffer}


def described_unit(parse: Callable[[str], object], description: str, example: str,
                   required: bool = False) -> Any:
    """A unit field (``None`` by default unless ``required``) written as a string, checked
    by ``parse`` before validation (so a bare number gets the unit parser's "has no unit") and
    held as the typed quantity ``parse``'s reader gives (``parse_rate_bps`` -> RateBps, ...;
    ``parse_buffer`` -> BufferSize), with ``description`` and ``example`` for the JSON schema
    (topology files). Serialised as written."""
    read = unit_read(_READERS.get(parse, parse))
    if required:
        return Annotated[str, BeforeValidator(unit_check(parse)), AfterValidator(read),
                         _WRITTEN, Field(description=description, examples=[example])]
    return Annotated[
        str | None,
        BeforeValidator(unit_check(parse)),
        AfterValidator(read),
        _WRITTEN,
        Field(default=None, description=description, examples=[example]),
    ]


_SEQUENCES = (list, tuple, set, frozenset, typing.Sequence, typing.AbstractSet)
_MAPPINGS = (dict, typing.Mapping)


def takes(tp: Any) -> set[str]:
    """What the type ``tp`` accepts of ``{"bool", "number"}`` (both for Any/object): int and
    float (and their subclasses but bool) and numeric Literals are numbers; Annotated and
    unions are looked through; containers and models take neither (their items are checked
    on their own)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return takes(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(takes(a) for a in typing.get_args(tp)))
    if origin is typing.Literal:
        args = typing.get_args(tp)
        return ({"bool"} if any(isinstance(a, bool) for a in args) else set()) | \
            ({"number"} if any(isinstance(a, int | float) and not isinstance(a, bool)
                               for a in args) else set())
    if tp is Any or tp is object:
        return {"bool", "number"}
    if tp is bool:
        return {"bool"}
    if isinstance(tp, type) and issubclass(tp, int | float):
        return {"number"}
    return set()


def _items(tp: Any, value: Any) -> list[tuple[str | int, Any, Any]]:
    """(key or index, item type, item) of a list or mapping ``value`` under type ``tp``."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        return _items(typing.get_args(tp)[0], value)
    if origin in (typing.Union, types.UnionType):
        return [i for a in typing.get_args(tp) for i in _items(a, value)]
    args = typing.get_args(tp)
    if isinstance(value, list | tuple) and origin in _SEQUENCES and args:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return list(zip(range(len(value)), args, value, strict=False))
        return [(i, args[0], v) for i, v in enumerate(value)]
    if isinstance(value, Mapping) and origin in _MAPPINGS and len(args) == 2:
        return [(k, args[1], v) for k, v in value.items()]
    return []


def boolean_where_number(tp: Any, value: Any, where: tuple[str | int, ...] = ()
                         ) -> tuple[tuple[str | int, ...], bool] | None:
    """(key path below ``value``, ``()`` for ``value`` itself; the boolean) of the first
    boolean in ``value`` where ``tp`` wants a number and no boolean, else None."""
    if isinstance(value, bool):
        return (where, value) if takes(tp) == {"number"} else None
    for key, item_tp, item in _items(tp, value):
        found = boolean_where_number(item_tp, item, (*where, key))
        if found is not None:
            return found
    return None


BOOLEAN_NUMBER = "boolean_number"  # the pydantic error type; ctx["key_path"] below the model
AT_KEY = "at_key"  # an error a model validator raises about one of its keys (error_at)


def error_at(key_path: tuple[str | int, ...], message: str) -> PydanticCustomError:
    """The error a model validator raises about the key at ``key_path`` below the model (a
    check across keys, e.g. a campaign's repetitions times its points):
    ``models.specfile.issues_from_validation`` appends ``key_path`` to the model's location,
    so the SpecIssue names that key and its line, not the model as a whole."""
    return PydanticCustomError(AT_KEY, "{message}", {"message": message,
                                                     "key_path": key_path})


class SpecModel(BaseModel):
    """Base of every spec-file model: ``true``/``false`` where the field's type wants a
    number (int, float, a unit quantity, a numeric Literal; also inside lists and mappings)
    is refused before pydantic could take it as 1/0.

    Raises pydantic's ValidationError with one error of type :data:`BOOLEAN_NUMBER` whose
    ``ctx["key_path"]`` is the key (and item) below the model's location;
    ``models.specfile.issues_from_validation`` appends it, so the SpecIssue names file, the full
    key path and its line. (A model validator, not a field validator: pydantic forbids a
    field validator on the discriminator of a tagged union, e.g. ``kind``.)"""

    # defaults go through the validators too, so a default "60s" is a DurationS like a value
    # from the file
    model_config = ConfigDict(validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_numbers(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        for name, field in cls.model_fields.items():
            alias = field.validation_alias if isinstance(field.validation_alias, str) \
                else field.alias
            for key in dict.fromkeys((alias or name, name)):
                if key not in data:
                    continue
                found = boolean_where_number(field.annotation, data[key])
                if found is not None:
                    where, boolean = found
                    raise PydanticCustomError(
                        BOOLEAN_NUMBER, "expected a number, got {got} (a boolean)",
                        {"got": str(boolean).lower(), "key_path": (key, *where)})
        return data

