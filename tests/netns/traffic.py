"""iperf3 helpers for the runtime tests (started inside lab nodes through Lab.popen/run)."""

from __future__ import annotations

import json
import subprocess
import time

from testbed.ns import netns

TCP_IP_TS_HEADERS = 20 + 20 + 12  # IPv4 + TCP + timestamp option, RFC 791/9293/7323
ETH_HLEN = 14  # what HTB counts on top of the IP packet on a veth (skb->len)


def tcp_goodput_bound_bps(rate_bps: int, mtu: int = 1500) -> float:
    """Best TCP goodput through an HTB of ``rate_bps`` on a veth: HTB counts skb->len, i.e.
    the IP packet plus the 14-byte Ethernet header (no preamble, FCS or inter-frame gap on a
    veth); each full segment carries MSS = MTU - 52 payload bytes (with timestamps):
    rate * (MTU - 52) / (MTU + 14) = 0.9564 * rate at MTU 1500."""
    return rate_bps * (mtu - TCP_IP_TS_HEADERS) / (mtu + ETH_HLEN)


def wait_listening(lab, node: str, port: int, timeout_s: float = 20.0) -> None:
    """Wait until a TCP socket listens on ``port`` in ``node`` (reads the namespace's
    /proc/net/tcp from a thread inside it; a probe connection would use up iperf3 -s -1)."""
    def listening() -> bool:
        rows = []
        for name in ("tcp", "tcp6"):  # iperf3 listens on a dual-stack socket
            with open(f"/proc/thread-self/net/{name}") as f:
                rows += [line.split() for line in f.readlines()[1:]]
        return any(r[1].endswith(f":{port:04X}") and r[3] == "0A" for r in rows)

    deadline = time.monotonic() + timeout_s
    while not netns.run_in(lab.node_io(node).fd, listening):
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing listens on port {port} in {node}")
        time.sleep(0.02)


def warm_up_lossy(lab, node: str, dst: str, deadline_s: int = 20) -> None:
    """Resolve ``node``'s neighbour towards ``dst`` through a lossy link: ping until ONE reply
    comes back (``-c 1 -w``), one echo each 0.2 s for up to ``deadline_s``. A fixed ``-c 2``
    warm-up fails whenever both echoes (or the ARP request) are lost: 1-4 % of runs at 10 %
    loss, seen in CI; this one fails with probability about 0.19**100."""
    lab.run(node, ["ping", "-c", "1", "-i", "0.2", "-w", str(deadline_s), dst],
            timeout_s=deadline_s + 30)


