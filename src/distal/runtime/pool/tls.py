"""The pool's own certificate authority: one CA per pool, one server certificate.

Volunteers verify the coordinator's NATS server against the CA certificate their credentials
file carries, under a fixed TLS name (:data:`SERVER_NAME`) rather than an address, so the
same credentials work whatever address or relay a donor reaches the coordinator through.
Volunteers authenticate with a user name and a password inside that TLS connection (one
NATS user each, see :mod:`.server`); they hold no certificate of their own.

Keys are ECDSA P-256 (what Go's and OpenSSL's TLS stacks accept everywhere); the CA's key
never leaves the pool's directory (mode 0600). Made with ``cryptography`` (the ``pool``
extra).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from distal.errors import InputError

SERVER_NAME = "distal-pool"
"""The DNS name in the server certificate that every client checks (not a real host name)."""

VALID_DAYS = 3650


def _crypto():  # type: ignore[no-untyped-def]
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise InputError(f"the volunteer pool needs {e.name!r}: pip install 'distal[pool]'") from e
    return x509, hashes, serialization, ec, NameOID


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (created so, never widened)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def make_ca(directory: Path, pool_name: str) -> None:
    """A CA (``ca.pem``, ``ca.key``) and a server certificate it signs (``server.pem``,
    ``server.key``) for :data:`SERVER_NAME`, ``localhost`` and 127.0.0.1."""
    x509, hashes, serialization, ec, NameOID = _crypto()
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=VALID_DAYS)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"distal pool CA {pool_name}")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    key = ec.generate_private_key(ec.SECP256R1())
    names = [
        x509.DNSName(SERVER_NAME),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    plain = serialization.NoEncryption()
    pkcs8 = serialization.PrivateFormat.PKCS8
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    write_private(directory / "ca.key", ca_key.private_bytes(pem, pkcs8, plain))
    (directory / "server.pem").write_bytes(cert.public_bytes(pem))
    write_private(directory / "server.key", key.private_bytes(pem, pkcs8, plain))


def client_context(ca_pem: str) -> ssl.SSLContext:
    """A TLS client context that trusts only the pool's CA (``ca_pem``, PEM text) and checks
    the server's name (:data:`SERVER_NAME`); TLS 1.2 at least."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=ca_pem)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


__all__ = ["SERVER_NAME", "client_context", "make_ca", "write_private"]
