"""The command-line tools' Kafka client: blocking connections over the project's codec.

Every ``pybroker`` admin tool (groups, transactions, metadata-quorum, reassign,
topics, configs, console-producer/consumer, get-offsets, delete-records) is a
Kafka client like any other. It reaches the brokers through one of these
connections, made as Kafka's ``--command-config FILE`` says (client
properties, ``key=value`` lines):

- ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL;
- TLS: ``ssl.truststore.location`` (a PEM CA file; ``ssl.truststore.type``
  PEM, or unset with a PEM file; JKS and PKCS12 are refused by name),
  ``ssl.truststore.certificates`` (PEM text), ``ssl.keystore.location`` (PEM
  file with the client key and certificate chain) or
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (PEM text),
  ``ssl.key.password``, ``ssl.endpoint.identification.algorithm`` (``https``,
  Kafka's default, checks the broker's host name; empty does not);
- SASL: ``sasl.mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with
  ``sasl.jaas.config`` (PlainLoginModule/ScramLoginModule with
  ``username=`` and ``password=``). Each connection authenticates with
  SaslHandshake v1 then SaslAuthenticate, as Kafka's clients do.

A problem with the file, a connection that cannot be made or a failed
authentication is a :class:`ToolError` whose message names what was wrong.
"""

from __future__ import annotations

import base64
import hmac
import os
import socket
import ssl
from dataclasses import dataclass, field

from protocol.client import RESPONSE_BYTES_MAX, ClientConnectionState  # noqa: F401 (RESPONSE_BYTES_MAX: importable here)
from protocol.errors import ErrorCode
from protocol.exceptions import ProtocolError
from protocol.leader_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP  # noqa: F401 (importable here)
from protocol.registry import APIS_BY_NAME
from protocol.scram import ScramMechanism, client_key, salted_password, server_key, stored_key

CLIENT_ID = "pybroker-tools"
# The first bytes of a TLS record: an alert (21) or a handshake (22), then major version 3.
_TLS_RECORD_STARTS = (b"\x15\x03", b"\x16\x03")
COMMAND_CONFIG_HINT = "if this listener uses SSL or SASL, pass its client settings with --command-config FILE"
# Bytes asked of the socket per read (a response may take several).
READ_CHUNK_BYTES = 256 << 10
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 1
# Java keystore formats: Python's ssl module reads PEM only.
_JAVA_STORE_TYPES = ("JKS", "PKCS12", "P12", "JCEKS")


class ToolError(Exception):
    """A tool's failure, said in one line. ``exit_code`` 2: connection and usage problems.

    The older tools (groups, transactions, metadata-quorum, reassign) raise it
    for broker errors too and pick their own exit codes, as before."""

    exit_code = 2


class Refused(ToolError):
    """The broker answered with an error, or the tool refuses what was asked: exit code 1."""

    exit_code = 1


class NotFound(Refused):
    """What the command names (topic, group, partition) does not exist: exit code 1."""


