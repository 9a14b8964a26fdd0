"""Deadline-bounded gathers (federated-learning rounds): connections, cut-off, the source role.

A :class:`~models.schedule.Gather` does not use the run's persistent connections: every
source opens one fresh TCP connection to the root per round (header ``src, root,``
:data:`GATHER_CONN` then ``iteration, op_index``), receives the model on it, trains, and
uploads its update on it. The root (gather_root.py) cuts a late source off by closing that
connection with a reset (SO_LINGER 0, socket(7)): the kernel discards whatever was queued,
the source's next send or receive fails, and the source closes its end the same way, so a
dropped transfer cannot run on into the next round. Only an upload the root received in full
is answered with one acceptance byte.

With TLS (endpoints.py: the run's ``encryption: tls``, for this pair of hosts) the source runs
the TLS 1.3 handshake as the client right after the plain header and gather key, and the
root as the server when it takes the connection for its round (traffic_gen/tls.py): model
and update then move encrypted, and their flow records carry the cipher and handshake time;
a record's ``tcp.bytes_sent`` counts the TLS records' overhead (traffic_gen/tls.py
wire_bytes), as the persistent connections' do.
A handshake that meets the other end's reset (a round already cut off) is a cut, like a
transfer that does; any other TLS failure is an error of the run.
"""

from __future__ import annotations

import errno
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from traffic_gen.tcpinfo import apply_knobs, read_tcp_info, tcp_info_delta
from traffic_gen.tls import wire_bytes, wrap_client, wrap_server
from traffic_gen.transfers import Abort, Shared, sleep_until
from traffic_gen.wire import recv_exact

__all__ = ["GATHER_CONN", "GATHER_KEY", "GatherInbox", "Cut", "move", "reset", "run_src",
           "flow_half"]

GATHER_CONN = 0xFFFFFFFF  # the connection-index field of a gather connection's header
GATHER_KEY = struct.Struct("!II")  # iteration, op index
ACCEPTED = b"\x01"
TICK_S = 0.02  # how often a blocked transfer checks for a cut-off or an aborted run
HANDSHAKE_TIMEOUT_S = 30.0  # as endpoints.py's accept wait


class Cut(Exception):
    """The transfer was cut off (deadline or quorum); ``moved`` bytes had moved."""

    def __init__(self, moved: int) -> None:
        super().__init__(f"cut off after {moved} bytes")
        self.moved = moved


def handshake(sock: socket.socket, ctx: ssl.SSLContext, server: bool
              ) -> tuple[socket.socket, dict[str, Any]]:
    """TLS 1.3 handshake on a gather connection (module docstring): the TLS socket and its
    record fields. Raises ConnectionError when the peer reset or closed it meanwhile (a cut),
    ssl.SSLError or OSError for another failure."""
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        return (wrap_server if server else wrap_client)(sock, ctx)
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
        raise ConnectionError(f"gather connection closed during the TLS handshake: {exc}") \
            from None


def reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (SO_LINGER on, 0 s: socket(7)); queued data is
    discarded. A socket the peer already reset may refuse the option: it is closed anyway."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass  # already reset by the peer: nothing queued is left to discard
    sock.close()


def move(sock: socket.socket, n: int, send: bool, buf: memoryview,
         stop: Callable[[], bool]) -> int:
    """Send (``send``) or receive ``n`` bytes in ``TICK_S`` slices, checking ``stop`` between
    slices. Returns ``n``. Raises :class:`Cut` (with the bytes moved) once ``stop()`` is
    true, ConnectionError if the peer closed or reset the connection, OSError otherwise."""
    sock.settimeout(TICK_S)
    moved = 0
    while moved < n:
        if stop():
            raise Cut(moved)
        try:
            k = (sock.send(buf[:min(n - moved, len(buf))]) if send
                 else sock.recv_into(buf, min(n - moved, len(buf))))
        except TimeoutError:
            continue
        if k == 0:
            raise ConnectionError("peer closed the connection")
        moved += k
    return moved


