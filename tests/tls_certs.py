"""Certificates for the TLS tests, made with the ``openssl`` command.

A CA, a broker certificate for 127.0.0.1/localhost signed by it (its key also
encrypted with KEY_PASSWORD), a client certificate signed by it with a
subject of Kafka's documentation examples, and a client certificate from a
second CA the broker does not trust, and a broker certificate from that second
CA too (rotated_server_keystore: a rotation to another CA). EC keys: quick to make.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY_PASSWORD = "broker-key-secret"
CLIENT_SUBJECT = "/C=US/ST=Unknown/L=Unknown/O=Unknown/OU=ServiceUsers/CN=client1"
# As Java's X500Principal.getName() prints CLIENT_SUBJECT: the last RDN first.
CLIENT_DN = "CN=client1,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=US"


@dataclass(frozen=True)
class Certs:
    directory: Path
    ca: Path  # the CA certificate (the trust store)
    server_keystore: Path  # key + certificate chain in one PEM file
    server_cert: Path
    server_key: Path
    server_key_encrypted: Path  # PKCS#8, encrypted with KEY_PASSWORD
    client_cert: Path
    client_key: Path
    client_keystore: Path
    untrusted_cert: Path
    untrusted_key: Path
    # A broker certificate for 127.0.0.1/localhost from the second CA (other_ca), key + chain in one PEM file.
    rotated_server_keystore: Path | None = None
    other_ca: Path | None = None


def openssl_or_skip() -> str:
    path = shutil.which("openssl")
    if path is None:
        pytest.skip("the openssl command is not installed; the TLS tests make their certificates with it")
    return path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run([openssl_or_skip(), *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key(name: str, cwd: Path) -> None:
    _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", name, cwd=cwd)


def _ca(name: str, subject: str, cwd: Path) -> None:
    _key(f"{name}.key", cwd)
    _run("req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "3", "-subj", subject, cwd=cwd)


def _signed(name: str, subject: str, ca: str, cwd: Path, extensions: str = "") -> None:
    _key(f"{name}.key", cwd)
    _run("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial"]
    args += ["-out", f"{name}.pem", "-days", "3"]
    if extensions:
        (cwd / f"{name}.ext").write_text(extensions)
        args += ["-extfile", f"{name}.ext"]
    _run(*args, cwd=cwd)


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", "/CN=pybroker test CA", directory)
    _signed("server", "/CN=localhost", "ca", directory, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _signed("client", CLIENT_SUBJECT, "ca", directory)
    _ca("other-ca", "/CN=someone else's CA", directory)
    _signed("untrusted", "/CN=intruder", "other-ca", directory)
    _signed("server-other-ca", "/CN=localhost", "other-ca", directory, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run(
        "pkcs8", "-topk8", "-in", "server.key", "-out", "server-encrypted.key",
        "-v2", "aes-256-cbc", "-passout", f"pass:{KEY_PASSWORD}", cwd=directory,
    )
    for name in ("server", "client", "server-other-ca"):
        (directory / f"{name}-keystore.pem").write_text(
            (directory / f"{name}.key").read_text() + (directory / f"{name}.pem").read_text()
        )
    return Certs(
        directory=directory,
        ca=directory / "ca.pem",
        server_keystore=directory / "server-keystore.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        server_key_encrypted=directory / "server-encrypted.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        client_keystore=directory / "client-keystore.pem",
        untrusted_cert=directory / "untrusted.pem",
        untrusted_key=directory / "untrusted.key",
        rotated_server_keystore=directory / "server-other-ca-keystore.pem",
        other_ca=directory / "other-ca.pem",
    )
