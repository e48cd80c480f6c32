"""The REST proxy's Kafka client: requests handled in-process by the broker's dispatcher.

A REST call becomes real Kafka requests (the project's request structs),
encoded and handed to ``Dispatcher.handle_frame`` exactly as a connection on
the broker's first client listener would hand them: the same handlers, the
same pre-authorization hooks and authorizer (the principal is the one the HTTP
request authenticated as), the same forwarding of admin requests to the active
controller, the same metrics. Nothing is duplicated and no socket is used.

This is the client of what this broker answers itself; what only another node
can answer (a Produce to a partition led elsewhere, a group coordinated
elsewhere) is sent to that node by broker/http/rest/cluster.py.
"""

from __future__ import annotations

from protocol.exceptions import ProtocolError
from protocol.framing import decode_response, encode_request
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CLIENT_ID = "pybroker-rest"
SIZE_PREFIX_BYTES = 4

# The versions the proxy speaks; every one is served by the broker's handlers.
VERSIONS = {
    "Metadata": 12,
    "Produce": 9,
    "CreateTopics": 7,
    "DeleteTopics": 6,
    "DescribeConfigs": 4,
    "IncrementalAlterConfigs": 1,
    "DescribeCluster": 0,
    "ListGroups": 4,
    "DescribeGroups": 5,
    "OffsetFetch": 7,
    "ListOffsets": 7,
    "DescribeAcls": 3,
    "ListPartitionReassignments": 0,
    # The v2 consumer instances (broker/http/rest/consumer_instances.py): a consumer's requests.
    "Fetch": 12,
    "JoinGroup": 5,
    "SyncGroup": 3,
    "Heartbeat": 3,
    "LeaveGroup": 3,
    "OffsetCommit": 7,
}
REQUESTS = {name: struct_classes(APIS_BY_NAME[name].request) for name in VERSIONS}


class KafkaCallFailed(Exception):
    """The broker closed the in-process 'connection' (a request it refuses outright)."""


class _Caller:
    """What the dispatcher reads of a connection: who is asking and from where."""

    __slots__ = ("listener_name", "peer", "peer_host", "principal")

    def __init__(self, principal: str, host: str, listener_name: str | None):
        self.peer = f"rest:{host}"
        self.listener_name = listener_name
        self.principal = principal
        self.peer_host = host


class InProcessKafka:
    """Kafka requests of one HTTP request, as ``principal`` from ``host``."""

    def __init__(self, broker, principal: str, host: str):
        self._broker = broker
        listeners = broker.config.broker_listeners
        self._caller = _Caller(principal, host, listeners[0].name if listeners else None)
        self._correlation_id = 0

    async def call(self, api_name: str, **fields):
        api = APIS_BY_NAME[api_name]
        version = VERSIONS[api_name]
        self._correlation_id += 1
        frame = encode_request(api, version, self._correlation_id, CLIENT_ID, api.request.cls(**fields))
        dispatcher = self._broker.dispatcher
        answer = await dispatcher.handle_frame(memoryview(frame)[SIZE_PREFIX_BYTES:], self._caller)
        if answer is dispatcher.CLOSE or answer is None:
            raise KafkaCallFailed(f"{api_name} v{version} was refused by the broker")
        if getattr(answer, "externals", None):
            answer = _materialized(answer)  # a Fetch's record fields are file ranges: read them
        try:
            _, body = decode_response(api, version, memoryview(answer)[SIZE_PREFIX_BYTES:])
        except ProtocolError as exc:
            raise KafkaCallFailed(f"{api_name}: {exc}") from None
        return body


def _materialized(frame) -> bytes:
    """A response frame whose record fields are file ranges, as the bytes a socket
    would have carried (what the connection writes with sendfile)."""
    try:
        out = bytearray()
        written = 0
        for position, value in frame.externals:
            out += memoryview(frame)[written:position]
            written = position
            out += value.read_all()
        out += memoryview(frame)[written:]
        return bytes(out)
    finally:
        frame.close_externals()
