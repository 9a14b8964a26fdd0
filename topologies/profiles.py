"""Built-in shaping profiles: links may name these without defining them.

A profile of the same name under ``profiles:`` in a file replaces the built-in one. ``up`` is
what endpoint a sends to b, ``down`` what b sends to a; edge generators put the edge site at a,
so ``up`` is the site's uplink.

The figures are TYPICAL values meant as starting points, not measurements of any one network.
Each entry says where its numbers come from. Fibre propagation used below: about 4.9 us/km
(light in standard single-mode fibre, ITU-T G.652, group index about 1.47, so c/1.47).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from topologies.spec import ProfileSpec, ShapingSpec

__all__ = ["BUILTIN_PROFILES", "known_profiles"]

_BUILTIN: dict[str, ProfileSpec] = {
    # Intra-DC 100G server/fabric port. Propagation inside a hall (< 500 m, < 2.5 us) is left
    # out: it needs no delay line. Buffer: shallow-buffer merchant switch ASICs share some tens
    # of MB across 32-64 ports (vendor data sheets, e.g. Broadcom Tomahawk class), about 1 MiB
    # per congested port is a typical share.
    "dc-fabric-100g": ProfileSpec(
        description="DC fabric port, 100 Gbit/s, shallow buffer (typical)",
        rate="100Gbit", buffer="1MiB"),
    # 400G fabric port of current AI back-end fabrics (400GbE, IEEE 802.3bs); same buffer share.
    "dc-fabric-400g": ProfileSpec(
        description="DC fabric port, 400 Gbit/s, shallow buffer (typical)",
        rate="400Gbit", buffer="1MiB"),
    # Metro DCI between DCs of one region: 100G coherent wave, about 100 km of fibre
    # -> 0.5 ms one way (4.9 us/km). Deep-buffer DCI router; buffer about one BDP at
    # 1 ms RTT (100 Gbit/s x 1 ms = 12.5 MB), rounded up.
    "dci-metro": ProfileSpec(
        description="metro DCI, 100 Gbit/s, ~100 km of fibre, 0.5 ms one way (typical)",
        rate="100Gbit", delay="500us", buffer="16MiB"),
    # Long-haul DCI across a continent: about 4000 km of fibre route -> 20 ms one way
    # (4.9 us/km). Buffer BDP/sqrt(n) (Appenzeller, Keslassy, McKeown, "Sizing router
    # buffers", SIGCOMM 2004): 100 Gbit/s x 40 ms = 500 MB, n = 64 flows -> about 62.5 MB.
    "dci-longhaul": ProfileSpec(
        description="long-haul DCI, 100 Gbit/s, ~4000 km of fibre, 20 ms one way (typical)",
        rate="100Gbit", delay="20ms", buffer="64MiB"),
    # LTE access: typical public-network figures from crowd-sourced reports (Ookla Speedtest,
    # Opensignal, 2022-2024): tens of Mbit/s down, about 10 Mbit/s up, 40-60 ms RTT with a few
    # ms of jitter. Cellular base stations keep deep per-user queues (bufferbloat: Jiang et
    # al., "Tackling bufferbloat in 3G/4G networks", IMC 2012).
    "edge-lte": ProfileSpec(
        description="LTE edge access, 10 Mbit/s up, 40 Mbit/s down, 25 ms one way (typical)",
        delay="25ms", jitter="2ms", buffer="1000p",
        up=ShapingSpec(rate="10Mbit"), down=ShapingSpec(rate="40Mbit")),
    # 5G NSA mid-band access: same sources, hundreds of Mbit/s down, tens up, 20-30 ms RTT
    # (far above 3GPP TR 38.913's 4 ms user-plane target, which excludes the core and backhaul).
    "edge-5g": ProfileSpec(
        description="5G edge access, 50 Mbit/s up, 300 Mbit/s down, 12 ms one way (typical)",
        delay="12ms", jitter="1ms", buffer="1000p",
        up=ShapingSpec(rate="50Mbit"), down=ShapingSpec(rate="300Mbit")),
    # Campus or enterprise building uplink: 10GbE to the distribution layer, propagation
    # below 10 us (< 2 km), so no delay line; a common access-switch port buffer.
    "campus-uplink": ProfileSpec(
        description="campus uplink, 10 Gbit/s, LAN distances (typical)",
        rate="10Gbit", buffer="1000p"),
}

BUILTIN_PROFILES: Mapping[str, ProfileSpec] = MappingProxyType(_BUILTIN)


def known_profiles(user: Mapping[str, ProfileSpec]) -> dict[str, ProfileSpec]:
    """Built-in profiles overlaid with ``user`` ones (a user profile replaces a built-in one of
    the same name). Returns a new dict, name -> profile."""
    return {**BUILTIN_PROFILES, **user}
