"""iperf3 helpers for the runtime tests (started inside lab nodes through Lab.popen/run)."""

from __future__ import annotations

import json
import subprocess
import time

from aitb.models.errors import CommandError

TCP_IP_TS_HEADERS = 20 + 20 + 12  # IPv4 + TCP + timestamp option, RFC 791/9293/7323
ETH_HLEN = 14  # what HTB counts on top of the IP packet on a veth (skb->len)


def tcp_goodput_bound_bps(rate_bps: int, mtu: int = 1500) -> float:
    """Best TCP goodput through an HTB of ``rate_bps`` on a veth: HTB counts skb->len, i.e.
    the IP packet plus the 14-byte Ethernet header (no preamble, FCS or inter-frame gap on a
    veth); each full segment carries MSS = MTU - 52 payload bytes (with timestamps):
    rate * (MTU - 52) / (MTU + 14) = 0.9564 * rate at MTU 1500."""
    return rate_bps * (mtu - TCP_IP_TS_HEADERS) / (mtu + ETH_HLEN)


def iperf3(lab, client: str, server: str, server_ip: str, seconds: int = 2, omit: int = 1,
           extra: tuple[str, ...] = ()) -> dict:
    """Run one iperf3 test client -> server; return the client's -J result."""
    srv = lab.popen(server, ["iperf3", "-s", "-1", "-J"], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    argv = ["iperf3", "-c", server_ip, "-t", str(seconds), "-O", str(omit), "-J", *extra]
    for _ in range(100):  # the server needs a moment to listen
        try:
            result = json.loads(lab.run(client, argv, timeout_s=seconds + omit + 30).stdout)
        except CommandError as exc:
            if "unable to connect" not in str(exc):
                raise
            result = {"error": str(exc)}
        if "unable to connect" not in result.get("error", ""):
            break
        time.sleep(0.1)
    if "error" in result:
        raise AssertionError(f"iperf3 {' '.join(argv)}: {result['error']}")
    try:
        srv.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass  # Lab.down() ends it
    return result


def received_bps(result: dict) -> float:
    """Goodput the receiver saw (TCP) in bit/s."""
    return result["end"]["sum_received"]["bits_per_second"]
