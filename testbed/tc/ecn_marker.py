"""ECN marking at a queue threshold (DCTCP's K) on a kernel without RED or CoDel.

This host kernel has HTB, TBF and the FIFOs but no queueing discipline that marks (no red,
codel, fq_codel, pie: ``zcat /proc/config.gz | grep NET_SCH``), while an ECN experiment needs a
bottleneck that sets CE instead of dropping. The marker is a small eBPF classifier (cls_bpf,
direct action, built in) on the direction's HTB root, run for every packet as it is enqueued
into the bottleneck buffer. It keeps the queue that buffer has: a virtual queue of bytes that
every packet joins and that drains at the direction's rate (the HTB class's rate and ceil),
capped at the buffer's size (a full buffer drops, and a dropped packet does not join the
queue). An ECN-capable packet (ECT(0) or ECT(1), IPv4 or IPv6) that finds that queue longer
than ``K`` bytes after joining it is marked CE, as a DCTCP switch marks on the instantaneous
queue (Alizadeh et al., "Data Center TCP", SIGCOMM 2010, section 3.1: mark when the queue
exceeds K on arrival); not-ECT packets pass unmarked (the buffer drops them when full). This
is HULL's phantom queue with its drain factor at 1 (Alizadeh et al., "Less is More", NSDI
2012, section 4.1): as long as HTB sends at its rate whenever it has a backlog, the virtual
queue is the buffer's byte backlog. Where it differs: HTB's burst lets the real queue drain
up to one burst faster for a moment; GSO packets join as the whole super-packet (all their
segments are marked alike); two CPUs enqueueing at once may each miss the other's bytes
(no lock: a short undercount).

The program is assembled here (no compiler on these machines) and loaded with the ``bpf``
system call; its one map holds, as 64-bit words: the queue in bytes, the last update
(CLOCK_MONOTONIC ns), the drain rate (bytes/s), K (bytes), the cap (bytes), the packets it
marked, and the ECN-capable packets it saw. Needs root (CAP_BPF, CAP_NET_ADMIN).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any

from pyroute2.netlink.rtnl.tcmsg import tcmsg

from models.errors import LabError
from models.shaping import Shaping
from models.units import BufferSize
from testbed.ns.nl import F_CREATE, F_REPLACE, Batch

__all__ = ["EcnMarker", "MarkerState", "filter_message", "program", "MARKER_PRIO", "apply",
           "reshaped", "counts", "close_all", "bytes_of"]

Lab = Any  # testbed.lab.lab.Lab, which calls this module (no import back: no cycle)
RTM_NEWTFILTER, RTM_DELTFILTER = 44, 45
DEFAULT_BUFFER_PACKETS = 1000  # the kernel's default limit when a direction gives none
ETH_HLEN = 14

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)  # asm/unistd.h
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_PROG_LOAD = 0, 1, 2, 5
BPF_MAP_TYPE_ARRAY, BPF_PROG_TYPE_SCHED_CLS = 2, 3
TC_ACT_UNSPEC = -1  # the next filter classifies (HTB's default class: the shaped one)
MARKER_PRIO = 1  # before every other filter on the HTB root
WORDS = ("queue_bytes", "last_ns", "rate_Bps", "k_bytes", "cap_bytes", "marked", "ect_seen",
         "spare")
_VALUE_SIZE = 8 * len(WORDS)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


@dataclass(frozen=True, slots=True)
class MarkerState:
    """One read of a marker's map: its queue (bytes) and counters (packets)."""

    queue_bytes: int
    rate_Bps: int
    k_bytes: int
    cap_bytes: int
    marked: int
    ect_seen: int


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


# opcodes (include/uapi/linux/bpf.h, bpf_common.h)
_ALU64_K = {"add": 0x07, "sub": 0x17, "mul": 0x27, "div": 0x37, "or": 0x47, "and": 0x57,
            "mov": 0xB7}
