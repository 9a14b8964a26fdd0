"""Delay-line backends, behind one registry (backend name -> module).

The delay line holds each packet of one link direction for its delay and applies the
impairments (jitter, loss, reorder, duplicate, corrupt) of :class:`models.shaping.Shaping`,
after the bottleneck buffer: netem on the receiving side, the native line between the two
ends (the lab's wire namespace, :mod:`testbed.delay.nfqueue.labline`). Two backends: ``netem``
(:mod:`testbed.delay.netem`: netem on an IFB fed by an ingress redirect) and ``native``
(:mod:`testbed.delay.native`: the user-space NFQUEUE delay line of :mod:`testbed.delay.nfqueue`,
for kernels without netem).

**To add a backend: one module here + one line in** :data:`BACKENDS` **below.** A backend
module provides (see :class:`DelayLineBackend`):

- ``NAME``: its registry name;
- ``CAPABILITIES``: capability names (:mod:`testbed.host.capabilities`,
  :mod:`testbed.host.kernel`) the
  kernel must have for it, e.g. ``("netem", "ifb")``;
- ``ingress(shaping, mtu, rx, ifb) -> (ifb name or None, tc objects)``: the pure part, tc
  objects on the receiving node created with the rest of the lab's tc (may be empty);
- ``apply(lab, recipe)``: what needs a live lab beyond tc objects (e.g. start a queue
  process in the receiving namespace), after the lab's tc exists;
- ``verify(lab, recipe) -> list[str]``: readback problems as sentences;
- ``teardown(lab, recipe) -> list[str]``: undo ``apply`` (the lab's namespaces and IFBs
  are removed by the lab itself), returning failures as sentences, never raising.

:class:`testbed.lab.lab.Lab` calls ``apply`` after bring-up, ``verify`` with its readback and
``teardown`` before its registry's teardown, for every recipe whose ``delay_line`` is set
(:func:`testbed.tc.recipe.direction_recipe` takes the backend name). A live change of shaping
(:meth:`testbed.lab.lab.Lab.set_shaping`) rebuilds the tc objects (:mod:`testbed.live.reshape`)
and hands a native line its new parameters (``native.check_change``, ``native.update``). A
process a backend starts is registered the moment it exists (the native helpers through
``Lab.popen_host``), so that ``aitb clean`` finds it.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from testbed.delay import native, netem
from testbed.tc.qdiscs import unknown_name_error

if TYPE_CHECKING:
    from models.shaping import Shaping
    from testbed.lab.handle import LabHandle
    from testbed.tc.objects import DirectionRecipe, TcObject

__all__ = ["BACKENDS", "DEFAULT", "backend", "DelayLineBackend"]

BACKENDS: dict[str, ModuleType] = {
    netem.NAME: netem,
    native.NAME: native,
}
DEFAULT = netem.NAME


class DelayLineBackend(Protocol):
    """The interface of a backend module (module attributes and functions)."""

    NAME: str
    CAPABILITIES: tuple[str, ...]

    def ingress(self, shaping: Shaping, mtu: int, rx: tuple[str, str], ifb: str
                ) -> tuple[str | None, tuple[TcObject, ...]]:
        """(IFB name or None, tc objects on the receiving node); pure."""

    def apply(self, lab: LabHandle, recipe: DirectionRecipe) -> None:
        """Start what the tc objects do not (needs the live lab)."""

    def verify(self, lab: LabHandle, recipe: DirectionRecipe) -> list[str]:
        """Readback problems, as sentences naming node and interface."""

    def teardown(self, lab: LabHandle, recipe: DirectionRecipe) -> list[str]:
        """Undo :meth:`apply`; failures as sentences, never raises."""


def backend(name: str) -> ModuleType:
    """The backend module ``name``. Raises LabError (exit 2) listing the known backends."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise unknown_name_error("delay_line backend", name, list(BACKENDS)) from None
