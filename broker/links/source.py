"""A client of a cluster link's source cluster.

The source may be any cluster that speaks Kafka's protocol, so everything
here is what a Kafka client does: connect to ``bootstrap.servers`` with the
link's client settings (``security.protocol``, ``ssl.*``, ``sasl.mechanism``,
``sasl.jaas.config``), ask ApiVersions once per broker and use, for each API,
the highest version both sides speak, learn the brokers and partition leaders
from Metadata, and send each request to the broker it belongs to.

Connections are :class:`broker.net.node_client.KafkaClientConnection`, one per
source broker, pipelined; nothing here retries (the mirror fetchers and the
sync tasks have their own backoff).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from broker.net.node_client import (
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    ClientSecurity,
    ConnectionFailed,
    KafkaClientConnection,
)
from broker.net.tls import client_context, tls_settings
from broker.security.jaas import JaasConfigError, parse_jaas_entry
from broker.security.sasl_client import client_factory
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import Api, struct_classes

log = logging.getLogger(__name__)

API_VERSIONS = APIS_BY_NAME["ApiVersions"]
METADATA = APIS_BY_NAME["Metadata"]
_META = struct_classes(METADATA.request)
# ApiVersions v3 is what current clients send; a broker that does not know it
# answers in v0 with UNSUPPORTED_VERSION and its ranges, which we then read.
API_VERSIONS_VERSION = 3
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_REQUEST_TIMEOUT_MS = 30000
DEFAULT_CONNECT_TIMEOUT_MS = 10000


class SourceConfigError(ValueError):
    """A link setting that cannot be used to reach the source (the message names the key)."""


class SourceUnavailable(ConnectionError):
    """No broker of the source answered, or the one a request belongs to did not."""


class NoCommonVersion(SourceUnavailable):
    """The source broker does not speak a version of an API that we need."""


def parse_bootstrap_servers(value: str | None) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as (host, port) pairs; SourceConfigError when malformed."""
    if not value or not value.strip():
        raise SourceConfigError("bootstrap.servers: required (host:port of the source cluster's brokers)")
    servers = []
    for item in value.split(","):
        item = item.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SourceConfigError(f"bootstrap.servers: expected host:port, got {item!r}")
        servers.append((host.strip("[]"), int(port)))
    return servers


class _LinkTlsConfig:
    """The two things :func:`broker.net.tls.tls_settings` reads of a node's
    configuration, taken from a link's ``ssl.*`` settings instead."""

    def __init__(self, configs: Mapping[str, str]):
        self.ssl = {k: v for k, v in configs.items() if k.startswith("ssl.")}

    def ssl_settings(self, listener_name: str) -> dict[str, str]:
        return dict(self.ssl)