_ALU64_X = {k: v | 0x08 for k, v in _ALU64_K.items()}
_LDX = {"b": 0x71, "h": 0x69, "w": 0x61, "dw": 0x79}
_STX = {"b": 0x73, "h": 0x6B, "w": 0x63, "dw": 0x7B}
_ST_W = 0x62
_JMP_K = {"ja": 0x05, "jeq": 0x15, "jgt": 0x25, "jle": 0xB5}
_JMP_X = {"jgt": 0x2D, "jle": 0xBD}
_CALL, _EXIT, _ATOMIC_ADD_DW, _LD_IMM64 = 0x85, 0x95, 0xDB, 0x18
_MAP_LOOKUP, _KTIME_NS, _SKB_STORE_BYTES, _L3_CSUM_REPLACE = 1, 5, 9, 10
# struct __sk_buff offsets
_SKB_LEN, _SKB_PROTOCOL, _SKB_DATA, _SKB_DATA_END = 0, 16, 76, 80
_ETH_IP, _ETH_IPV6 = 0x0008, 0xDD86  # ETH_P_IP / ETH_P_IPV6 as the __be16 reads on x86


def program(map_fd: int) -> bytes:
    """The marker's instructions (see the module docstring) for the map ``map_fd``. Pure."""
    code: list[tuple[str, object]] = []  # ("insn", bytes) | ("jump", (opcode, dst, src, imm,
    labels: dict[str, int] = {}          #   label)) | ("label", name)

    def emit(*a: int) -> None:
        code.append(("insn", _insn(*a)))

    def jump(op: int, label: str, dst: int = 0, src: int = 0, imm: int = 0) -> None:
        code.append(("jump", (op, dst, src, imm, label)))

    def label(name: str) -> None:
        code.append(("label", name))

    emit(_ALU64_X["mov"], 6, 1)                          # r6 = skb
    emit(_LDX["w"], 7, 6, _SKB_LEN)                      # r7 = skb->len
    emit(_ST_W, 10, 0, -4, 0)                            # key = 0
    code.append(("insn", _insn(_LD_IMM64, 1, 1, 0, map_fd) + _insn(0)))  # r1 = map
    emit(_ALU64_X["mov"], 2, 10)
    emit(_ALU64_K["add"], 2, 0, 0, -4)                   # r2 = &key
    emit(_CALL, 0, 0, 0, _MAP_LOOKUP)
    jump(_JMP_K["jeq"], "out", 0, 0, 0)                  # no state: pass
    emit(_ALU64_X["mov"], 8, 0)                          # r8 = state
    emit(_CALL, 0, 0, 0, _KTIME_NS)
    emit(_ALU64_X["mov"], 9, 0)                          # r9 = now
    emit(_LDX["dw"], 1, 8, 8)                            # r1 = last
    emit(_STX["dw"], 8, 9, 8)                            # last = now
    emit(_ALU64_X["mov"], 2, 9)
    emit(_ALU64_X["sub"], 2, 1)                          # r2 = dt (ns)
    emit(_LDX["dw"], 3, 8, 0)                            # r3 = queue
    jump(_JMP_K["jgt"], "empty", 2, 0, 1_000_000_000)    # idle a second: drained
    emit(_LDX["dw"], 4, 8, 16)                           # r4 = rate (bytes/s)
    emit(_ALU64_X["mul"], 2, 4)
    emit(_ALU64_K["div"], 2, 0, 0, 1_000_000_000)        # r2 = bytes drained
    jump(_JMP_X["jle"], "empty", 3, 2)
    emit(_ALU64_X["sub"], 3, 2)
    jump(_JMP_K["ja"], "join")
    label("empty")
    emit(_ALU64_K["mov"], 3, 0, 0, 0)
    label("join")
    emit(_ALU64_X["add"], 3, 7)                          # the packet joins
    emit(_LDX["dw"], 4, 8, 32)                           # r4 = cap
    jump(_JMP_X["jle"], "store", 3, 4)
    emit(_ALU64_X["mov"], 3, 4)                          # a full buffer drops: capped
    label("store")
    emit(_STX["dw"], 8, 3, 0)
    emit(_LDX["dw"], 4, 8, 24)                           # r4 = K
    emit(_LDX["w"], 2, 6, _SKB_DATA)
    emit(_LDX["w"], 5, 6, _SKB_DATA_END)
    emit(_ALU64_X["mov"], 1, 2)
    emit(_ALU64_K["add"], 1, 0, 0, 34)                   # Ethernet + IPv4 header
    jump(_JMP_X["jgt"], "out", 1, 5)
    emit(_LDX["w"], 5, 6, _SKB_PROTOCOL)
    jump(_JMP_K["jeq"], "v4", 5, 0, _ETH_IP)
    jump(_JMP_K["jeq"], "v6", 5, 0, _ETH_IPV6)
    jump(_JMP_K["ja"], "out")
    label("v4")
    emit(_LDX["b"], 1, 2, 15)                            # r1 = TOS
    emit(_ALU64_K["and"], 1, 0, 0, 3)
    jump(_JMP_K["jeq"], "out", 1, 0, 0)                  # not-ECT
    jump(_JMP_K["jeq"], "out", 1, 0, 3)                  # CE already
    _count(code, 48)                                     # ect_seen += 1
    jump(_JMP_X["jle"], "out", 3, 4)                     # queue <= K: leave it
    emit(_LDX["h"], 7, 2, 14)                            # r7 = old word (version/IHL, TOS)
    emit(_ALU64_X["mov"], 9, 7)
    emit(_ALU64_K["or"], 9, 0, 0, 0x0300)                # TOS |= CE
    emit(_STX["h"], 10, 9, -8)
    emit(_ALU64_X["mov"], 1, 6)
    emit(_ALU64_K["mov"], 2, 0, 0, 24)                   # the header checksum's offset
    emit(_ALU64_X["mov"], 3, 7)
    emit(_ALU64_X["mov"], 4, 9)
    emit(_ALU64_K["mov"], 5, 0, 0, 2)
    emit(_CALL, 0, 0, 0, _L3_CSUM_REPLACE)
    emit(_ALU64_X["mov"], 1, 6)
    emit(_ALU64_K["mov"], 2, 0, 0, 14)
    emit(_ALU64_X["mov"], 3, 10)
    emit(_ALU64_K["add"], 3, 0, 0, -8)
    emit(_ALU64_K["mov"], 4, 0, 0, 2)
    emit(_ALU64_K["mov"], 5, 0, 0, 0)
    emit(_CALL, 0, 0, 0, _SKB_STORE_BYTES)
    jump(_JMP_K["ja"], "marked")
    label("v6")
    emit(_LDX["b"], 1, 2, 15)                            # traffic class, low nibble << 4
    emit(_ALU64_X["mov"], 5, 1)
    emit(_ALU64_K["and"], 5, 0, 0, 0x30)
    jump(_JMP_K["jeq"], "out", 5, 0, 0)
    jump(_JMP_K["jeq"], "out", 5, 0, 0x30)
    _count(code, 48)
    jump(_JMP_X["jle"], "out", 3, 4)
    emit(_ALU64_K["or"], 1, 0, 0, 0x30)
    emit(_STX["b"], 2, 1, 15)                            # no header checksum in IPv6
    label("marked")
    _count(code, 40)                                     # marked += 1
    label("out")
    emit(_ALU64_K["mov"], 0, 0, 0, TC_ACT_UNSPEC)
    emit(_EXIT)

    pos = 0
    for kind, item in code:
        if kind == "label":
            labels[item] = pos  # type: ignore[index]
        else:
            pos += 2 if kind == "insn" and len(item) == 16 else 1  # type: ignore[arg-type]
    out, pos = [], 0
    for kind, item in code:
        if kind == "label":
            continue
        if kind == "insn":
            out.append(item)
            pos += len(item) // 8  # type: ignore[arg-type]
        else:
            op, dst, src, imm, name = item  # type: ignore[misc]
            out.append(_insn(op, dst, src, labels[name] - pos - 1, imm))
            pos += 1
    return b"".join(out)  # type: ignore[arg-type]