class GatherInbox:
    """Gather connections accepted by the endpoint's listener, until their root takes them.
    A key is (iteration, op index, source rank); a gather the root has closed resets any
    connection still arriving for it."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.socks: dict[tuple[int, int, int], tuple[socket.socket, ssl.SSLContext | None]] = {}
        self.closed: set[tuple[int, int]] = set()

    def put(self, sock: socket.socket, src: int, tls: ssl.SSLContext | None = None) -> None:
        """Read the gather key from ``sock`` (already past the common header) and keep it;
        ``tls``: the server context its handshake will use when taken (None: plain)."""
        it, op = GATHER_KEY.unpack(recv_exact(sock, GATHER_KEY.size, "the gather header"))
        with self.cv:
            if (it, op) in self.closed:
                reset(sock)
                return
            self.socks[(it, op, src)] = (sock, tls)
            self.cv.notify_all()

    def take(self, key: tuple[int, int, int], stop: Callable[[], bool]
             ) -> tuple[socket.socket, dict[str, Any]]:
        """The connection of ``key``, after its TLS handshake if it has one, and its TLS
        record fields ({} when plain); raises :class:`Cut` once ``stop()`` is true first,
        and as :func:`handshake` does."""
        with self.cv:
            while key not in self.socks:
                if stop():
                    raise Cut(0)
                self.cv.wait(TICK_S)
            sock, tls = self.socks.pop(key)
        if tls is None:
            return sock, {}
        try:
            return handshake(sock, tls, server=True)
        except BaseException:
            reset(sock)
            raise

    def close(self, it: int, op: int) -> None:
        """The root of gather (it, op) stopped waiting: reset what arrived and never taken."""
        with self.cv:
            self.closed.add((it, op))
            for key in [k for k in self.socks if k[:2] == (it, op)]:
                reset(self.socks.pop(key)[0])



def flow_half(half: str, op: dict[str, Any], sock: socket.socket, src: int, dst: int,
              step: str, size: int, nodes: tuple[str, str], **kw: Any) -> dict[str, Any]:
    """A half flow record (merge.py) of one gather transfer: ``nodes`` = (src, dst) host."""
    (lip, lport), (rip, rport) = sock.getsockname(), sock.getpeername()
    ends = ((lip, lport), (rip, rport)) if half == "send" else ((rip, rport), (lip, lport))
    return {"half": half, "key": f"{op['it']}/{op['op']}/{src}/{dst}/gather/{step}",
            "iteration": op["it"], "op_index": op["op"], "id": op["id"], "op_kind": "gather",
            "step": step, "src_rank": src, "dst_rank": dst, "size_bytes": size, "conn": 0,
            "proto": "tcp", "rate_bps": None, "src_node": nodes[0], "dst_node": nodes[1],
            "src_ip": ends[0][0], "sport": ends[0][1], "dst_ip": ends[1][0],
            "dport": ends[1][1], **kw}


def run_src(rank: int, node: str, op: dict[str, Any], eps: Any, shared: Shared,
            emit: Callable[[dict[str, Any]], None]) -> None:
    """Source role of a gather (wire form: program.py): connect to the root, receive the
    model, train (``compute_s``), upload, wait for acceptance. Being cut off is an outcome,
    not a failure: the connection is reset and the rank moves on. Raises Abort if the run
    is aborted, OSError for a connection that cannot be opened."""
    ip, port, root_node, *src_ip = eps.rank_ep[str(op["root"])]
    eps._check(ip)  # agents connect only to lab addresses
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((eps.source(rank, src_ip), 0))
    apply_knobs(s, eps.knobs)
    s.settimeout(shared.transfer_timeout_s)
    if not _connect(s, (ip, port), op, shared):
        reset(s)  # no route until the round's deadline: the root counts it dropped
        return
    s.sendall(struct.pack("!III", rank, op["root"], GATHER_CONN)
              + GATHER_KEY.pack(op["it"], op["op"]))
    nodes = (root_node, node)
    stop = shared.aborted.is_set
    try:
        tls: dict[str, Any] = {}
        if eps.tls_with(ip):
            s, tls = handshake(s, eps.tls_client, server=False)
        t0 = time.time()
        move(s, op["down_bytes"], False, shared.recv_buf, stop)
        emit(flow_half("recv", op, s, op["root"], rank, "down", op["down_bytes"], nodes,
                       t_first_byte=t0, t_end=time.time()))
        live = shared.live_factor(rank)  # an events: straggler, from this round on
        op["live_slowdown"] = live  # the rank_op record's slowdown (gather_root.py)
        _train(s, op["compute_s"] * live, shared)
        _upload(rank, op, s, shared, emit, (node, root_node), tls)
    except (ConnectionError, Cut):
        pass  # dropped by the root: recorded there
    finally:
        reset(s)
    if shared.aborted.is_set():
        raise Abort


_NO_ROUTE = (errno.ENETUNREACH, errno.EHOSTUNREACH)
_RETRY_S = 0.01


def _connect(s: socket.socket, addr: tuple[str, int], op: dict[str, Any],
             shared: Shared) -> bool:
    """Connect ``s`` to the root; while the source has no route to it (its link is down: an
    events: link_down, flap or partition, whose kernel deletes the route with the link) try
    again every 10 ms until the round's deadline (False: given up, the root drops the source
    at the deadline) or, for a round without one, the transfer timeout (then OSError naming
    the root's address). Raises Abort if the run is aborted meanwhile."""
    t0 = shared.phase_t0.get(op["start_phase"], time.time())
    give_up = t0 + (op["deadline_s"] if op["deadline_s"] is not None
                    else shared.transfer_timeout_s)
    while True:
        try:
            s.connect(addr)
            return True
        except OSError as exc:
            if exc.errno not in _NO_ROUTE:
                raise
            if time.time() + _RETRY_S > give_up:
                if op["deadline_s"] is not None:
                    return False
                raise OSError(exc.errno, f"no route to the root at {addr[0]} for "
                              f"{shared.transfer_timeout_s:g} s: {exc.strerror}") from None
        if shared.aborted.is_set():
            raise Abort
        time.sleep(_RETRY_S)


def _train(s: socket.socket, seconds: float, shared: Shared) -> None:
    """Local training: sleep ``seconds``, but stop at once if the root cuts the connection
    off meanwhile (ConnectionError) or the run is aborted (Abort)."""
    end = time.time() + seconds
    while (left := end - time.time()) > 0:
        if select.select([s], [], [], min(left, 0.1))[0]:
            raise ConnectionError("cut off while training")
        if shared.aborted.is_set():
            raise Abort


def _upload(rank: int, op: dict[str, Any], s: socket.socket, shared: Shared,
            emit: Callable[[dict[str, Any]], None], nodes: tuple[str, str],
            tls: dict[str, Any]) -> None:
    base, t0 = read_tcp_info(s), time.time()
    half = flow_half("send", op, s, rank, op["root"], "up", op["up_bytes"], nodes, t_start=t0,
                     **tls)
    try:
        move(s, op["up_bytes"], True, shared.send_buf, shared.aborted.is_set)
        s.settimeout(None)
        while not select.select([s], [], [], TICK_S)[0]:  # the root's verdict
            if shared.aborted.is_set():
                raise Abort
        accepted = s.recv(1) == ACCEPTED
    finally:
        info = read_tcp_info(s)
        acked = info["bytes_acked"] - base["bytes_acked"]
        wire = wire_bytes(op["up_bytes"]) if tls else op["up_bytes"]  # TLS records' overhead
        emit({**half, "t_sent": time.time(), "tcp": tcp_info_delta(
            base, info, size_bytes=min(acked, wire)).to_dict()})
    if not accepted:
        raise ConnectionError("upload not accepted")


def wait_phase(t0: float, shared: Shared) -> None:
    """Sleep until the phase's absolute start ``t0`` (s)."""
    sleep_until(t0, shared.spin_s)