def link_client_security(link_name: str, configs: Mapping[str, str]) -> ClientSecurity:
    """How this cluster connects to a link's source: TLS and SASL from the
    link's client settings, as a Kafka client reads them. SourceConfigError
    names the key to fix; nothing is connected here, but TLS files are read."""
    from broker.config import ConfigError

    protocol = configs.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise SourceConfigError(f"security.protocol: {protocol!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    where = f"link {link_name}"
    context = None
    if protocol in TLS_PROTOCOLS:
        try:
            context = client_context(tls_settings(_LinkTlsConfig(configs), where))
        except ConfigError as exc:
            # The TLS code names a listener where it read the files; a link's message starts with the key.
            raise SourceConfigError(str(exc).removeprefix(f"listener {where}, ")) from None
        except OSError as exc:
            raise SourceConfigError(f"ssl.*: cannot read the TLS files: {exc}") from None
    if protocol not in SASL_PROTOCOLS:
        return ClientSecurity(where, protocol, context)
    mechanism = configs.get("sasl.mechanism", "GSSAPI").strip().upper()
    text = configs.get("sasl.jaas.config")
    try:
        entry = None if text is None else parse_jaas_entry(text)
        factory = client_factory(mechanism, entry, "sasl.jaas.config")
    except JaasConfigError as exc:
        raise SourceConfigError(f"sasl.jaas.config: {exc}") from None
    except ValueError as exc:
        message = str(exc)
        raise SourceConfigError(message if message.startswith("sasl.jaas.config") else f"sasl.mechanism: {message}") from None
    return ClientSecurity(where, protocol, context, mechanism, factory, "User:" + entry.options["username"])


def link_settings_error(link_name: str, configs: Mapping[str, str]) -> str | None:
    """Why a link with ``configs`` (known keys, checked values) could not
    connect to its source, naming the key (None: it could). TLS files are read
    here, on this node, as they would be at each connection."""
    try:
        link_client_security(link_name, configs)
    except SourceConfigError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class SourceBroker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


class SourceCluster:
    """One link's view of its source cluster: connections, versions, brokers.

    ``configs`` are the link's settings (see :func:`link_client_security`;
    ``request.timeout.ms`` bounds each request). Build it inside a running
    event loop's task; :meth:`close` ends every connection."""

    def __init__(self, link_name: str, configs: Mapping[str, str], *, client_id: str):
        self.link_name = link_name
        self.configs = dict(configs)
        self.client_id = client_id
        self.bootstrap = parse_bootstrap_servers(configs.get("bootstrap.servers"))
        self.security = link_client_security(link_name, configs)
        self.request_timeout_ms = positive_int_setting(configs, "request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS)
        self.connect_timeout_ms = positive_int_setting(
            configs, "socket.connection.setup.timeout.ms", DEFAULT_CONNECT_TIMEOUT_MS
        )
        self.brokers: dict[int, SourceBroker] = {}
        self.cluster_id: str | None = None
        self.controller_id = -1
        # Connections by (host, port), and each one's agreed versions by api key.
        self._connections: dict[tuple[str, int], KafkaClientConnection] = {}
        self._versions: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
        self._bootstrap_next = 0
        self._closed = False

    # ----------------------------------------------------------------- requests

    async def request_any(self, api: Api, body_for_version, *, timeout_ms: int | None = None):
        """Send to some source broker (a known one, else a bootstrap server), the
        next one on failure, each tried once. ``body_for_version(v)`` builds
        the request for the version chosen. Returns (version, response)."""
        addresses = [(b.host, b.port) for b in sorted(self.brokers.values(), key=lambda b: b.node_id)]
        start = self._bootstrap_next % len(self.bootstrap)
        self._bootstrap_next += 1
        for address in self.bootstrap[start:] + self.bootstrap[:start]:
            if address not in addresses:
                addresses.append(address)
        failures = []
        for address in addresses:
            try:
                return await self._request_at(address, api, body_for_version, timeout_ms)
            except NoCommonVersion:
                raise
            except (SourceUnavailable, ConnectionError, OSError, TimeoutError) as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc or type(exc).__name__}")
        raise SourceUnavailable(f"link {self.link_name}: no source broker answered ({'; '.join(failures)})")

    async def request_node(self, node_id: int, api: Api, body_for_version, *, timeout_ms: int | None = None):
        """Send to source broker ``node_id`` (known from the last Metadata).
        Returns (version, response); SourceUnavailable when it is unknown or does not answer."""
        broker = self.brokers.get(node_id)
        if broker is None:
            raise SourceUnavailable(f"link {self.link_name}: source broker {node_id} is not known")
        try:
            return await self._request_at((broker.host, broker.port), api, body_for_version, timeout_ms)
        except NoCommonVersion:
            raise
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise SourceUnavailable(f"link {self.link_name}: source broker {node_id}: {exc or type(exc).__name__}") from exc

    async def metadata(self, topics: list[str] | None, *, timeout_ms: int | None = None):
        """A Metadata answer for ``topics`` (None: every topic), which also
        refreshes the source's brokers, cluster id and controller."""

        def body(version: int):
            names = None if topics is None else [_META.MetadataRequestTopic(name=name) for name in topics]
            if names is None and version == 0:
                names = []  # v0 cannot ask for every topic; an empty list means all there
            return _META.MetadataRequest(
                topics=names, allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
            )

        _, response = await self.request_any(METADATA, body, timeout_ms=timeout_ms)
        self.brokers = {
            b.node_id: SourceBroker(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in response.brokers
        }
        self.cluster_id = getattr(response, "cluster_id", None)
        self.controller_id = getattr(response, "controller_id", -1)
        return response

    def version_for(self, node_id: int, api: Api) -> int | None:
        """The version agreed with source broker ``node_id`` for ``api`` (None: not connected yet)."""
        broker = self.brokers.get(node_id)
        if broker is None:
            return None
        ranges = self._versions.get((broker.host, broker.port))
        if ranges is None or api.key not in ranges:
            return None
        return _agreed(api, ranges[api.key])

    def close(self) -> None:
        self._closed = True
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        self._versions.clear()

    # ----------------------------------------------------------------- internals

    async def _request_at(self, address: tuple[str, int], api: Api, body_for_version, timeout_ms: int | None):
        if self._closed:
            raise SourceUnavailable(f"link {self.link_name}: closed")
        timeout_ms = timeout_ms or self.request_timeout_ms
        connection = self._connection(address)
        ranges = self._versions.get(address)
        try:
            if ranges is None:
                ranges = await self._api_versions(connection, timeout_ms)
                self._versions[address] = ranges
            if api.key not in ranges:
                raise NoCommonVersion(f"link {self.link_name}: the source at {address[0]}:{address[1]} does not offer {api.name}")
            version = _agreed(api, ranges[api.key])
            if version is None:
                low, high = ranges[api.key]
                raise NoCommonVersion(
                    f"link {self.link_name}: the source offers {api.name} v{low}-{high}, pybroker speaks "
                    f"v{api.versions.low}-{api.versions.high}"
                )
            response = await connection.request(api, version, body_for_version(version), timeout_ms=timeout_ms)
        except (ConnectionFailed, OSError, TimeoutError):
            self._drop(address)
            raise
        return version, response

    async def _api_versions(self, connection: KafkaClientConnection, timeout_ms: int) -> dict[int, tuple[int, int]]:
        request = struct_classes(API_VERSIONS.request).ApiVersionsRequest(
            client_software_name="pybroker-cluster-link", client_software_version="1"
        )
        response = await connection.request(API_VERSIONS, API_VERSIONS_VERSION, request, timeout_ms=timeout_ms)
        if response.error_code not in (ErrorCode.NONE, ErrorCode.UNSUPPORTED_VERSION):
            raise SourceUnavailable(f"link {self.link_name}: ApiVersions answered {ErrorCode(response.error_code).name}")
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            # The broker speaks an older ApiVersions; ask again in the newest it names.
            _, high = ranges.get(API_VERSIONS.key, (0, 0))
            version = min(high, API_VERSIONS_VERSION)
            response = await connection.request(API_VERSIONS, version, request, timeout_ms=timeout_ms)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        return ranges

    def _connection(self, address: tuple[str, int]) -> KafkaClientConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = KafkaClientConnection(
                address[0], address[1], self.client_id,
                connect_timeout_ms=self.connect_timeout_ms, security=self.security,
            )
            self._connections[address] = connection
        return connection

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        self._versions.pop(address, None)
        if connection is not None:
            connection.close()


def _agreed(api: Api, offered: tuple[int, int]) -> int | None:
    low = max(api.versions.low, offered[0])
    high = min(api.versions.high, offered[1])
    return high if low <= high else None


def positive_int_setting(configs: Mapping[str, str], key: str, default: int) -> int:
    """A link setting in milliseconds (``default`` when absent); SourceConfigError naming the key when not a positive number."""
    value = configs.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise SourceConfigError(f"{key}: expected a number of milliseconds, got {value!r}") from None
    if number <= 0:
        raise SourceConfigError(f"{key}: must be positive, got {number}")
    return number
