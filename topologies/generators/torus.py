"""``torus``: a 2D or 3D torus (wrap-around links) or mesh (none) of routers, each with its
host(s): the direct-connect fabric of TPU-style clusters, built with routers because aitb's
hosts do not forward."""

from __future__ import annotations

from itertools import product
from typing import Literal

from pydantic import Field, validate_call

from topologies.generators._build import Builder, GeneratorParamError, add_routed_graph
from topologies.spec import TopologySpec

__all__ = ["torus", "grid_edges"]


Pos = tuple[int, ...]


def grid_edges(dims: tuple[int, ...] | list[int], wrap: bool) -> list[tuple[Pos, Pos]]:
    """Neighbour pairs of a ``dims`` grid (coordinates from 0), each once; with ``wrap`` also
    the link from the last to the first position of every dimension longer than 2 (in a
    dimension of 2 that link would duplicate the existing one)."""
    out = []
    for pos in product(*(range(n) for n in dims)):
        for d, n in enumerate(dims):
            if pos[d] + 1 < n or (wrap and n > 2):
                nxt = list(pos)
                nxt[d] = (pos[d] + 1) % n
                out.append((pos, tuple(nxt)))
    return out


@validate_call
def torus(dims: tuple[int, ...] = (4, 4), wrap: bool = True,
          hosts_per_router: int = Field(default=1, ge=1, le=64), fabric: str | None = None,
          host_link: str | None = None, ecmp_hash: Literal["l3", "l4"] = "l4",
          direct: bool = False,
          name: str = "torus") -> TopologySpec:
    """Routers ``t<x>-<y>[-<z>]`` (coordinates from 1) on a ``dims`` grid, each linked to its
    neighbours in every dimension (``fabric``), with ``wrap`` the last position back to the
    first (a torus; without: a mesh), and ``hosts_per_router`` hosts ``t<x>-<y>-h<k>``.
    Hosts are labelled ``site: row<x>`` (all coordinates but the last): the rows of the
    ``torus_2d`` all-reduce (traffic_gen/algorithms/torus.py) when ranks are placed in host
    order. With ``direct`` the positions ``t<x>-<y>[-<z>]`` are themselves forwarding hosts
    wired to each other (no routers), as in TPU-style pods.

    Raises :class:`GeneratorParamError` (``dims``) unless there are 2 or 3 dimensions, each of
    2 to 64 positions.
    """
    if len(dims) not in (2, 3):
        raise GeneratorParamError("dims", f"dims={dims} has {len(dims)} dimension(s); give 2 "
                                          "or 3 (e.g. [4, 4] or [4, 4, 4]); for one use "
                                          "generator 'ring'")
    if any(not 2 <= n <= 64 for n in dims):
        raise GeneratorParamError("dims", f"dims={dims}: every dimension needs 2 to 64 "
                                          "positions (a dimension of 1 is no dimension)")
    label = {pos: "t" + "-".join(str(c + 1) for c in pos)
             for pos in product(*(range(n) for n in dims))}
    b = Builder()
    add_routed_graph(b, list(label.values()),
                     [(label[x], label[y]) for x, y in grid_edges(dims, wrap)],
                     hosts_per_router, fabric, host_link, ecmp_hash, direct)
    for pos, router in label.items():  # the row along the last dimension: collective sites
        row = "row" + "-".join(str(c + 1) for c in pos[:-1])
        hosts = [router] if direct else [f"{router}-h{k}" for k in range(1, hosts_per_router + 1)]
        for host in hosts:
            b.nodes[host] = b.nodes[host].model_copy(update={"labels": {"site": row}})
    shape = "x".join(map(str, dims))
    what = "forwarding hosts" if direct else f"routers, {hosts_per_router} host(s) each"
    return b.spec(name, f"{shape} {'torus' if wrap else 'mesh'} of {what}")
