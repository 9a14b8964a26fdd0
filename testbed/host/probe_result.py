"""The result of one capability probe (:class:`Capability`), shared by the probes of
:mod:`testbed.host.capabilities` and :mod:`testbed.host.crypto` (its own module so that neither
probe module imports the other's)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capability"]


@dataclass(frozen=True)
class Capability:
    """One probed capability: ``present`` or not, what was seen, and how to get it."""

    name: str
    present: bool
    detail: str = ""
    remedy: str | None = None
