"""Throwaway certificate authorities, server and client certificates for the TLS tests
(the secured broker, agents over mutual TLS).

Made fresh by each test session with the ``cryptography`` package; nothing
here is a secret worth keeping.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=2)
    )


def make_ca(common_name: str) -> CA:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return CA(key, _validity(builder).sign(key, hashes.SHA256()))


def server_keystore_pem(ca: CA, hosts: list[str]) -> bytes:
    """A PEM keystore as Kafka's ``ssl.keystore.type=PEM`` reads it: PKCS#8 key, then the chain."""
    key_pem, cert_pem = issue(ca, hosts)
    return key_pem + cert_pem + ca.pem()


def issue(ca: CA, names: list[str], *, client: bool = False) -> tuple[bytes, bytes]:
    """A key (PKCS#8 PEM) and its certificate (PEM) signed by ``ca``: for a server at
    ``names`` (hosts or IP addresses), or with ``client`` a client certificate whose
    subject is ``names[0]``."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if client:
        usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    else:
        usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(names)), critical=False)
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    cert = _validity(builder).sign(ca.key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _alt_names(hosts: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    return names


def write_private(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_bytes(data)
    return path


def encrypted(key_pem: bytes, passphrase: bytes) -> bytes:
    """``key_pem`` encrypted under ``passphrase`` (PKCS#8 PEM, as `openssl pkey -aes256` writes)."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(passphrase)
    )


@dataclass(frozen=True)
class KeyPair:
    """A certificate (with its chain) and its key, as files: what ``tls_cert_file``/``tls_key_file`` name."""

    cert: Path
    key: Path


def key_pair(ca: CA, directory: Path, names: list[str], *, client: bool = False) -> KeyPair:
    """:func:`issue` written to ``directory``: ``<names[0]>.crt`` (certificate, then the CA) and ``.key``."""
    key_pem, cert_pem = issue(ca, names, client=client)
    directory.mkdir(parents=True, exist_ok=True)
    cert = directory / f"{names[0]}.crt"
    cert.write_bytes(cert_pem + ca.pem())
    return KeyPair(cert, write_private(directory / f"{names[0]}.key", key_pem))
