"""The run's TLS certificate (``transport: {encryption: tls}``): a self-signed ECDSA P-256
certificate and its key, made per run with the ``cryptography`` library and written to
``tls/cert.pem`` and ``tls/key.pem`` of the run directory. The agents' receivers present it
and their senders trust exactly it (traffic_gen/tls.py). A throwaway key for lab traffic
that never leaves the machine; kept so that captures can be related to the run."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from models.atomic import write_text_atomic

__all__ = ["write_run_certificate", "certificate_files"]


def certificate_files(run_dir: Path) -> dict[str, str]:
    """``{"cert": ..., "key": ...}``: where :func:`write_run_certificate` puts them."""
    return {"cert": str(run_dir / "tls" / "cert.pem"), "key": str(run_dir / "tls" / "key.pem")}


def write_run_certificate(run_dir: Path, name: str) -> dict[str, str]:
    """Make the run's key and self-signed certificate (subject CN ``name``, valid from an hour
    ago for two days) in ``run_dir/tls/``; returns :func:`certificate_files`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    files = certificate_files(run_dir)
    Path(files["cert"]).parent.mkdir(exist_ok=True)
    write_text_atomic(Path(files["cert"]),
                      cert.public_bytes(serialization.Encoding.PEM).decode())
    write_text_atomic(Path(files["key"]), key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode())
    return files