def _count(code: list, off: int) -> None:
    """Append ``state[off] += 1`` (atomic; r0 as the scratch register)."""
    code.append(("insn", _insn(_ALU64_K["mov"], 0, 0, 0, 1)))
    code.append(("insn", _insn(_ATOMIC_ADD_DW, 8, 0, off, 0)))


def _bpf(cmd: int, attr: bytes) -> int:
    if SYS_BPF is None:
        raise OSError(errno.ENOSYS, f"no bpf system call number known for {os.uname().machine}")
    buf = ctypes.create_string_buffer(attr, 144)
    ret = _libc.syscall(SYS_BPF, cmd, buf, 144)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


class EcnMarker:
    """One direction's marker: its map and program (file descriptors of this process),
    attached by :func:`filter_message` to the direction's HTB root. ``rate_bps``: the
    direction's rate; ``k_bytes``: the marking threshold; ``cap_bytes``: the buffer's size.
    Raises LabError naming ``what`` when the kernel refuses the map or the program (with
    the verifier's log)."""

    def __init__(self, rate_bps: int, k_bytes: int, cap_bytes: int, what: str) -> None:
        self.what = what
        try:
            self.map_fd = _bpf(BPF_MAP_CREATE, struct.pack(
                "<7I16s", BPF_MAP_TYPE_ARRAY, 4, _VALUE_SIZE, 1, 0, 0, 0, b"aitb_ecn"))
        except OSError as e:
            raise LabError(f"{what}: the ECN marker's map was refused: {e}") from e
        self.prog_fd = -1
        try:
            self.set(rate_bps, k_bytes, cap_bytes)
            insns = program(self.map_fd)
            insns_buf = ctypes.create_string_buffer(insns, len(insns))
            lic = ctypes.create_string_buffer(b"GPL")
            log = ctypes.create_string_buffer(65536)
            attr = struct.pack("<IIQQIIQII16s", BPF_PROG_TYPE_SCHED_CLS, len(insns) // 8,
                               ctypes.addressof(insns_buf), ctypes.addressof(lic), 1,
                               len(log), ctypes.addressof(log), 0, 0, b"aitb_ecn_mark")
            try:
                self.prog_fd = _bpf(BPF_PROG_LOAD, attr)
            except OSError as e:
                raise LabError(f"{what}: the ECN marker's program was refused: {e}\n"
                               f"{log.value.decode(errors='replace')}") from e
        except BaseException:
            self.close()
            raise

    def _elem(self, cmd: int, value: ctypes.Array) -> None:
        key = ctypes.c_uint32(0)
        _bpf(cmd, struct.pack("<IIQQQ", self.map_fd, 0, ctypes.addressof(key),
                              ctypes.addressof(value), 0))

    def set(self, rate_bps: int, k_bytes: int, cap_bytes: int) -> None:
        """Set the drain rate (bit/s), K and the cap (bytes); the queue and counters stay
        (a live rate change: read, then written back, so a count the program makes in the
        microseconds between is lost)."""
        words = list(self.read_words()) if self.prog_fd >= 0 else [0] * len(WORDS)
        words[2:5] = [rate_bps // 8, k_bytes, cap_bytes]
        value = ctypes.create_string_buffer(struct.pack(f"<{len(WORDS)}Q", *words),
                                            _VALUE_SIZE)
        self._elem(BPF_MAP_UPDATE_ELEM, value)

    def read_words(self) -> tuple[int, ...]:
        """The map's words (:data:`WORDS`)."""
        value = ctypes.create_string_buffer(_VALUE_SIZE)
        self._elem(BPF_MAP_LOOKUP_ELEM, value)
        return struct.unpack(f"<{len(WORDS)}Q", value.raw)

    def read(self) -> MarkerState:
        """The queue and counters now."""
        w = dict(zip(WORDS, self.read_words(), strict=True))
        return MarkerState(w["queue_bytes"], w["rate_Bps"], w["k_bytes"], w["cap_bytes"],
                           w["marked"], w["ect_seen"])

    def close(self) -> None:
        """Close this process's descriptors (an attached filter keeps the program and map)."""
        for fd in (self.prog_fd, self.map_fd):
            if fd >= 0:
                os.close(fd)
        self.prog_fd = self.map_fd = -1


def filter_message(ifindex: int, prog_fd: int) -> tcmsg:
    """The RTM_NEWTFILTER request that attaches ``prog_fd`` to the HTB root ``1:`` of
    ``ifindex`` (direct action, priority :data:`MARKER_PRIO`, every protocol)."""
    msg = tcmsg()
    msg["family"] = socket.AF_UNSPEC
    msg["index"] = ifindex
    msg["parent"] = 0x10000  # 1:
    msg["handle"] = 1
    msg["info"] = (MARKER_PRIO << 16) | socket.htons(0x0003)
    msg["attrs"] = [["TCA_KIND", "bpf"],
                    ["TCA_OPTIONS", {"attrs": [["TCA_BPF_FD", prog_fd],
                                               ["TCA_BPF_NAME", "aitb_ecn_mark"],
                                               ["TCA_BPF_FLAGS", 1]]}]]  # ACT_DIRECT
    return msg


def bytes_of(size: BufferSize | None, mtu: int) -> int:
    """A queue limit in bytes: packets count as full frames (``mtu`` + the Ethernet header),
    None as the kernel's default of 1000 packets. Pure."""
    if size is None:
        return DEFAULT_BUFFER_PACKETS * (mtu + ETH_HLEN)
    if size.size_bytes is not None:
        return size.size_bytes
    return int(size.packets or 0) * (mtu + ETH_HLEN)


def _marked_directions(lab: Lab) -> list[tuple[Any, str, Shaping]]:
    return [(lk, d, getattr(lk, d)) for lk in lab.plan.links for d in ("a_to_b", "b_to_a")
            if getattr(lk, d).ecn_threshold is not None]


def _attach(lab: Lab, link: Any, direction: str, shaping: Shaping) -> None:
    """Create or update the marker of ``direction`` of ``link`` and (re)attach its filter to
    the direction's HTB root (create or replace: a rebuilt root lost it)."""
    key = (link.name, direction)
    rate = int(shaping.rate_bps or 0)
    k = bytes_of(shaping.ecn_threshold, link.mtu)
    cap = bytes_of(shaping.buffer, link.mtu)
    what = f"link {link.name} {direction}"
    marker = lab.ecn_markers.get(key)
    if marker is None:
        marker = lab.ecn_markers[key] = EcnMarker(rate, k, cap, what)
    else:
        marker.set(rate, k, cap)
    recipe = lab.layout.recipes[key]
    index = lab.layout.node(recipe.tx_node).ifindex(recipe.tx_dev)
    batch = Batch(lab.node_io(recipe.tx_node).sock, f"node {recipe.tx_node}")
    batch.add(filter_message(index, marker.prog_fd), RTM_NEWTFILTER, F_CREATE | F_REPLACE,
              f"{what}: ECN marker (bpf filter on {recipe.tx_dev}'s HTB root)")
    batch.commit()


def apply(lab: Lab) -> None:
    """A marker on every direction of the lab's plan with an ``ecn_threshold`` (after its tc
    objects exist). Sets ``lab.ecn_markers``: (link, direction) -> :class:`EcnMarker`.
    Raises LabError naming the direction."""
    for link, direction, shaping in _marked_directions(lab):
        _attach(lab, link, direction, shaping)


def reshaped(lab: Lab, link: Any, direction: str, shaping: Shaping) -> None:
    """After a live shaping change of ``direction`` of ``link``: its marker follows the new
    rate, K and buffer (the queue and counters carry on), is attached anew where the root
    was rebuilt, and is detached where the new shaping has no ``ecn_threshold`` (its
    counters are kept for :func:`counts`)."""
    key = (link.name, direction)
    if shaping.ecn_threshold is not None:
        _attach(lab, link, direction, shaping)
        return
    if key not in lab.ecn_markers:
        return
    recipe = lab.layout.recipes[key]
    msg = filter_message(lab.layout.node(recipe.tx_node).ifindex(recipe.tx_dev), -1)
    msg["attrs"] = [["TCA_KIND", "bpf"]]
    batch = Batch(lab.node_io(recipe.tx_node).sock, f"node {recipe.tx_node}")
    batch.add(msg, RTM_DELTFILTER, 0, f"link {link.name} {direction}: remove the ECN marker")
    batch.commit(tolerate=frozenset({2, 22}))  # gone with a rebuilt root (ENOENT, EINVAL)


def counts(lab: Lab) -> dict[str, dict[str, int]]:
    """``"<link>/<direction>"`` -> ``{"marked", "ect_seen", "queue_bytes", "k_bytes"}`` of
    every marker the lab has made (packets; GSO packets count once)."""
    out = {}
    for (link, direction), marker in lab.ecn_markers.items():
        st = marker.read()
        out[f"{link}/{direction}"] = {"marked": st.marked, "ect_seen": st.ect_seen,
                                      "queue_bytes": st.queue_bytes, "k_bytes": st.k_bytes}
    return out


def close_all(lab: Lab) -> None:
    """Close the markers' descriptors (the namespaces' deletion removes the filters)."""
    for marker in lab.ecn_markers.values():
        marker.close()
    lab.ecn_markers.clear()
