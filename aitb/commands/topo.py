"""``aitb topo ...``: validate, deploy, inspect and destroy labs."""

from __future__ import annotations

import typer

topo_app = typer.Typer(help="Topologies: validate, deploy, inspect, destroy.",
                       no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``topo`` group to ``app``."""
    app.add_typer(topo_app, name="topo")