@dataclass
class ClientSettings:
    """What ``--command-config`` says about how to connect."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    properties: dict[str, str] = field(default_factory=dict, repr=False)


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) lines; ``#``/``!`` comments,
    trailing-backslash continuations (JAAS configs are often split so)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise ToolError(f"--command-config: cannot read {path}: {exc.strerror or exc}") from None
    properties: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        split_at = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if split_at < 0:
            raise ToolError(f"--command-config {path}: expected key=value, got {line!r}")
        properties[line[:split_at].strip()] = line[split_at + 1:].strip()
    return properties


def load_settings(path: str | None) -> ClientSettings:
    """The settings of a ``--command-config`` file (None: plaintext, no authentication)."""
    if path is None:
        return ClientSettings()
    properties = read_properties(path)
    return settings_from_properties(properties, f"--command-config {path}")


def settings_from_properties(properties: dict[str, str], where: str = "client properties") -> ClientSettings:
    protocol = properties.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ToolError(f"{where}: security.protocol {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    settings = ClientSettings(security_protocol=protocol, properties=dict(properties))
    if protocol in ("SSL", "SASL_SSL"):
        settings.ssl_context = _ssl_context(properties, where)
    if protocol.startswith("SASL"):
        mechanism = properties.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            raise ToolError(f"{where}: sasl.mechanism {mechanism} is not supported (use one of {', '.join(SASL_MECHANISMS)})")
        jaas = properties.get("sasl.jaas.config")
        if not jaas:
            raise ToolError(f"{where}: sasl.mechanism {mechanism} needs sasl.jaas.config with username and password")
        from broker.security.jaas import JaasConfigError, parse_jaas_entry

        try:
            entry = parse_jaas_entry(jaas)
        except JaasConfigError as exc:
            raise ToolError(f"{where}: sasl.jaas.config: {exc}") from None
        username, password = entry.options.get("username"), entry.options.get("password")
        if username is None or password is None:
            raise ToolError(f"{where}: sasl.jaas.config needs username=\"...\" and password=\"...\"")
        settings.sasl_mechanism, settings.sasl_username, settings.sasl_password = mechanism, username, password
    return settings


def _ssl_context(properties: dict[str, str], where: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    algorithm = properties.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise ToolError(f"{where}: ssl.endpoint.identification.algorithm expects https or empty, got {algorithm!r}")
    context.check_hostname = algorithm == "https"
    trust_location = properties.get("ssl.truststore.location")
    trust_pem = properties.get("ssl.truststore.certificates")
    try:
        if trust_location:
            _refuse_java_store(properties.get("ssl.truststore.type"), trust_location, "ssl.truststore", where)
            context.load_verify_locations(cafile=trust_location)
        elif trust_pem:
            context.load_verify_locations(cadata=trust_pem)
        else:
            context.load_default_certs()
    except FileNotFoundError:
        raise ToolError(f"{where}: ssl.truststore.location: no such file {trust_location}") from None
    except (ssl.SSLError, OSError) as exc:
        raise ToolError(f"{where}: ssl.truststore: not a PEM CA certificate file ({exc})") from None
    key_location = properties.get("ssl.keystore.location")
    chain, key = properties.get("ssl.keystore.certificate.chain"), properties.get("ssl.keystore.key")
    password = properties.get("ssl.key.password") or None
    try:
        if key_location:
            _refuse_java_store(properties.get("ssl.keystore.type"), key_location, "ssl.keystore", where)
            context.load_cert_chain(key_location, password=password)
        elif chain and key:
            _load_inline_keystore(context, chain, key, password)
    except FileNotFoundError:
        raise ToolError(f"{where}: ssl.keystore.location: no such file {key_location}") from None
    except (ssl.SSLError, OSError) as exc:
        raise ToolError(f"{where}: ssl.keystore: not a PEM key and certificate (or a wrong ssl.key.password): {exc}") from None
    return context


def _refuse_java_store(kind: str | None, location: str, prefix: str, where: str) -> None:
    kind = (kind or "").strip().upper()
    if kind in _JAVA_STORE_TYPES:
        raise ToolError(
            f"{where}: {prefix}.type {kind} is a Java keystore this tool cannot read; convert it to PEM "
            f"(e.g. openssl pkcs12 -in store.p12 -nodes) and set {prefix}.type=PEM"
        )
    if kind not in ("", "PEM"):
        raise ToolError(f"{where}: {prefix}.type {kind!r} is not supported (PEM only)")
    # Kafka's default type is JKS: a store given without a type must be PEM to be read here.
    try:
        with open(location, "rb") as file:
            head = file.read(4096)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ToolError(f"{where}: {prefix}.location: cannot read {location}: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in head:
        raise ToolError(
            f"{where}: {prefix}.location {location} is not a PEM file (JKS and PKCS12 stores cannot be read; "
            f"convert it to PEM and set {prefix}.type=PEM)"
        )


def _load_inline_keystore(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    import tempfile

    # ssl loads certificates from files only: a private temporary file, removed at once.
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "keystore.pem")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(chain.strip() + "\n" + key.strip() + "\n")
        context.load_cert_chain(path, password=password)


def parse_bootstrap(text: str) -> tuple[str, int]:
    first = text.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ToolError(f"--bootstrap-server expects host:port, got {text!r}")
    return host.strip("[]"), int(port)


class KafkaConnection:
    """One blocking connection; requests are sent one at a time.

    With ``settings`` the connection is wrapped in TLS and/or authenticated
    with SASL before the first request, as the settings say."""

    def __init__(self, host: str, port: int, timeout_s: float, settings: ClientSettings | None = None,
                 client_id: str = CLIENT_ID):
        self._state = ClientConnectionState(client_id)
        settings = settings or ClientSettings()
        self._address = f"{host}:{port}"
        self._host, self._port, self._timeout_s = host, port, timeout_s
        self._protocol = settings.security_protocol
        self.diagnose_closed = True  # a closed connection probes the listener (not the probes themselves)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise ToolError(f"cannot connect to {host}:{port}: {exc}") from None
        if settings.ssl_context is not None:
            try:
                sock = settings.ssl_context.wrap_socket(sock, server_hostname=host)
            except (ssl.SSLError, ssl.CertificateError, OSError) as exc:
                sock.close()
                raise ToolError(f"TLS handshake with {host}:{port} failed: {exc}") from None
        self._sock = sock
        if settings.sasl_mechanism is not None:
            try:
                self._authenticate(settings)
            except ToolError:
                self.close()
                raise

    def call(self, api_name: str, version: int, *, expect_response: bool = True, **fields):
        """Send one request and return the response body (None when ``expect_response``
        is false: a Produce with acks=0 gets no response)."""
        api = APIS_BY_NAME[api_name]
        return self.request(api, version, api.request.cls(**fields), expect_response=expect_response)

    def request(self, api, version: int, body, *, expect_response: bool = True):
        """:meth:`call` with a request body already built."""
        api_name = api.name
        state = self._state
        try:
            _, data = state.send(api, version, body, expect_response=expect_response)
            self._sock.sendall(data)
            if not expect_response:
                return None
            # Requests go one at a time: the first bytes received start this response.
            head = b""
            while (response := state.next_response()) is None:
                chunk = self._sock.recv(READ_CHUNK_BYTES)
                if not chunk:
                    raise ToolError(self._closed_text(api_name))
                if len(head) < 2:
                    head += chunk[: 2 - len(head)]
                    if head in _TLS_RECORD_STARTS and self._protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
                        raise ToolError(
                            f"{self._address} answered {api_name} with TLS: the listener expects SSL or SASL_SSL, and "
                            f"this client speaks {self._protocol}; pass security.protocol (and the truststore) with "
                            "--command-config FILE"
                        )
                state.receive_data(chunk)
        except (OSError, ProtocolError) as exc:
            if isinstance(exc, (ConnectionResetError, BrokenPipeError)) and self._protocol == "PLAINTEXT":
                raise ToolError(f"{api_name} to {self._address} failed: {exc}; {COMMAND_CONFIG_HINT}") from None
            raise ToolError(f"{api_name} failed: {exc}") from None
        return response.body

    def _closed_text(self, api_name: str) -> str:
        """Why a broker may close a connection without an answer, as far as the client can tell."""
        text = f"the broker at {self._address} closed the connection instead of answering {api_name}"
        if self._protocol == "PLAINTEXT" and self.diagnose_closed:
            # A SASL listener closes on any request before authentication but ApiVersions;
            # a TLS listener drops bytes that are not a TLS handshake.
            expected = diagnose_listener(self._host, self._port, min(self._timeout_s, DIAGNOSIS_TIMEOUT_S))
            if expected is not None:
                return f"{text}: {expected}; {COMMAND_CONFIG_HINT}"
            return f"{text}; {COMMAND_CONFIG_HINT}"
        if api_name in ("SaslHandshake", "SaslAuthenticate"):
            return f"{text}: does this listener use SASL ({self._protocol}, as --command-config says)?"
        return text

    def close(self) -> None:
        self._sock.close()

    # ------------------------------------------------------------------ SASL

    def _authenticate(self, settings: ClientSettings) -> None:
        mechanism = settings.sasl_mechanism
        handshake = self.call("SaslHandshake", SASL_HANDSHAKE_VERSION, mechanism=mechanism)
        if handshake.error_code != ErrorCode.NONE:
            offered = ", ".join(handshake.mechanisms) or "none"
            raise ToolError(
                f"SASL mechanism {mechanism} refused by the broker ({ErrorCode(handshake.error_code).name}); "
                f"it offers: {offered}"
            )
        if mechanism == "PLAIN":
            token = b"\0" + settings.sasl_username.encode() + b"\0" + settings.sasl_password.encode()
            self._sasl_step(token)
            return
        self._scram(ScramMechanism.for_name(mechanism), settings.sasl_username, settings.sasl_password)

    def _sasl_step(self, token: bytes) -> bytes:
        answer = self.call("SaslAuthenticate", SASL_AUTHENTICATE_VERSION, auth_bytes=token)
        if answer.error_code != ErrorCode.NONE:
            message = answer.error_message or ErrorCode(answer.error_code).name
            raise ToolError(f"authentication failed: {message}")
        return bytes(answer.auth_bytes)

    def _scram(self, mechanism: ScramMechanism, username: str, password: str) -> None:
        """RFC 5802's client side: client-first, server-first, client-final with the proof, server-final."""
        nonce = base64.b64encode(os.urandom(24)).decode().rstrip("=")
        escaped = username.replace("=", "=3D").replace(",", "=2C")
        first_bare = f"n={escaped},r={nonce}"
        server_first = self._sasl_step(("n,," + first_bare).encode()).decode()
        fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
        server_nonce, salt_b64, iterations = fields.get("r", ""), fields.get("s"), fields.get("i", "")
        if not server_nonce.startswith(nonce) or salt_b64 is None or not iterations.isdigit():
            raise ToolError(f"authentication failed: unexpected SCRAM server message {server_first!r}")
        if int(iterations) < mechanism.iterations_min:
            # Kafka's client refuses too: a low count would make the proof cheap to attack.
            raise ToolError(f"authentication failed: the broker asks for {iterations} SCRAM iterations, "
                            f"fewer than {mechanism.iterations_min}")
        salted = salted_password(mechanism, password, base64.b64decode(salt_b64), int(iterations))
        final_bare = f"c=biws,r={server_nonce}"
        auth_message = f"{first_bare},{server_first},{final_bare}".encode()
        key = client_key(mechanism, salted)
        signature = mechanism.hmac(stored_key(mechanism, key), auth_message)
        proof = bytes(a ^ b for a, b in zip(key, signature))
        server_final = self._sasl_step(f"{final_bare},p={base64.b64encode(proof).decode()}".encode()).decode()
        expected = base64.b64encode(mechanism.hmac(server_key(mechanism, salted), auth_message)).decode()
        if not hmac.compare_digest(server_final, f"v={expected}"):
            raise ToolError(f"authentication failed: the broker's SCRAM signature does not match ({server_final!r})")


