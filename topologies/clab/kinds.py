"""containerlab kinds -> aitb node kinds (host, router, switch), with the reason for each.

aitb runs no container images: a node becomes a network namespace that forwards (router),
bridges (switch) or ends traffic (host). The kind names are those of containerlab's JSON
schema (schemas/clab.schema.json, ``node-config.kind``) and its legacy aliases.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["KindMapping", "map_kind", "KIND_LABEL", "ROUTER_IMAGE_RE", "KNOWN_KINDS"]

DATAPATH_LABEL = "aitb.datapath"  # a switch's datapath (bridge|ovs), kept through export/import
FORWARD_LABEL = "aitb.forward"  # "true" on a forwarding host, kept through export/import
KIND_LABEL = "aitb.kind"  # a node label that says what the node is in aitb (host|router|switch)
AITB_KINDS = ("host", "router", "switch")

# Linux containers and VMs that end traffic: they become hosts.
HOST_KINDS = frozenset({"linux", "generic_vm", "keysight_ixia-c-one", "ostinato", "spirent_stc",
                        "ext-container", "openbsd", "freebsd"})
# Bridges on the containerlab host: they become switches (a Linux bridge in its own namespace).
SWITCH_KINDS = frozenset({"bridge", "ovs-bridge"})
# Kinds that stand for something outside any lab: refused with the reason.
REFUSED_KINDS: Mapping[str, str] = {
    "host": "a 'host' node is the containerlab host itself; aitb labs never attach to the "
            "host's network",
    "k8s-kind": "a kind (Kubernetes in Docker) cluster is not a network node aitb can emulate",
    "border0": "a border0 node is a tunnel to an outside service; lab traffic stays in the lab",
}
# Vendor network operating systems (routers, L3 switches, firewalls): they become routers.
ROUTER_KINDS = frozenset({
    "nokia_srlinux", "arista_ceos", "juniper_crpd", "juniper_csrx", "sonic-vs", "sonic-vm",
    "nokia_sros", "nokia_srsim", "juniper_vmx", "juniper_vqfx", "juniper_vsrx",
    "juniper_vjunosrouter", "juniper_vjunosswitch", "juniper_vjunosevolved", "cisco_xrv",
    "cisco_xrv9k", "arista_veos", "cisco_csr1000v", "paloalto_panos", "mikrotik_ros",
    "6wind_vsr", "cisco_n9kv", "cisco_ftdv", "dell_ftosv", "dell_sonic", "aruba_aoscx",
    "ipinfusion_ocnos", "checkpoint_cloudguard", "ciena_saos", "rare", "cisco_xrd",
    "cisco_xrd_vrouter", "cisco_c8000", "cisco_c8000v", "cisco_cat9kv", "cisco_iol",
    "cisco_asav", "cisco_vios", "nvidia_cumulusvx", "huawei_vrp", "fortinet_fortigate",
    "fdio_vpp", "vyosnetworks_vyos", "juniper_cjunosevolved", "arrcus_arcos", "f5_bigip-ve",
    "cisco_sdwan", "openwrt", "veesix_osvbng", "plvision_sonic",
    # legacy names containerlab still accepts
    "srl", "ceos", "crpd", "xrd", "vr-sros", "vr-vmx", "vr-vqfx", "vr-xrv", "vr-xrv9k",
    "vr-veos", "vr-csr", "vr-n9kv", "vr-nxos", "vr-pan", "vr-ros", "vr-ftosv", "vr-aoscx",
    "cvx", "sonic", "ipinfusion-ocnos", "vr-vsrx", "vr-vjunosswitch",
})
KNOWN_KINDS = HOST_KINDS | SWITCH_KINDS | ROUTER_KINDS | frozenset(REFUSED_KINDS)

# Images of Linux containers that route (routing daemons): their nodes become routers.
ROUTER_IMAGE_RE = re.compile(
    r"(^|/)(frr|frrouting|bird[0-9]?|quagga|vyos|openbgpd|gobgp|holo|freertr|sonic[-\w]*)"
    r"(:|@|$)")


@dataclass(frozen=True, slots=True)
class KindMapping:
    """What a containerlab node becomes: ``kind`` (aitb), ``why`` (for warnings), and
    ``warn``: True when something the node would run is lost (a vendor NOS or a routing
    daemon replaced by the kernel's forwarding, or a host bridge by a namespaced one)."""

    kind: str
    why: str
    warn: bool


def _image_name(image: str | None) -> str:
    return (image or "").lower()


def map_kind(clab_kind: str, image: str | None, labels: Mapping[str, str]) -> KindMapping:
    """The aitb kind of a node of containerlab ``clab_kind`` running ``image``.

    A label ``aitb.kind: host|router|switch`` on the node (or its group, kind or defaults)
    decides first. Raises ValueError with the reason for a refused or unknown kind, or a bad
    label value (the caller names file, key and node).
    """
    forced = labels.get(KIND_LABEL)
    if forced is not None:
        if forced not in AITB_KINDS:
            raise ValueError(f"label {KIND_LABEL}={forced!r}: use one of {', '.join(AITB_KINDS)}")
        return KindMapping(forced, f"label {KIND_LABEL}", False)
    if clab_kind in REFUSED_KINDS:
        raise ValueError(f"kind {clab_kind!r} cannot be mapped: {REFUSED_KINDS[clab_kind]}")
    if clab_kind in SWITCH_KINDS:
        return KindMapping("switch", f"kind {clab_kind} is a bridge on the containerlab host; "
                           "aitb makes it a Linux bridge in its own namespace", True)
    if clab_kind in HOST_KINDS:
        if ROUTER_IMAGE_RE.search(_image_name(image)):
            return KindMapping("router", f"kind {clab_kind} with routing image {image}; aitb "
                               "forwards with static routes instead of the routing daemon",
                               True)
        return KindMapping("host", f"kind {clab_kind}", False)
    if clab_kind in ROUTER_KINDS:
        return KindMapping("router", f"kind {clab_kind} is a network OS aitb cannot run; "
                           "aitb forwards with static routes", True)
    raise ValueError(f"unknown containerlab kind {clab_kind!r} (not in containerlab's schema); "
                     f"set the label {KIND_LABEL}: host|router|switch on the node to map it")
