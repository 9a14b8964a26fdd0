"""TCP and UDP flow analysis of a capture file: :func:`analyse_capture`.

Where the capture point is matters. Every time here is when the packet passed the capture
point, not when it left the sender or reached the receiver: a capture at the sender sees
data early and ACKs late (RTT samples are the full network RTT, FCT starts at the real SYN);
a capture at the receiver sees data after the path delay (FCT lacks the first half-RTT of the
SYN and the last ACK's trip back), and segments dropped before the capture point are never
seen, so their retransmissions look like first transmissions and are not counted. A capture
in the middle (a bottleneck link) splits the RTT into the two halves it can see. Losses
after the capture point show up as retransmissions of segments seen once before. On a capture
taken on a sending host with GSO/TSO, a "segment" may be a 64 KiB super-segment: payload
bytes stay exact (from the IP length), packet counts are the stack's, not the wire's.
"""

from analysis.tcpflows.analyse import CaptureAnalysis, analyse_capture

__all__ = ["CaptureAnalysis", "analyse_capture"]