# A mechanism no broker enables: a SASL listener answers it with the list of those it does.
PROBE_MECHANISM = "PYBROKER-PROBE"
DIAGNOSIS_TIMEOUT_S = 5.0


def diagnose_listener(host: str, port: int, timeout_s: float) -> str | None:
    """What the listener at host:port appears to expect of a client, said for a user, or None
    when it cannot be told (or it is PLAINTEXT after all).

    Probes on fresh connections: a SaslHandshake for a mechanism no broker has
    (a SASL listener answers it with its mechanisms; any other listener with
    ILLEGAL_SASL_STATE), first in plain TCP, then inside TLS without checking
    the broker's certificate (nothing but the probe is sent)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    for settings in (ClientSettings(), ClientSettings(security_protocol="SSL", ssl_context=context)):
        tls = settings.ssl_context is not None
        try:
            probe = KafkaConnection(host, port, timeout_s, settings)
        except ToolError:
            continue  # the TLS handshake failed: not a TLS listener either
        probe.diagnose_closed = False
        try:
            answer = probe.call("SaslHandshake", SASL_HANDSHAKE_VERSION, mechanism=PROBE_MECHANISM)
        except ToolError:
            answer = None
        finally:
            probe.close()
        if answer is not None and answer.error_code == ErrorCode.ILLEGAL_SASL_STATE:
            return "the listener appears to expect SSL (TLS without SASL)" if tls else None
        if answer is not None and answer.mechanisms:
            protocol = "SASL_SSL" if tls else "SASL_PLAINTEXT"
            return (f"the listener appears to expect {protocol} (SASL mechanisms {', '.join(answer.mechanisms)}): "
                    f"set security.protocol={protocol}, sasl.mechanism and sasl.jaas.config")
        if tls:
            # TLS answered but the probe inside it did not (e.g. a client certificate is required).
            return "the listener speaks TLS: it expects SSL or SASL_SSL (with ssl.truststore.location, maybe a keystore)"
    return None


class ToolClient:
    """A command-line tool's connections: the bootstrap broker and whichever
    brokers it is sent on to, one connection each, closed together."""

    def __init__(self, bootstrap: str, timeout_s: float = 15.0, settings: ClientSettings | None = None):
        self._timeout_s = timeout_s
        self._settings = settings or ClientSettings()
        self._bootstrap = parse_bootstrap(bootstrap)
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._api_keys: set[int] | None = None

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _connection(self, address: tuple[str, int]) -> KafkaConnection:
        if address not in self._connections:
            self._connections[address] = KafkaConnection(*address, self._timeout_s, self._settings)
        return self._connections[address]

    def bootstrap_connection(self) -> KafkaConnection:
        return self._connection(self._bootstrap)

    def supports(self, api_name: str) -> bool:
        """Whether the bootstrap broker lists the API in ApiVersions (a broker closes the
        connection on an API it does not serve, so the tools ask first)."""
        if self._api_keys is None:
            response = self.bootstrap_connection().call("ApiVersions", 0)
            if response.error_code != ErrorCode.NONE:
                raise ToolError(f"ApiVersions: {ErrorCode(response.error_code).name}")
            self._api_keys = {a.api_key for a in response.api_keys}
        return APIS_BY_NAME[api_name].key in self._api_keys

    def require(self, api_name: str, what: str) -> None:
        if not self.supports(api_name):
            raise Refused(f"the broker does not serve {api_name} ({what})")

    def broker_connection(self, node_id: int, brokers: dict[int, tuple[str, int]]) -> KafkaConnection:
        if node_id not in brokers:
            raise ToolError(f"broker {node_id} is not among the live brokers {sorted(brokers)}")
        return self._connection(brokers[node_id])
