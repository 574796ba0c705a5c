"""HTTPS for the gateway: the operator's certificate, or a self-signed one made on first start.

The generated pair lives in ``<data dir>/tls/``: ``ca.pem`` (a CA made for this instance, for
clients that verify: the SDK, ``curl --cacert``, Node's ``NODE_EXTRA_CA_CERTS``), ``server.pem``
(signed by it, for localhost, this host's name and addresses and the listen address) and the keys
(0600). It is made again when the listen address is not among its names.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 3650


@dataclass(frozen=True)
class TlsFiles:
    """A server certificate and key, and the CA that signed it when owx made it."""

    cert: Path
    key: Path
    ca: Path | None = None

    def server_context(self) -> ssl.SSLContext:
        """A TLS server context presenting this certificate."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert), str(self.key))
        return context


def self_signed(data_dir: Path, host: str) -> TlsFiles:
    """The instance's generated certificate, made (or made again) so that it names ``host``."""
    folder = data_dir / "tls"
    files = TlsFiles(folder / "server.pem", folder / "server-key.pem", folder / "ca.pem")
    names = _names(host)
    if files.cert.exists() and files.key.exists() and files.ca is not None and files.ca.exists():
        existing = x509.load_pem_x509_certificate(files.cert.read_bytes())
        san = existing.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if set(names) <= set(san):
            return files
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"owx CA for {socket.gethostname()}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host or "localhost")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    _write(files.ca, ca.public_bytes(serialization.Encoding.PEM), 0o644)
    _write(folder / "ca-key.pem", _pem_key(ca_key), 0o600)
    _write(files.key, _pem_key(key), 0o600)
    _write(files.cert, server.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM),
           0o644)
    return files


def _names(host: str) -> list[x509.GeneralName]:
    dns = {"localhost", socket.gethostname()}
    ips = {ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")}
    for candidate in {host, *_local_addresses()} - {"", "0.0.0.0", "::"}:
        try:
            ips.add(ipaddress.ip_address(candidate))
        except ValueError:
            dns.add(candidate)
    return [*(x509.DNSName(d) for d in sorted(dns)), *(x509.IPAddress(i) for i in sorted(ips, key=str))]


def _local_addresses() -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return set()


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, mode)
    tmp.replace(path)
