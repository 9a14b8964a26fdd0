"""A paced UDP GSO source and a UDP GRO sink, to load a delay line with GSO traffic whose ends
cost little CPU (used by bench/delayline_accuracy.py, mode udpgso10g).

One TCP flow at 10 Gbit/s needs more than the one CPU a dedicated line leaves on a 2-core
machine for both of its ends (sender copy, receiver copy, ACK processing). A UDP socket with
UDP_SEGMENT (Linux 4.18, udp(7)) hands the kernel one 64 KB send that travels as ONE GSO
packet through a veth (``tx-udp-segmentation: on``) and an NFQUEUE with NFQA_CFG_F_GSO, and a
receiving socket with UDP_GRO (Linux 5.0) takes it whole: about 19 300 packets a second carry
10 Gbit/s, so the delay line, not the ends, is what the row measures.

  tx RATE_BPS SECONDS DST_IP PORT  send RATE_BPS of payload for SECONDS (paced every 0.2 ms);
                                   prints one JSON object {sent_bytes, sends, seconds}
  rx PORT IDLE_S                   receive until IDLE_S without a datagram (after the first);
                                   prints {received_bytes, recvs, seconds, bits_per_second}

Run inside lab namespaces only (``ip netns exec NS python3 bench/udp_gso_load.py ...``).
"""

from __future__ import annotations

import json
import socket
import sys
import time

UDP_SEGMENT = 103  # linux/udp.h
UDP_GRO = 104  # linux/udp.h
SO_RCVBUFFORCE = 33  # asm-generic/socket.h (not in Python 3.11's socket module)
SEGMENT_BYTES = 1472  # payload of one 1500-byte IPv4 datagram (1500 - 20 - 8)
SEGMENTS_PER_SEND = 44  # 44 x 1472 = 64 768 B: the most under the 65 507-byte UDP limit
PACE_S = 0.0002
RCVBUF_BYTES = 64 << 20  # 50 ms of 10 Gbit/s: a receiver descheduled that long loses nothing


def send(rate_bps: float, seconds: float, dst: str, port: int) -> dict:
    """Send ``rate_bps`` of UDP payload to ``dst``:``port`` for ``seconds`` in GSO sends."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, SEGMENT_BYTES)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 << 20)
    s.connect((dst, port))
    msg = bytes(SEGMENT_BYTES * SEGMENTS_PER_SEND)
    sent = sends = 0
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < seconds:
        while sent < rate_bps / 8 * elapsed:  # the bytes due by now
            s.send(msg)
            sent += len(msg)
            sends += 1
        time.sleep(PACE_S)
    return {"sent_bytes": sent, "sends": sends, "seconds": time.monotonic() - t0}


def receive(port: int, idle_s: float) -> dict:
    """Receive on ``port`` (UDP_GRO on) until ``idle_s`` pass without a datagram after the
    first; the rate is bytes over first-to-last arrival."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # SO_RCVBUFFORCE (root) passes net.core.rmem_max (208 KB by default: 0.17 ms at 10 Gbit/s)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
    s.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    s.bind(("0.0.0.0", port))
    s.settimeout(30.0)  # the first datagram
    buf = bytearray(1 << 17)
    got = recvs = 0
    first = last = 0.0
    try:
        while True:
            got += s.recv_into(buf)
            last = time.monotonic()
            if not recvs:
                first = last
                s.settimeout(idle_s)
            recvs += 1
    except TimeoutError:
        pass
    span = last - first
    return {"received_bytes": got, "recvs": recvs, "seconds": span,
            "bits_per_second": got * 8 / span if span > 0 else 0.0}


def main(argv: list[str]) -> int:
    if argv[:1] == ["tx"] and len(argv) == 5:
        print(json.dumps(send(float(argv[1]), float(argv[2]), argv[3], int(argv[4]))))
    elif argv[:1] == ["rx"] and len(argv) == 3:
        print(json.dumps(receive(int(argv[1]), float(argv[2]))))
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
