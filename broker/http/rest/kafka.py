"""The REST proxy's Kafka client: requests handled in-process by the broker's dispatcher.

A REST call becomes real Kafka requests (the project's request structs),
encoded and handed to ``Dispatcher.handle_frame`` (broker/net/in_process_client.py)
exactly as a connection on the broker's first client listener would hand them: the same handlers, the
same pre-authorization hooks and authorizer (the principal is the one the HTTP
request authenticated as), the same forwarding of admin requests to the active
controller, the same metrics. Nothing is duplicated and no socket is used.

This is the client of what this broker answers itself; what only another node
can answer (a Produce to a partition led elsewhere, a group coordinated
elsewhere) is sent to that node by broker/http/rest/cluster.py.
"""

from __future__ import annotations

from broker.net.in_process_client import InProcessClient, RequestRefused
from protocol.exceptions import ProtocolError
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

CLIENT_ID = "pybroker-rest"

# The versions the proxy speaks; every one is served by the broker's handlers.
VERSIONS = {
    "Metadata": 12,
    "Produce": 9,
    "CreateTopics": 7,
    "DeleteTopics": 6,
    "DescribeConfigs": 4,
    "IncrementalAlterConfigs": 1,
    "DescribeCluster": 0,
    "ListGroups": 5,
    "DescribeGroups": 5,
    "ConsumerGroupDescribe": 0,
    "OffsetFetch": 7,
    "ListOffsets": 7,
    "DescribeAcls": 3,
    "ListPartitionReassignments": 0,
    # The balancer (broker/http/rest/balancer_resources.py): pybroker's own APIs.
    "DescribeBalancerStatus": 0,
    "AlterBrokerPlacements": 0,
    # Cluster links and mirror topics (broker/http/rest/link_resources.py): pybroker's own APIs.
    "CreateClusterLinks": 0,
    "DescribeClusterLinks": 0,
    "DeleteClusterLinks": 0,
    "CreateMirrorTopics": 0,
    "AlterMirrors": 0,
    "DescribeMirrors": 0,
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
        listeners = broker.config.broker_listeners
        self._caller = _Caller(principal, host, listeners[0].name if listeners else None)
        self._client = InProcessClient(broker, CLIENT_ID)

    async def call(self, api_name: str, **fields):
        api = APIS_BY_NAME[api_name]
        try:
            return await self._client.request(api, VERSIONS[api_name], api.request.cls(**fields), self._caller)
        except RequestRefused as exc:
            raise KafkaCallFailed(str(exc)) from None
        except ProtocolError as exc:
            raise KafkaCallFailed(f"{api_name}: {exc}") from None
