"""The ``cluster:`` section: the machines a lab spans and how to reach them. Pure.

    cluster:
      underlay_mtu: 1500            # MTU of the machines' own network (bytes)
      machines:
        - {name: m1, ssh: 10.0.0.1, user: root, key: ~/.ssh/aitb, site: dc1}
        - {name: m2, ssh: 10.0.0.2, user: root, key: ~/.ssh/aitb, site: dc2, underlay: 10.1.0.2}

``ssh``: the address (or name) the driver reaches the machine at, ``port`` (22); ``underlay``:
the address the machine's VXLAN tunnels use (default: ``ssh``); ``site``: the nodes of that
site (label ``site``, else ``group``) go there (orchestration.cluster.tunnels.place).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from aitb.errors import SpecError, SpecIssue
from aitb.unit_fields import SpecModel

__all__ = ["Machine", "ClusterSpec", "parse_cluster"]

_Forbid = ConfigDict(extra="forbid", frozen=True)


class Machine(SpecModel):
    """One machine: name, SSH address, port, user, private key file, underlay address,
    site."""

    model_config = _Forbid
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,15}$")
    ssh: str
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key: str | None = None
    underlay: ipaddress.IPv4Address | None = None
    site: str | None = None

    @property
    def underlay_ip(self) -> str:
        """The tunnel address: ``underlay``, else ``ssh`` (which must then be an address)."""
        return str(self.underlay or ipaddress.IPv4Address(self.ssh))


class ClusterSpec(SpecModel):
    """The machines and the underlay's MTU (bytes)."""

    model_config = _Forbid
    underlay_mtu: int = Field(1500, ge=1280, le=65535)
    machines: tuple[Machine, ...] = Field(min_length=1)


def parse_cluster(data: Any, source: str) -> ClusterSpec:
    """Validate a ``cluster:`` mapping. Raises SpecError naming ``source`` and the key path
    for every problem (unknown keys, bad values, duplicate machine names, a machine without
    an underlay address)."""
    try:
        spec = ClusterSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError([SpecIssue(e["msg"], file=source,
                                   key_path=("cluster", *e["loc"])) for e in exc.errors()]
                        ) from None
    issues = []
    seen: set[str] = set()
    for i, m in enumerate(spec.machines):
        if m.name in seen:
            issues.append(SpecIssue(f"machine {m.name!r} named twice", file=source,
                                    key_path=("cluster", "machines", i, "name")))
        seen.add(m.name)
        try:
            m.underlay_ip  # noqa: B018 (the check is the point)
        except ValueError:
            issues.append(SpecIssue(f"machine {m.name}: ssh {m.ssh!r} is not an IPv4 address; "
                                    "give underlay: ADDRESS", file=source,
                                    key_path=("cluster", "machines", i)))
    if issues:
        raise SpecError(issues)
    return spec
