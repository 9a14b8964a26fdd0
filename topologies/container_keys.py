"""Checks and normalisation of the container keys of a host with an ``image``: ``command``
(argv replacing the image's CMD), ``environment`` and ``binds`` (host path -> container path,
``:ro`` unless it ends in ``:rw``). Pure apart from one read of the file system: a bind's host
path must exist when the topology is loaded."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from models.errors import SpecIssue
from topologies.spec import NodeSettings

__all__ = ["CONTAINER_KEYS", "split_bind", "normal_binds", "check_container_keys"]

CONTAINER_KEYS = ("command", "environment", "binds")
_MODES = ("ro", "rw")


def split_bind(target: str) -> tuple[str, str]:
    """``"/app"`` -> ``("/app", "ro")``; ``"/app:rw"`` -> ``("/app", "rw")``. Raises
    ValueError naming ``target`` if the path is not absolute or the mode is not ro/rw."""
    path, sep, mode = target.rpartition(":")
    if not sep:
        path, mode = target, "ro"
    if mode not in _MODES:
        raise ValueError(f"{target!r}: the mode after ':' must be ro or rw, not {mode!r}")
    if not PurePosixPath(path).is_absolute():
        raise ValueError(f"{target!r}: the container path must be absolute")
    return path, mode


def normal_binds(binds: Mapping[str, str]) -> dict[str, str]:
    """Binds with the mode spelt out: host path -> ``"<container path>:<ro|rw>"`` (for
    :class:`models.plan.NodePlan`); ``binds`` must have passed
    :func:`check_container_keys`."""
    return {host: ":".join(split_bind(target)) for host, target in binds.items()}


def _bind_issues(binds: Mapping[str, str], path: tuple) -> Iterator[SpecIssue]:
    for host, target in binds.items():
        where = (*path, "binds", host)
        if not Path(host).is_absolute():
            yield SpecIssue(f"host path {host!r} must be absolute", key_path=where)
        elif not Path(host).exists():
            yield SpecIssue(f"host path {host!r} does not exist", key_path=where)
        try:
            split_bind(target)
        except ValueError as exc:
            yield SpecIssue(str(exc), key_path=where)


def check_container_keys(layers: list[NodeSettings | None], kind: str,
                         path: tuple, layer_paths: list[tuple] | None = None
                         ) -> Iterator[SpecIssue]:
    """Issues of the container keys of the node at ``path`` whose settings ``layers`` are
    (node, group, defaults: most specific first): they need a host with an image, the
    command a non-empty first word, binds absolute existing host paths. ``layer_paths``: the
    key path of each layer (default: ``path`` for all), so that a key set by the group or by
    ``defaults`` is reported there, at the line where it is written."""
    paths = layer_paths or [path] * len(layers)
    given = [(k, layer, at) for layer, at in zip(layers, paths, strict=True)
             if layer is not None for k in CONTAINER_KEYS if getattr(layer, k) is not None]
    if not given:
        return
    image = next((x.image for x in layers if x is not None and x.image is not None), None)
    if kind != "host" or image is None:
        node = path[-1] if path else "?"
        for key, at in dict.fromkeys((k, at) for k, _, at in given):
            yield SpecIssue(f"{key} applies to container hosts only (kind host with an "
                            f"image), not to {kind} {node}", key_path=(*at, key))
        return
    for key, layer, at in given:
        if key == "command" and not (layer.command or [""])[0]:
            yield SpecIssue("command[0] (the program) must not be empty",
                            key_path=(*at, "command"))
        elif key == "binds":
            yield from _bind_issues(layer.binds or {}, at)
