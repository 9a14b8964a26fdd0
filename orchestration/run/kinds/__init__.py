"""Workload kinds of experiment files: one module per kind (or family of kinds sharing one
entry model), behind one registry (kind name -> module).

**To add a workload kind: one module here + one line in** :data:`MODULES` **below.** The
module holds:

- ``KINDS``: the ``kind:`` names it handles;
- ``Entry``: its pydantic entry model (a ``kind: Literal[...]`` field; the experiment's
  ``workloads`` list is the discriminated union of all modules' entries, :data:`WorkloadEntry`);
- ``build(entry, ctx, plan) -> BuiltWorkload``: its schedule (:class:`models.schedule.Schedule`),
  placement and stragglers, pure, errors pointing at ``workloads[i].<key>``
  (:class:`~orchestration.run.kinds.common.Ctx`).

The pure builders behind a module live in ``workloads/`` (patterns, training, federated,
inference, ...); the records a kind produces follow from its ops (traffic_gen/jsonl.py maps
each record type to its file), so a kind made of existing ops writes no record code.
The roof glues: a module here may import workloads/ and traffic_gen/; those never import
each other.
"""

from __future__ import annotations

from types import ModuleType
from typing import Annotated, Any

from pydantic import Field

from orchestration.run.kinds import app, collective, imported, patterns, serving

__all__ = ["MODULES", "BY_KIND", "KIND_NAMES", "WorkloadEntry", "module"]

MODULES: tuple[ModuleType, ...] = (  # order: the order kinds are listed in errors and docs
    collective,
    patterns,
    imported,
    serving,
    app,
)
BY_KIND: dict[str, ModuleType] = {kind: m for m in MODULES for kind in m.KINDS}
KIND_NAMES: tuple[str, ...] = tuple(BY_KIND)


def _union() -> Any:
    members: Any = None
    for m in MODULES:
        members = m.Entry if members is None else members | m.Entry
    return members


WorkloadEntry = Annotated[_union(), Field(discriminator="kind")]


def module(kind: str) -> ModuleType:
    """The module of workload kind ``kind``; raises KeyError listing the known kinds (the
    experiment's validation refuses unknown kinds before this is asked)."""
    try:
        return BY_KIND[kind]
    except KeyError:
        raise KeyError(f"unknown workload kind {kind!r}; known: {', '.join(KIND_NAMES)}") \
            from None
