"""The ``cluster:`` section: the machines a lab spans and how to reach them. Pure.

    cluster:
      underlay_mtu: 1500            # MTU of the machines' own network (bytes)
      machines:
        - {name: m1, ssh: 10.0.0.1, user: root, key: ~/.ssh/aitb, site: dc1}
        - {name: m2, ssh: 10.0.0.2, user: root, key: ~/.ssh/aitb, site: dc2, underlay: 10.1.0.2}

``ssh``: the address (or name) the driver reaches the machine at, ``port`` (22); ``underlay``:
the address the machine's VXLAN tunnels use (default: ``ssh``); ``site``: the nodes of that
site (label ``site``, else ``group``) go there (orchestration.cluster.tunnels.place).
``deploy``: ``parallel`` (default: every machine brings its part up at once) or ``serial``
(one after the other; bench/cluster_split.py compares the two).
``probe_interval`` (5s) and ``probe_timeout`` (30s): while a run goes on, the driver runs
``true`` on every machine over SSH each ``probe_interval``; a machine that does not answer
within ``probe_timeout`` is lost and fails the run naming it (a shorter timeout finds a lost
machine sooner, a longer one rides out a slow or congested control network).
``known_hosts``: a known_hosts file (OpenSSH's format, ``~`` expanded, relative to the current
directory as ``key`` is) trusted besides the user's ``~/.ssh/known_hosts`` and the system's
``/etc/ssh/ssh_known_hosts``; newly trusted keys go there (else to the user's).
``trust_on_first_use`` (false): a machine whose host key is in none of them is trusted and
its key added; false refuses it (as OpenSSH's StrictHostKeyChecking yes). A key other than
the one on file is refused either way (orchestration.cluster.control).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictBool, ValidationError

from models.errors import SpecError, SpecIssue
from models.unit_fields import Duration, SpecModel

__all__ = ["Machine", "ClusterSpec", "parse_cluster", "cluster_issues",
           "key_problems"]

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
    place: dict[str, str] = Field(default_factory=dict)
    aitb: tuple[str, ...] = Field(("aitb",), min_length=1)
    python: str = "python3"
    deploy: Literal["parallel", "serial"] = "parallel"
    probe_interval: Duration = "5s"
    probe_timeout: Duration = "30s"
    known_hosts: str | None = Field(None, min_length=1)
    trust_on_first_use: StrictBool = False

    @property
    def probe_interval_s(self) -> float:
        """``probe_interval`` in seconds."""
        return float(self.probe_interval)  # read with the spec: DurationS

    @property
    def probe_timeout_s(self) -> float:
        """``probe_timeout`` in seconds."""
        return float(self.probe_timeout)


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
    issues = cluster_issues(spec, source)
    if issues:
        raise SpecError(issues)
    return spec


def cluster_issues(spec: ClusterSpec, source: str) -> list[SpecIssue]:
    """What the model alone does not check: machine names used twice, a machine without an
    underlay address, a zero probe interval or timeout, ``place`` naming an unknown machine;
    each naming ``source`` and the key path. Pure."""
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
    for key in ("probe_interval", "probe_timeout"):
        if getattr(spec, f"{key}_s") <= 0:
            issues.append(SpecIssue(f"{key} must be longer than 0 s", file=source,
                                    key_path=("cluster", key)))
    for node, machine in spec.place.items():
        if machine not in seen:
            issues.append(SpecIssue(f"node {node}: unknown machine {machine!r}; machines: "
                                    f"{', '.join(sorted(seen))}", file=source,
                                    key_path=("cluster", "place", node)))
    return issues


def key_problems(spec: ClusterSpec, source: str) -> list[SpecIssue]:
    """A problem per machine whose ``key`` is not a readable private key file (missing, not
    a regular file, unreadable, or not a key paramiko can load), naming ``source``, the key
    path ``cluster.machines[i].key`` and the machine. Reads the files; creates nothing."""
    import paramiko

    out = []
    for i, m in enumerate(spec.machines):
        if m.key is None:
            continue
        path = Path(m.key).expanduser()
        why = None
        if not path.is_file():
            why = "no such file" if not path.exists() else "not a regular file"
        else:
            try:
                paramiko.PKey.from_path(path)
            except (OSError, paramiko.SSHException, ValueError) as exc:
                why = f"not a private key paramiko can load ({type(exc).__name__}: {exc})"
        if why:
            out.append(SpecIssue(f"machine {m.name}: key file {str(path)!r}: {why}",
                                 file=source, key_path=("cluster", "machines", i, "key")))
    return out
