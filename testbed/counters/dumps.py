"""Netlink dump requests and answers of the counter readers (testbed.counters.readers for
qdiscs, links and TCP dumps; testbed.counters.tcpdiag for exact sock_diag requests): encoded
and split by pyroute2 message classes (:mod:`testbed.counters.msgs`)."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE
from pyroute2.netlink.diag import SOCK_DIAG_BY_FAMILY, SS_ALL

from models.errors import LabError
from testbed.counters.msgs import SOCKID_FIELDS, RowMarshal, inet_diag_req

__all__ = ["TCP_STATES", "GONE", "request", "diag_request", "answers", "dump"]

INET_DIAG_INFO = 2  # include/uapi/linux/inet_diag.h; extension bit 1 << (2 - 1)
# tcp_states.h order; listening, time-wait and request sockets carry no TCP_INFO
TCP_STATES = ("unknown", "established", "syn_sent", "syn_recv", "fin_wait1", "fin_wait2",
              "time_wait", "close", "close_wait", "last_ack", "listen", "closing")
_DIAG_STATES = SS_ALL & ~sum(1 << TCP_STATES.index(s)
                             for s in ("unknown", "listen", "time_wait", "syn_recv"))
GONE = (errno.ENOENT, errno.ESTALE)  # exact sock_diag request: no such socket (any more)


def request(msg: Any, msg_type: int, seq: int = 1,
            flags: int = NLM_F_REQUEST | NLM_F_DUMP) -> bytes:
    """``msg`` (a pyroute2 message with its fields set) encoded as a request of ``msg_type``
    with sequence number ``seq``; a dump unless ``flags`` say otherwise."""
    msg["header"]["type"] = msg_type
    msg["header"]["flags"] = flags
    msg["header"]["sequence_number"] = seq
    msg.encode()
    return bytes(msg.data)


def diag_request(family: int = socket.AF_INET, sockid: tuple[Any, ...] | None = None,
                 seq: int = 1) -> bytes:
    """A sock_diag request for TCP sockets of ``family`` with TCP_INFO: a dump of all
    sockets with TCP_INFO, or (``sockid``: DiagMsg's ``"sockid"``) the one socket."""
    msg = inet_diag_req()
    msg["sdiag_family"] = family
    msg["sdiag_protocol"] = socket.IPPROTO_TCP
    msg["idiag_states"] = _DIAG_STATES
    msg["idiag_ext"] = 1 << (INET_DIAG_INFO - 1)
    if sockid is None:
        return request(msg, SOCK_DIAG_BY_FAMILY)
    for name, value in zip(SOCKID_FIELDS, sockid, strict=True):
        msg[name] = value
    return request(msg, SOCK_DIAG_BY_FAMILY, seq, NLM_F_REQUEST)


def answers(sock: socket.socket, marshal: RowMarshal) -> Any:
    """Receive from ``sock`` until NLMSG_DONE, filling ``marshal.rows``; yields the other
    answers (NLMSG_ERROR, as pyroute2 ``nlmsgerr`` with ``["header"]["error"]`` set)."""
    while True:
        for msg in marshal.parse(sock.recv(1 << 20)):
            if msg["header"]["type"] == NLMSG_DONE:
                return
            yield msg


def dump(sock: socket.socket, req: bytes, marshal: RowMarshal, where: str) -> list[Any]:
    """Send the dump request ``req`` and return the rows (``marshal.row_of`` of each answer
    of its type). Raises LabError naming ``where`` if the kernel refuses."""
    sock.send(req)
    for msg in answers(sock, marshal):
        err = msg["header"].get("error")
        if err is not None:
            raise LabError(f"{where}: netlink dump failed: {os.strerror(err.code)}")
    return [row for _, row in marshal.turn()]
