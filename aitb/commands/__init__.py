"""Command groups of the ``aitb`` CLI. Each module has ``register(app)``; add yours to
:data:`MODULES` (one line) so that modules written in parallel never edit the same lines."""

from __future__ import annotations

import importlib

import typer

MODULES: tuple[str, ...] = (
    "aitb.commands.topo",
    "aitb.commands.workload",
    "aitb.commands.run",
    "aitb.commands.doctor",
    "aitb.commands.pcap",
    "aitb.commands.lab",
    "aitb.commands.clab",
    "aitb.commands.analyze",
    "aitb.commands.campaign",
    "aitb.commands.image",
)


def register_all(app: typer.Typer) -> None:
    """Import every module in :data:`MODULES` and let it add its commands to ``app``."""
    for name in MODULES:
        importlib.import_module(name).register(app)
