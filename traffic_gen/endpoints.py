"""An agent's data endpoints: the listening socket, persistent connections and their workers.

Connections are opened once per run (like NCCL's and Gloo's persistent peer connections):
``conns_per_peer`` TCP connections per ordered rank pair that exchanges data (the sender
connects; a 12-byte header names src rank, dst rank and connection index), one UDP socket pair
per ordered rank pair with UDP flows. Every socket is bound to the host's lab address, and the
agent refuses to connect to an address the controller did not list as a lab address. With
``options["tls"]`` (certificate and key files) every TCP connection runs TLS 1.3 after its
header (traffic_gen/tls.py), the persistent ones and the gathers' per-round ones alike; with
``options["tls"]["pairs"]`` (a list of address pairs, unordered) only the connections between
the two addresses of a listed pair do (both ends decide alike, from their own address and the
peer's). UDP is never encrypted here (DTLS is not in Python's ssl; the run refuses it).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

from traffic_gen.gather import GATHER_CONN, GatherInbox
from traffic_gen.tcpinfo import TcpKnobs, apply_knobs
from traffic_gen.tls import client_context, server_context, wrap_client, wrap_server
from traffic_gen.transfers import Shared, TcpReceiver, TcpSender
from traffic_gen.udp import UdpReceiver, UdpSender
from traffic_gen.wire import recv_exact

__all__ = ["Endpoints"]

_HEADER = struct.Struct("!III")
_ACCEPT_WAIT_S = 30.0


class Endpoints:
    """Sockets and workers of one agent on node ``node`` with lab address ``ip``, listening on
    ``ips`` (default: ``ip`` alone; a multi-NIC host: each NIC its peers connect to);
    ``bind``: rank -> the address that rank's connections leave from (a rank bound to a NIC,
    ``ranks_per_host``), over any other source address."""

    def __init__(self, node: str, ip: str, allowed: set[str], shared: Shared,
                 options: dict[str, Any], ips: list[str] | None = None,
                 bind: dict[str, str] | None = None) -> None:
        self.node, self.ip, self.allowed, self.shared = node, ip, allowed, shared
        self.ips = list(ips or [ip])
        self.bind = dict(bind or {})
        self.knobs = TcpKnobs(**options.get("knobs", {}))
        self.udp_payload_bytes = options.get("udp_payload_bytes", 1400)
        self.out: dict[tuple[int, int, str], dict[int, Any]] = {}
        self.inn: dict[tuple[int, int, str], dict[int, Any]] = {}
        self.udp_socks: dict[tuple[int, int], socket.socket] = {}
        self.accepted = 0
        self.cv = threading.Condition()
        self.listeners: list[socket.socket] = []
        self.inbox = GatherInbox()  # per-round connections of deadline-bounded gathers
        self.rank_ep: dict[str, list[Any]] = {}
        tls = options.get("tls")
        self.tls_server = server_context(tls["cert"], tls["key"]) if tls else None
        self.tls_client = client_context(tls["cert"]) if tls else None
        pairs = tls.get("pairs") if tls else None
        self.tls_pairs = None if pairs is None else {frozenset(p) for p in pairs}

    def tls_with(self, peer_ip: str) -> bool:
        """Whether a connection between this host and ``peer_ip`` runs TLS (module
        docstring)."""
        # pairs hold every address of both hosts (orchestration/privacy/tls_pairs.py): a pair
        # with any of this host's NICs is the pair of hosts
        return self.tls_server is not None and (
            self.tls_pairs is None or any(frozenset((mine, peer_ip)) in self.tls_pairs
                                          for mine in self.ips))

    def listen(self, udp_in: list[list[Any]]) -> dict[str, Any]:
        """Open a TCP listener per address of :attr:`ips` and the UDP receive sockets
        (``[src rank, dst rank, address]``, the address ``ip`` when absent); return their
        ports: ``tcp_ports`` address -> port, ``udp_ports`` "src,dst" -> port."""
        tcp_ports = {}
        for ip in self.ips:
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            apply_knobs(ls, self.knobs)
            ls.bind((ip, 0))
            ls.listen(1024)
            self.listeners.append(ls)
            tcp_ports[ip] = ls.getsockname()[1]
            threading.Thread(target=self._accept_loop, args=(ls,), daemon=True).start()
        udp_ports = {}
        for src, dst, *at in udp_in:
            ip = at[0] if at else self.ip
            us = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            us.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            us.bind((ip, 0))
            self.udp_socks[(src, dst)] = us
            info = {"dst_node": self.node, "dst_ip": ip, "dport": us.getsockname()[1]}
            self._add(self.inn, (src, dst, "udp"), 0,
                      UdpReceiver(us, self.shared, info, self.udp_payload_bytes))
            udp_ports[f"{src},{dst}"] = us.getsockname()[1]
        return {"tcp_ports": tcp_ports, "udp_ports": udp_ports}

    def _add(self, table: dict, key: tuple, idx: int, worker: Any) -> None:
        worker.start()
        with self.cv:
            table.setdefault(key, {})[idx] = worker

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                s, _ = listener.accept()
                src, dst, c = _HEADER.unpack(recv_exact(s, _HEADER.size, "the header"))
                if c == GATHER_CONN:
                    self.inbox.put(s, src, self.tls_server if self.tls_with(
                        s.getpeername()[0]) else None)
                    continue
                tls: dict[str, Any] = {}
                if self.tls_with(s.getpeername()[0]):
                    assert self.tls_server is not None
                    s.settimeout(_ACCEPT_WAIT_S)
                    s, tls = wrap_server(s, self.tls_server)
            except OSError:  # ssl.SSLError is one
                return
            peer, here = s.getpeername(), s.getsockname()
            info = {"dst_node": self.node, "dst_ip": here[0], "dport": here[1],
                    "src_ip": peer[0], "sport": peer[1], **tls}
            self._add(self.inn, (src, dst, "tcp"), c, TcpReceiver(s, self.shared, info))
            with self.cv:
                self.accepted += 1
                self.cv.notify_all()

    def _check(self, ip: str) -> None:
        if ip not in self.allowed:
            raise ValueError(f"node {self.node}: refusing to connect to {ip}: not a lab address")

    def connect(self, out: list[list[Any]], rank_ep: dict[str, list[Any]],
                udp_ep: dict[str, list[Any]], in_tcp: int) -> list[dict[str, Any]]:
        """Open the outgoing connections, wait for the ``in_tcp`` incoming ones; return the
        TCP settings the kernel reports for each outgoing connection."""
        knobs = []
        self.rank_ep = dict(rank_ep)
        for src, dst, c, proto in out:
            if proto == "udp":
                ip, port, dst_node, *given = udp_ep[f"{src},{dst}"]
                self._connect_udp(src, dst, ip, port, dst_node, self.source(src, given))
                continue
            ip, port, dst_node, *src_ip = rank_ep[str(dst)]
            knobs.append({"src_rank": src, "dst_rank": dst, "conn": c,
                          **self._connect_tcp(src, dst, c, ip, port, dst_node,
                                              self.source(src, src_ip))})
        with self.cv:
            if not self.cv.wait_for(lambda: self.accepted >= in_tcp, _ACCEPT_WAIT_S):
                raise OSError(f"node {self.node}: only {self.accepted} of {in_tcp} incoming "
                              f"connections arrived within {_ACCEPT_WAIT_S} s")
        return knobs

    def source(self, rank: int, given: list[str]) -> str:
        """The source address of ``rank``'s connections: its bound NIC, else ``given[0]``
        (the controller's choice for the pair), else the host's address."""
        return self.bind.get(str(rank)) or (given[0] if given else self.ip)

    def _connect_tcp(self, src: int, dst: int, c: int, ip: str, port: int,
                     dst_node: str, src_ip: str) -> dict[str, Any]:
        self._check(ip)
        self._check(src_ip)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((src_ip, 0))
        readback = apply_knobs(s, self.knobs)
        s.settimeout(_ACCEPT_WAIT_S)
        s.connect((ip, port))
        s.sendall(_HEADER.pack(src, dst, c))
        tls: dict[str, Any] = {}
        if self.tls_with(ip):
            assert self.tls_client is not None
            s, tls = wrap_client(s, self.tls_client)
        info = {"src_node": self.node, "dst_node": dst_node, "src_ip": src_ip,
                "sport": s.getsockname()[1], "dst_ip": ip, "dport": port, **tls}
        self._add(self.out, (src, dst, "tcp"), c,
                  TcpSender(s, self.shared, info, str(readback["congestion_control"]),
                            conn_id=f"{src}/{dst}/{c}"))
        return readback

    def _connect_udp(self, src: int, dst: int, ip: str, port: int, dst_node: str,
                     src_ip: str | None = None) -> None:
        src_ip = src_ip or self.ip
        self._check(ip)
        self._check(src_ip)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((src_ip, 0))
        s.connect((ip, port))
        info = {"src_node": self.node, "dst_node": dst_node, "src_ip": src_ip,
                "sport": s.getsockname()[1], "dst_ip": ip, "dport": port}
        self._add(self.out, (src, dst, "udp"), 0,
                  UdpSender(s, self.shared, info, self.udp_payload_bytes))

    def workers(self, kind: str, src: int, dst: int, proto: str) -> list[Any]:
        """The workers of the (src, dst, proto) channel in connection order."""
        table = self.out if kind == "send" else self.inn
        with self.cv:
            got = table.get((src, dst, proto))
            if not got:
                raise OSError(f"node {self.node}: no {proto} connection for rank {src} -> "
                              f"rank {dst}")
            return [got[c] for c in sorted(got)]

    def tcp_senders(self) -> dict[str, socket.socket]:
        """Every outgoing TCP connection by its starter id ``src/dst/conn`` (kick.py)."""
        with self.cv:
            return {w.conn_id: w.sock for conns in self.out.values() for w in conns.values()
                    if isinstance(w, TcpSender)}

    def flush(self) -> None:
        """End of phase: every sender closes its last record (after acknowledgement)."""
        evs = []
        for conns in list(self.out.values()):
            for w in conns.values():
                ev = threading.Event()
                w.submit(ev)
                evs.append(ev)
        for ev in evs:
            self.shared.wait(ev)

    def close(self) -> None:
        """Stop the workers and close every socket."""
        for ls in self.listeners:
            ls.close()
        for table in (self.out, self.inn):
            for conns in table.values():
                for w in conns.values():
                    w.submit(None)
                    w.sock.close()
        time.sleep(0)

