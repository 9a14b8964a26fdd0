"""``single_switch``: N hosts on one switch (Mininet's SingleSwitchTopo)."""

from __future__ import annotations

from pydantic import Field, validate_call

from topologies.generators._build import Builder
from topologies.spec import TopologySpec

__all__ = ["single_switch"]


@validate_call
def single_switch(hosts: int = Field(default=4, ge=1, le=4000),
                  link: str | None = None, name: str = "single-switch") -> TopologySpec:
    """A star of ``hosts`` hosts ``h1..hN`` on switch ``s1``, one subnet.

    hosts: number of hosts; link: shaping profile of every host link (``up`` = host -> switch),
    None for unshaped; name: lab name. Returns the spec (validated and resolved like a file).
    Raises pydantic ``ValidationError`` for bad parameters.
    """
    b = Builder()
    b.node("s1", "switch")
    for i in range(1, hosts + 1):
        b.link(b.node(f"h{i}", "host"), "s1", profile=link)
    return b.spec(name, f"{hosts} hosts on one switch")
