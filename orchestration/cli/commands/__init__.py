"""Command groups of the ``aitb`` CLI. Each module has ``register(app)``; add yours to
:data:`MODULES` (one line) so that modules written in parallel never edit the same lines."""

from __future__ import annotations

import importlib

import typer

MODULES: tuple[str, ...] = (
    "orchestration.cli.commands.topo",
    "orchestration.cli.commands.workload",
    "orchestration.cli.commands.run",
    "orchestration.cli.commands.doctor",
    "orchestration.cli.commands.pcap",
    "orchestration.cli.commands.lab",
    "orchestration.cli.commands.clab",
    "orchestration.cli.commands.analyze",
    "orchestration.cli.commands.campaign",
    "orchestration.cli.commands.image",
    "orchestration.cli.commands.capacity",
    "orchestration.cli.commands.cluster",
    "orchestration.cli.commands.verify",
)


def register_all(app: typer.Typer) -> None:
    """Import every module in :data:`MODULES` and let it add its commands to ``app``."""
    for name in MODULES:
        importlib.import_module(name).register(app)
