"""DescribeCluster (key 60), versions 0-1.

Answers the cluster id, this node as the controller (clients cannot reach a
KRaft controller, so Kafka's brokers name a live broker; here that is this
single node) and this broker with its advertised host and port and its
``broker.rack``. ``cluster_authorized_operations`` is INT32_MIN unless
``include_cluster_authorized_operations`` asks for it; then it holds every
operation Kafka defines for the CLUSTER resource, as a Kafka broker without
an authorizer reports; with one, the operations the caller may do on the
cluster when it may DESCRIBE it, else 0 (Kafka's AuthHelper).

``endpoint_type`` (v1): 1 (brokers) is answered; 2 (controllers) is for a
controller's own endpoint, so a broker answers MISMATCHED_ENDPOINT_TYPE; any
other value UNSUPPORTED_ENDPOINT_TYPE. As in Kafka (AuthHelper.
computeDescribeClusterResponse) both errors carry a message and no cluster
data; a v0 request cannot name an endpoint type.
"""

from __future__ import annotations

from broker.security.authorization import CLUSTER, cluster_allowed, operations
from broker.security.authorized_operations import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS
from controller.authorizer import CLUSTER_NAME, AclOperation
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

API = APIS_BY_NAME["DescribeCluster"]
R = struct_classes(API.response)

ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2


def register(dispatcher, broker) -> None:
    def cluster_operations(ctx) -> int:
        if not cluster_allowed(broker, ctx, AclOperation.DESCRIBE):
            return 0
        return operations(broker, ctx, CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)

    def handle(ctx, request):
        endpoint_type = request.endpoint_type if ctx.api_version >= 1 else ENDPOINT_BROKERS
        if endpoint_type != ENDPOINT_BROKERS:
            if endpoint_type == ENDPOINT_CONTROLLERS:
                error = ErrorCode.MISMATCHED_ENDPOINT_TYPE
                message = "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER"
            else:
                error = ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
                message = f"Unsupported endpoint type {endpoint_type}"
            return R.DescribeClusterResponse(
                throttle_time_ms=0, error_code=error, error_message=message, cluster_id="", brokers=[]
            )
        return R.DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.NONE,
            error_message=None,
            endpoint_type=ENDPOINT_BROKERS,
            cluster_id=broker.cluster_id,
            controller_id=broker.controller_id,
            brokers=[R.DescribeClusterBroker(broker_id=i, host=h, port=p, rack=r) for i, h, p, r in broker.alive_brokers(ctx.listener)],
            cluster_authorized_operations=cluster_operations(ctx) if request.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED,
        )

    dispatcher.register(API.key, 0, 1, handle)
