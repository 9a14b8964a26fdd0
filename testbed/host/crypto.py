"""Which in-kernel encryption this host offers (``aitb doctor``): WireGuard links, IPsec ESP
(the XFRM transforms) and kTLS. aitb's own encryption (``transport: {encryption: tls}``,
traffic_gen/tls.py) is user-space TLS and needs none of them; these say what a faster or
lower-layer variant could use here.

How each is seen, without sending anything:
- ``ktls``: ``setsockopt(TCP_ULP, "tls")`` on an unconnected TCP socket: the kernel answers
  ENOTCONN when the tls upper-layer protocol exists (it refuses an unconnected socket) and
  ENOENT when it does not (net/ipv4/tcp_ulp.c);
- ``wireguard`` and ``esp``: the kernel's build configuration (``/proc/config.gz``:
  CONFIG_WIREGUARD, CONFIG_INET_ESP); without that file they are reported as not known.
"""

from __future__ import annotations

import errno
import gzip
import socket
from pathlib import Path

from testbed.host.probe_result import Capability

__all__ = ["probe_crypto", "TCP_ULP"]

TCP_ULP = 31  # include/uapi/linux/tcp.h
CONFIG = Path("/proc/config.gz")
_REMEDY = ("a kernel built with {opt} (a stock distribution kernel has it as a module: the "
           "stock-kernel VM, aitb doctor's vm row); aitb's user-space TLS works without it")


def _ktls() -> Capability:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.SOL_TCP, TCP_ULP, b"tls")
        except OSError as exc:
            if exc.errno == errno.ENOTCONN:
                return Capability("ktls", True, "the tls TCP upper-layer protocol exists")
            if exc.errno == errno.ENOENT:
                return Capability("ktls", False, "no tls TCP upper-layer protocol (TCP_ULP)",
                                  _REMEDY.format(opt="CONFIG_TLS"))
            raise
    return Capability("ktls", True, "TCP_ULP tls accepted")


def _config(text: str | None, name: str, option: str) -> Capability:
    if text is None:
        return Capability(name, False, f"not known: no {CONFIG} to read {option} from",
                          _REMEDY.format(opt=option))
    for line in text.splitlines():
        if line.startswith(f"{option}="):
            return Capability(name, True, f"{line} in {CONFIG}")
    return Capability(name, False, f"{option} is not set in {CONFIG}",
                      _REMEDY.format(opt=option))


def probe_crypto(config: Path = CONFIG) -> list[Capability]:
    """The ``wireguard``, ``esp`` and ``ktls`` capabilities of this kernel (module
    docstring). Raises OSError when the kTLS probe fails for another reason."""
    try:
        text: str | None = gzip.decompress(config.read_bytes()).decode(errors="replace")
    except OSError:
        text = None
    return [_config(text, "wireguard", "CONFIG_WIREGUARD"),
            _config(text, "esp", "CONFIG_INET_ESP"), _ktls()]
