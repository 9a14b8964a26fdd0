"""aitb's own pcap reader: classic pcap and pcapng, decoded to the IP/TCP/UDP fields analysis needs.

Entry points: :func:`open_capture` (frames of a file, streaming) and :func:`decode_frame`
(one frame to a :data:`Decoded` tuple). Nothing here needs root; memory is bounded by a read
chunk, never by the number of packets.
"""

from analysis.pcap.decode import PROTO_TCP, PROTO_UDP, DecodeStats, decode_frame
from analysis.pcap.detect import open_capture
from analysis.pcap.files import Capture, PcapWarning

__all__ = ["Capture", "DecodeStats", "PcapWarning", "PROTO_TCP", "PROTO_UDP", "decode_frame",
           "open_capture"]
