"""Link shaping: merge the layers of a link's settings per direction and convert the result to
:class:`models.shaping.Shaping` with the parsers of :mod:`models.units`.

Precedence for one direction, most specific first (later layers in :func:`layers` win):
``a_to_b``/``b_to_a`` on the link > the link's own keys > the profile's ``up``/``down`` > the
profile's keys > ``defaults.link``'s keys > its profile's ``up``/``down`` > its profile's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from models.shaping import GilbertElliott, Shaping, refused_key
from models.units import (
    UnitError,
    parse_buffer,
    parse_duration_s,
    parse_pct,
    parse_rate_bps,
)
from topologies.spec import LinkDefaults, LinkSpec, ProfileSpec, ShapingSpec

__all__ = ["Direction", "merged", "to_shaping", "link_shaping", "link_trace_specs",
           "trace_key_path", "setting_key_path", "LinkShapingError"]

Direction = Literal["a_to_b", "b_to_a"]
_FIELDS = tuple(ShapingSpec.model_fields)
_LOSS_KEYS = ("loss", "loss_gemodel")


def _keys(spec: ShapingSpec | None) -> dict[str, Any]:
    """The shaping keys ``spec`` sets (None means not set)."""
    if spec is None:
        return {}
    return {k: getattr(spec, k) for k in _FIELDS if getattr(spec, k) is not None}


def _profile_layers(profile: ProfileSpec | None, direction: Direction) -> list[dict[str, Any]]:
    if profile is None:
        return []
    side = profile.up if direction == "a_to_b" else profile.down
    return [_keys(profile), _keys(side)]


def layers(link: LinkSpec, profile: ProfileSpec | None, default: LinkDefaults | None,
           default_profile: ProfileSpec | None, direction: Direction) -> list[dict[str, Any]]:
    """The setting layers for one direction, least specific first."""
    own = link.a_to_b if direction == "a_to_b" else link.b_to_a
    return [*_profile_layers(default_profile, direction), _keys(default),
            *_profile_layers(profile, direction), _keys(link), _keys(own)]


def merged(stack: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge layers (later wins). Setting ``loss`` or ``loss_gemodel`` in a layer clears the
    other one from the layers below it, so a link can replace a profile's loss model."""
    out: dict[str, Any] = {}
    for layer in stack:
        if any(k in layer for k in _LOSS_KEYS):
            for k in _LOSS_KEYS:
                out.pop(k, None)
        out.update(layer)
    return out


def _gemodel(spec: Any) -> GilbertElliott:
    def pct(value: str | None, default: float) -> float:
        return default if value is None else parse_pct(value)

    return GilbertElliott(p_pct=parse_pct(spec.p), r_pct=pct(spec.r, 100.0),
                          bad_loss_pct=pct(spec.bad_loss, 100.0),
                          good_loss_pct=pct(spec.good_loss, 0.0))


_CONVERT: Mapping[str, tuple[str, Any]] = {
    "rate": ("rate_bps", parse_rate_bps),
    "delay": ("delay_s", parse_duration_s),
    "jitter": ("jitter_s", parse_duration_s),
    "jitter_distribution": ("jitter_distribution", str),
    "jitter_reorder": ("jitter_reorder", bool),
    "delay_correlation": ("delay_correlation_pct", parse_pct),
    "loss": ("loss_pct", parse_pct),
    "loss_gemodel": ("loss_gemodel", _gemodel),
    "reorder": ("reorder_pct", parse_pct),
    "duplicate": ("duplicate_pct", parse_pct),
    "corrupt": ("corrupt_pct", parse_pct),
    "buffer": ("buffer", parse_buffer),
    "aqm": ("aqm", str),
    "ecn": ("ecn", bool),
    "ecn_threshold": ("ecn_threshold", parse_buffer),
}


def to_shaping(keys: Mapping[str, Any]) -> Shaping:
    """Convert merged file keys to a :class:`Shaping` (numbers with units in their names).

    Raises :class:`UnitError` when a value cannot be read or the combination is invalid
    (jitter above delay, ecn with fifo, reorder without delay, loss and loss_gemodel both).
    """
    fields = {}
    for k, v in keys.items():
        if k == "trace":  # a trace is read by topologies.traces
            continue
        try:
            fields[_CONVERT[k][0]] = _CONVERT[k][1](v)
        except UnitError as exc:
            raise _with_key(UnitError(str(exc)), k) from None
    return Shaping(**fields)


def _with_key(exc: UnitError, key: str) -> UnitError:
    exc.shaping_key = key  # type: ignore[attr-defined]  # as models.shaping's checks do
    return exc


class LinkShapingError(UnitError):
    """A direction of a link whose merged settings are refused: the message names the
    direction; ``direction`` and ``key`` (the file key refused, or None) say which."""

    def __init__(self, message: str, direction: str, key: str | None) -> None:
        super().__init__(message)
        self.direction = direction
        self.key = key


