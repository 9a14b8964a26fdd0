"""TLS 1.3 on the agents' persistent TCP connections (``transport: {encryption: tls}``).

The sender connects and writes its 12-byte connection header in the clear (endpoints.py),
then both ends run a TLS 1.3 handshake (Python's ssl, OpenSSL) with the run's self-signed
certificate: the receiver (server side) presents it, the sender (client side) trusts exactly
that certificate (no host name check: lab addresses carry no names). Session tickets are off,
so no post-handshake message moves after the handshake in either direction. The negotiated
cipher suite and the handshake's duration are recorded per connection.

Accounting: TCP's ``tcpi_bytes_acked`` counts bytes on the wire. Every ``send`` of n payload
bytes becomes ceil(n / 16384) TLS records, each with :data:`RECORD_OVERHEAD_BYTES` more
(RFC 8446 section 5.2: a 5-byte record header, a 1-byte inner content type and the AEAD's
16-byte tag for AES-GCM and ChaCha20-Poly1305, no padding), which :func:`wire_bytes` adds, so
that a transfer's record closes when its last encrypted byte is acknowledged.
"""

from __future__ import annotations

import math
import socket
import ssl
import time
from typing import Any

__all__ = ["MAX_RECORD_BYTES", "RECORD_OVERHEAD_BYTES", "client_context", "server_context",
           "wrap_client", "wrap_server", "wire_bytes"]

MAX_RECORD_BYTES = 16384  # TLSPlaintext.length limit 2^14, RFC 8446 section 5.1
RECORD_OVERHEAD_BYTES = 22  # 5 header + 1 content type + 16 AEAD tag, RFC 8446 section 5.2


def wire_bytes(payload_bytes: int) -> int:
    """Bytes TLS 1.3 puts on the wire for one ``send`` of ``payload_bytes`` (module
    docstring)."""
    return payload_bytes + math.ceil(payload_bytes / MAX_RECORD_BYTES) * RECORD_OVERHEAD_BYTES


def _base(purpose: ssl.Purpose) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if purpose is ssl.Purpose.CLIENT_AUTH
                         else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def server_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """The receiving side's context: TLS 1.3 only, the run's certificate, no tickets."""
    ctx = _base(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certfile, keyfile)
    ctx.num_tickets = 0
    return ctx


def client_context(cafile: str) -> ssl.SSLContext:
    """The sending side's context: TLS 1.3 only, trusting the run's certificate alone."""
    ctx = _base(ssl.Purpose.SERVER_AUTH)
    ctx.check_hostname = False
    ctx.load_verify_locations(cafile)
    return ctx


def _info(s: ssl.SSLSocket, t0: float) -> dict[str, Any]:
    cipher = s.cipher()
    return {"tls_handshake_s": time.perf_counter() - t0,
            "tls_cipher": cipher[0] if cipher else None, "tls_version": s.version()}


def wrap_client(sock: socket.socket, ctx: ssl.SSLContext) -> tuple[ssl.SSLSocket, dict[str, Any]]:
    """Handshake as the client on the connected ``sock``; the TLS socket and its record
    fields (``tls_handshake_s`` seconds, ``tls_cipher``, ``tls_version``). Raises
    ssl.SSLError or OSError when the handshake fails."""
    t0 = time.perf_counter()
    s = ctx.wrap_socket(sock, server_side=False)
    return s, _info(s, t0)


def wrap_server(sock: socket.socket, ctx: ssl.SSLContext) -> tuple[ssl.SSLSocket, dict[str, Any]]:
    """Handshake as the server on the accepted ``sock`` (as :func:`wrap_client`)."""
    t0 = time.perf_counter()
    s = ctx.wrap_socket(sock, server_side=True)
    return s, _info(s, t0)