def start_server(lab, server: str):
    """iperf3 -s -1 in ``server``, returned once it listens."""
    srv = lab.popen(server, ["iperf3", "-s", "-1", "-J"], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
    wait_listening(lab, server, 5201)
    return srv


def iperf3(lab, client: str, server: str, server_ip: str, seconds: int = 2, omit: int = 1,
           extra: tuple[str, ...] = ()) -> dict:
    """Run one iperf3 test client -> server; return the client's -J result."""
    srv = start_server(lab, server)
    argv = ["iperf3", "-c", server_ip, "-t", str(seconds), "-O", str(omit), "-J", *extra]
    result = json.loads(lab.run(client, argv, timeout_s=seconds + omit + 30).stdout)
    if "error" in result:
        raise AssertionError(f"iperf3 {' '.join(argv)}: {result['error']}")
    try:
        srv.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass  # Lab.down() ends it
    return result


def _rx_bytes_at(lab, node: str, ifname: str) -> tuple[float, int]:
    """(monotonic time, rx_bytes) of ``ifname`` in ``node``, read in one netlink call; read
    again if the call itself took over 5 ms (this process was descheduled within it)."""
    from pyroute2 import IPRoute

    with IPRoute(netns=lab.netns_name(node)) as ipr:
        index = lab.layout.nodes[node].ifindex(ifname)
        while True:
            t0 = time.monotonic()
            (link,) = ipr.get_links(index)
            t1 = time.monotonic()
            if t1 - t0 < 0.005:
                return (t0 + t1) / 2, link.get_attr("IFLA_STATS64")["rx_bytes"]


def wire_bps(lab, client: str, server: str, server_ip: str, node: str, ifname: str,
             seconds: float = 3.0, settle_s: float = 1.0) -> float:
    """Rate (bit/s, frames with their Ethernet header, as HTB counts them) at which one
    iperf3 TCP flow ``client`` -> ``server`` arrives on ``ifname`` of ``node``, from the
    interface's rx_bytes counter read ``settle_s`` after the flow starts and again before
    it ends. Kernel counters and timestamps taken next to them: unlike iperf3's own report,
    a descheduled iperf3 process (CI shares its cores) does not move bytes from one interval
    into the next."""
    srv = start_server(lab, server)
    cli = lab.popen(client, ["iperf3", "-c", server_ip, "-t", str(seconds)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(settle_s)  # past slow start (Lab.down() ends both if anything here raises)
    t0, b0 = _rx_bytes_at(lab, node, ifname)
    time.sleep(seconds - settle_s - 0.5)
    t1, b1 = _rx_bytes_at(lab, node, ifname)
    _, err = cli.communicate(timeout=seconds + 30)
    if cli.returncode != 0:
        raise AssertionError(f"iperf3 -c {server_ip}: exit {cli.returncode}: {err!r}")
    try:
        srv.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass  # Lab.down() ends it
    return (b1 - b0) * 8 / (t1 - t0)


def received_bps(result: dict) -> float:
    """Goodput the receiver saw (TCP) in bit/s."""
    return result["end"]["sum_received"]["bits_per_second"]


def torus_direction_payload(src: tuple[int, int], dst: tuple[int, int], x: int, y: int,
                            row_bytes: int, col_bytes: int) -> int:
    """Ring payload (bytes) a 2D-torus all-reduce (traffic_gen/algorithms/torus.py) puts on
    the link direction from grid position ``src`` (row, column) to neighbour ``dst`` on an
    ``x`` x ``y`` torus: the row ring runs to the next column, the column ring to the next
    row; the reverse directions carry only the ACKs of the other one (0)."""
    (ra, rb), (da, db) = src, dst
    if ra == da and db == (rb + 1) % x:
        return row_bytes
    if rb == db and da == (ra + 1) % y:
        return col_bytes
    return 0


def assert_torus_link_bytes(sent: int, payload: int, retrans: int, row_bytes: int,
                            where: object) -> None:
    """A link direction's counted bytes against its ring payload: never less; at most the
    payload plus its retransmissions with headers (66 B per 1448 B segment, 4.6 %), the ACKs
    of the reverse flow (at most 66 B per 2 segments of it, 2.3 % of the ring payload) and
    handshakes: 8 %, plus 3 % of the row payload for pure-ACK directions."""
    assert payload <= sent <= (payload + retrans) * 1.08 + 0.03 * row_bytes, \
        (where, sent, payload)


SO_RCVBUFFORCE = 33  # include/uapi/asm-generic/socket.h (not in Python's socket module)


def _udp(bind: tuple[str, int] | None = None):
    import socket

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if bind:
        # room for the whole stream (root: past net.core.rmem_max), so a reader thread kept
        # off the CPU for a while loses nothing
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 * 2**20)
        s.bind(bind)
    return s


def numbered_udp_stream(lab, src: str, dst: str, dst_ip: str, count: int, gap_s: float,
                        port: int = 5999, wait_s: float = 2.0) -> list[int]:
    """Send ``count`` datagrams numbered 0.. from ``src`` to ``dst_ip`` (``dst``'s address),
    ``gap_s`` apart; return the numbers in the order ``dst`` received them (a reader stops
    ``wait_s`` after the last arrival). One ping first resolves the neighbours."""
    import threading

    lab.run(src, ["ping", "-c", "1", "-W", "3", dst_ip])  # ARP on every hop
    # a socket belongs to the namespace it was made in, whichever thread uses it later
    rx = netns.run_in(lab.node_io(dst).fd, _udp, (dst_ip, port))
    tx = netns.run_in(lab.node_io(src).fd, _udp)
    got: list[int] = []

    def receive() -> None:
        rx.settimeout(wait_s)
        while len(got) < count:
            try:
                got.append(int.from_bytes(rx.recv(64), "big"))
            except TimeoutError:
                return

    reader = threading.Thread(target=receive)
    reader.start()
    try:
        start = time.monotonic()
        for seq in range(count):
            time.sleep(max(0.0, start + seq * gap_s - time.monotonic()))
            tx.sendto(seq.to_bytes(4, "big"), (dst_ip, port))
    finally:
        reader.join()
        rx.close()
        tx.close()
    return got


def overtaken(seqs: list[int]) -> int:
    """Datagrams of a numbered stream that arrived after a higher-numbered one."""
    top, n = -1, 0
    for s in seqs:
        if s < top:
            n += 1
        top = max(top, s)
    return n
