"""A small ALTO client (standard library only): what an application on a lab host asks the
lab's ALTO server (experiment key ``alto: {serve: true}``, testbed/apps/alto_server.py).

    python3 examples/alto_client.py http://ADDR:8181/ [METRIC]

Reads the information resource directory, the network map and the cost map of METRIC
(default routingcost), finds its own PID (the PID whose prefixes hold the address this host
reaches the server from) and prints one JSON object: ``pid``, ``metric`` and ``costs`` (PID
-> cost from its own PID, cheapest first). Runs on a namespace host or in a container host
(examples/alto_serve.yaml runs it as a ``kind: app`` workload).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import urllib.parse
import urllib.request
from typing import Any


def get(url: str, media: str) -> Any:
    """GET ``url`` with ``Accept: media``; the decoded JSON body. Raises ValueError when the
    server answers with another media type."""
    req = urllib.request.Request(url, headers={"Accept": f"{media},application/alto-error+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        got = resp.headers.get_content_type()
        if got != media:
            raise ValueError(f"{url}: {got}, expected {media}")
        return json.load(resp)


def own_address(url: str) -> str:
    """The local address this host uses towards the server of ``url`` (a UDP socket's
    connect sends nothing; the kernel picks the source address by route)."""
    parts = urllib.parse.urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((parts.hostname, parts.port or 80))
        return s.getsockname()[0]


def pid_of(network_map: dict[str, Any], address: str) -> str | None:
    """The PID whose longest prefix holds ``address`` (RFC 7285 section 11.2.1)."""
    ip, best = ipaddress.ip_address(address), (-1, None)
    for pid, fams in network_map["network-map"].items():
        for prefix in (*fams.get("ipv4", ()), *fams.get("ipv6", ())):
            net = ipaddress.ip_network(prefix, strict=False)
            if net.version == ip.version and ip in net and net.prefixlen > best[0]:
                best = (net.prefixlen, pid)
    return best[1]


def main(base: str, metric: str = "routingcost") -> dict[str, Any]:
    """Ask the server at ``base`` (module docstring); returns the printed object."""
    ird = get(base, "application/alto-directory+json")
    res = ird["resources"]
    nmap = get(res["networkmap"]["uri"], res["networkmap"]["media-type"])
    cmap = get(res[f"costmap-{metric}"]["uri"], res[f"costmap-{metric}"]["media-type"])
    pid = pid_of(nmap, own_address(base))
    row = cmap["cost-map"].get(pid, {})
    return {"pid": pid, "metric": metric, "vtag": nmap["meta"]["vtag"]["tag"],
            "costs": dict(sorted(row.items(), key=lambda kv: (kv[1], kv[0])))}


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: alto_client.py http://ADDR:PORT/ [METRIC]")
    print(json.dumps(main(*sys.argv[1:])))
