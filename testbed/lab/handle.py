"""What the helpers of :class:`testbed.lab.lab.Lab` (testbed.live.reshape, testbed.ovs.lab,
testbed.ovs.settle, the backends of testbed.delay) use of a lab, as a Protocol: they
are imported by testbed.lab.lab, so they name this type instead of importing the Lab back (which
would close an import circle, even under TYPE_CHECKING). For the same reason it imports
nothing of testbed/: the layout, registry and namespace handles are typed ``Any`` here, their
classes named in comments."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any, Protocol

from models.plan import LabPlan

__all__ = ["LabHandle"]


class LabHandle(Protocol):
    """A live lab: its plan and layout, registry of what exists, handles on the namespaces,
    started processes and OVS state (attributes of :class:`testbed.lab.lab.Lab`)."""

    plan: LabPlan
    run_id: str
    layout: Any  # testbed.lab.layout.Layout
    registry: Any  # testbed.lab.registry.Registry
    io: dict[str, Any]  # node -> testbed.lab.realise.NodeIO
    children: dict[int, subprocess.Popen[Any]]
    started: list[tuple[int, int]]
    ovs: dict[str, Any]
    ovs_controller: str | None
    ovs_datapaths: dict[str, str]
    line_cpu: int | None  # a CPU for the native delay line alone (testbed.lab.lab.Lab)
    ecn_markers: dict[tuple[str, str], Any]  # (link, direction) -> testbed.tc.ecn_marker

    def node_io(self, node: str) -> Any:
        """The open namespace fd and netlink socket of ``node`` (testbed.lab.realise.NodeIO)."""

    def popen(self, node: str, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` in ``node``'s namespace, registered for teardown."""

    def popen_host(self, argv: Sequence[str], node: str = "(root namespace)",
                   pdeathsig: int | None = None, record: Any = None,
                   **kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` from the calling thread, registered before it execs."""

    def verify(self, nodes: Sequence[str] | None = None) -> None:
        """Read the kernel's state back; raise LabError naming what differs."""
