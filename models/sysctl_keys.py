"""Which sysctls a node may set, and the shape of some values (pure; no kernel, no root).

A node's sysctls are written inside its network namespace (testbed/ns/sysctl.py). Only the
``net.*`` tree is per network namespace; ``kernel.*``, ``vm.*``, ``fs.*`` and the rest are one
copy for the whole machine, so writing them "inside a node" would change the host (and stay
changed after the lab). Which ``net.*`` keys a fresh namespace has, and whether it may write
them, depends on the kernel: that part is probed at deploy time
(:func:`testbed.ns.sysctl_probe.namespace_problems`).
"""

from __future__ import annotations

__all__ = ["NODE_PREFIX", "TRIPLES", "key_problem", "value_problem"]

NODE_PREFIX = "net."

# "min default max" (tcp_rmem/tcp_wmem: bytes, Documentation/networking/ip-sysctl.rst;
# *_mem: pages, "min pressure max"); the kernel itself does not check the order
TRIPLES = frozenset({"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_mem",
                     "net.ipv4.udp_mem", "net.sctp.sctp_mem", "net.sctp.sctp_rmem",
                     "net.sctp.sctp_wmem"})


def key_problem(key: str) -> str | None:
    """Why a node may not set sysctl ``key`` (it is not under ``net.``), or None. Pure."""
    if key.startswith(NODE_PREFIX):
        return None
    return (f"sysctl {key} is not per network namespace (a node may set net.* keys only): "
            "written inside a node it would change the whole machine, and stay changed "
            "after the lab; set it on the host yourself if you mean that")


def value_problem(key: str, value: object) -> str | None:
    """Why ``value`` cannot be sysctl ``key``'s value, or None. Checks the keys of
    :data:`TRIPLES`: exactly three non-negative integers separated by white space, in order
    (min <= default <= max). Pure."""
    if key not in TRIPLES:
        return None
    parts = str(value).split()
    if len(parts) != 3 or not all(p.isdigit() and p.isascii() for p in parts):
        return (f"sysctl {key} takes three non-negative integers 'min default max' "
                f"separated by spaces, e.g. '4096 131072 6291456'; got {str(value)!r}")
    low, mid, high = (int(p) for p in parts)
    if not low <= mid <= high:
        return (f"sysctl {key} {str(value)!r}: the three values must be in order, "
                f"min <= default <= max")
    return None