def to_changes(keys: Mapping[str, Any]) -> dict[str, Any]:
    """File keys (``rate``, ``delay``, ``loss``...) as :class:`Shaping` field changes
    (``rate_bps``, ``delay_s``, ``loss_pct``...); setting ``loss`` clears ``loss_gemodel``
    and the other way round (as in :func:`merged`). Raises :class:`UnitError` for a value
    that cannot be read or a key that is no shaping key."""
    out: dict[str, Any] = {}
    for k, v in keys.items():
        if k not in _CONVERT:
            raise UnitError(f"{k!r} is no shaping key; known: {', '.join(_CONVERT)}")
        out[_CONVERT[k][0]] = _CONVERT[k][1](v)
    if "loss" in keys and "loss_gemodel" not in keys:
        out["loss_gemodel"] = None
    if "loss_gemodel" in keys and "loss" not in keys:
        out["loss_pct"] = 0.0
    return out


def link_trace_specs(link: LinkSpec, profiles: Mapping[str, ProfileSpec],
                     default: LinkDefaults | None) -> tuple[Any, Any]:
    """The ``trace`` of each direction of ``link`` after the same precedence as every other
    key: ``(a_to_b, b_to_a)``, each a :class:`topologies.spec.TraceSpec` or None."""
    profile = profiles.get(link.profile) if link.profile else None
    dprofile = profiles.get(default.profile) if default and default.profile else None
    a, b = (merged(layers(link, profile, default, dprofile, d)).get("trace")  # type: ignore[arg-type]
            for d in ("a_to_b", "b_to_a"))
    return a, b


def trace_key_path(link: LinkSpec, index: int, profiles: Mapping[str, ProfileSpec],
                   default: LinkDefaults | None, direction: Direction
                   ) -> tuple[str | int, ...]:
    """Key path of the ``trace`` that :func:`link_trace_specs` takes for ``direction`` of
    ``link`` (at ``links[index]``): the most specific layer of :func:`layers` that sets one,
    e.g. ``("links", 3, "a_to_b", "trace")``, ``("profiles", "wan", "up", "trace")`` or
    ``("defaults", "link", "trace")`` (``("links", index, direction, "trace")`` if none)."""
    return setting_key_path(link, index, profiles, default, direction, "trace")


def setting_key_path(link: LinkSpec, index: int, profiles: Mapping[str, ProfileSpec],
                     default: LinkDefaults | None, direction: Direction, key: str
                     ) -> tuple[str | int, ...]:
    """Key path of shaping key ``key`` (``ecn``, ``jitter``...) as merged for ``direction``
    of ``link`` (at ``links[index]``): the most specific layer of :func:`layers` that sets
    it, e.g. ``("profiles", "wan", "ecn")``, ``("defaults", "link", "ecn")`` or
    ``("links", 3, "a_to_b", "ecn")`` (``("links", index, direction, key)`` if none)."""
    side = "up" if direction == "a_to_b" else "down"

    def profile_layers(name: str | None) -> list[tuple[tuple[str | int, ...], Any]]:
        profile = profiles.get(name) if name else None
        if profile is None:
            return []
        return [(("profiles", name), profile), (("profiles", name, side), getattr(profile, side))]

    stack = [*profile_layers(default.profile if default else None),
             (("defaults", "link"), default), *profile_layers(link.profile),
             (("links", index), link),
             (("links", index, direction), link.a_to_b if direction == "a_to_b" else link.b_to_a)]
    path: tuple[str | int, ...] = ("links", index, direction)
    for where, layer in stack:
        if layer is not None and getattr(layer, key, None) is not None:
            path = where
    return (*path, key)


def link_shaping(link: LinkSpec, profiles: Mapping[str, ProfileSpec],
                 default: LinkDefaults | None) -> tuple[Shaping, Shaping]:
    """Both directions of ``link`` resolved: ``(a_to_b, b_to_a)``.

    ``profiles`` must contain every profile named (checked beforehand). Raises
    :class:`LinkShapingError` (a UnitError) whose message names the direction that is
    invalid, with the file key refused (``key``).
    """
    profile = profiles.get(link.profile) if link.profile else None
    dprofile = profiles.get(default.profile) if default and default.profile else None
    out = []
    a, b = (e.split(":", 1)[0] for e in link.endpoints)
    for direction in ("a_to_b", "b_to_a"):
        stack = layers(link, profile, default, dprofile, direction)  # type: ignore[arg-type]
        try:
            out.append(to_shaping(merged(stack)))
        except UnitError as exc:
            src, dst = (a, b) if direction == "a_to_b" else (b, a)
            raise LinkShapingError(f"{direction} ({src} -> {dst}): {exc}", direction,
                                   refused_key(exc)) from None
    return out[0], out[1]
