"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), versions 0-1.

Describe is answered from this node's metadata image with Kafka's filters
(EXACT, DEFAULT and SPECIFIED components, ``strict``; see
controller/quota_commands.py). Alter is the active controller's: a broker
forwards it (broker/controller_node/forwarding.py) and the controller plans it with
controller/quota_commands.py (Kafka's validation: unknown keys, bad values,
duplicate entities and keys are INVALID_REQUEST; a removal is an op with
``remove``), writing ClientQuotaRecords; ``validate_only`` writes nothing. The
broker enforces the quotas once the records reach its image (broker/net/quotas.py).

Authorization (with an authorizer, as Kafka's KafkaApis): Describe needs
DESCRIBE_CONFIGS on the cluster (else the request fails as a whole with
CLUSTER_AUTHORIZATION_FAILED and null entries), Alter ALTER_CONFIGS on the
cluster (else every entry answers CLUSTER_AUTHORIZATION_FAILED and nothing is
forwarded), decided by the broker the client asked.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.quota_commands import describe_client_quotas
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE = APIS_BY_NAME["DescribeClientQuotas"]
ALTER = APIS_BY_NAME["AlterClientQuotas"]
_DESCRIBE = struct_classes(DESCRIBE.response)
_ALTER = struct_classes(ALTER.response)
_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def refuse_alter(request, code: ErrorCode, message: str | None):
    """An AlterClientQuotasResponse giving ``code`` for every entry of ``request``."""
    return _ALTER.AlterClientQuotasResponse(
        throttle_time_ms=0,
        entries=[
            _ALTER.EntryData(
                error_code=code,
                error_message=message,
                entity=[_ALTER.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity],
            )
            for entry in request.entries
        ],
    )


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    """``forwarded``: the controller listener, which serves only the Alter that brokers forward."""

    def describe(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.DESCRIBE_CONFIGS)
        if message is not None:
            return _DESCRIBE.DescribeClientQuotasResponse(
                throttle_time_ms=0, error_code=_DENIED, error_message=message, entries=None
            )
        return describe_client_quotas(broker.image, request)

    def authorize_alter(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.ALTER_CONFIGS)
        if message is None:
            return None
        return refuse_whole(lambda: refuse_alter(request, _DENIED, message))

    async def alter(ctx, request):
        return await broker.controller.alter_client_quotas(request)

    if not forwarded:
        dispatcher.register(DESCRIBE.key, DESCRIBE.versions.low, DESCRIBE.versions.high, describe)
    dispatcher.register(ALTER.key, ALTER.versions.low, ALTER.versions.high, alter, authorize=authorize_alter)
