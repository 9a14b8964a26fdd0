"""Experiment entry ``kind: app``: run a real application on several nodes at once.

::

    - kind: app
      name: gloo-allreduce           # optional; default "app"
      nodes: [c1, c2, h1]            # hosts (container or namespace); rank i on nodes[i]
      command: [python3, /app/worker.py, --rank, "{rank}", --world, "{world_size}",
                --master, "{master_addr}", --peer, "{addr:c2}"]
      env: {MASTER_ADDR: "{master_addr}", RANK: "{rank}"}
      timeout: 120s                  # every node must have exited (status 0) by then
      start: with_previous           # optional, as for every kind

Placeholders (in ``command`` and in ``env`` values; ``{{``/``}}`` are literal braces):
``{node}`` the node's name, ``{rank}`` its index in ``nodes``, ``{world_size}`` the length of
``nodes``, ``{master_addr}`` the lab (IPv4) address of ``nodes[0]``, ``{addr:<node>}`` the lab
address of any host, ``{src_addr:<node>}`` this node's own address towards that host (to bind
a client socket), ``{addrs:<node>}`` every address of that host, comma-separated. On
multi-NIC hosts each rank gets the peer's NIC nearest to its own node and its own NIC towards
it (:func:`models.paths.peer_addresses`, as replay uses; a GPU reaches a GPU of its server over
their intra-server link): ``{addr:X}`` and ``{master_addr}`` may differ from rank to rank, so
a server on a multi-NIC host listens on all its addresses (``0.0.0.0`` or ``{addrs:X}``).
An app runs one process per node: ``ranks_per_host`` does not split it per NIC.
On a container host the command runs inside the container (argv from
its image, ``docker exec``); on a namespace host, from the host's file system inside its
namespace. Built and checked by :mod:`orchestration.apps.argv`; run by
:mod:`orchestration.apps.run`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from models.unit_fields import Duration, SpecModel
from orchestration.serving.entries import StartMode, WorkloadTransport

__all__ = ["AppEntry"]


def _number_as_text(value: object) -> object:
    """Environment values are text; a number written without quotes becomes its text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


EnvValue = Annotated[str, BeforeValidator(_number_as_text),
                     WithJsonSchema({"type": ["string", "integer", "number"]})]


class AppEntry(SpecModel):
    """``kind: app`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["app"]
    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    start: StartMode = "after_previous"
    transport: WorkloadTransport | None = None
    nodes: Annotated[list[str], Field(min_length=1)]
    command: Annotated[list[str], Field(min_length=1)]
    env: dict[str, EnvValue] = Field(default_factory=dict)
    timeout: Duration = "120s"
