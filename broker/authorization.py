"""The request handlers' questions to the broker's authorizer.

``broker.authorizer`` is None without ``authorizer.class.name``: then every
question here answers "allowed" (and the authorized-operations fields keep the
answers of broker/authorized_operations.py), so a broker without an authorizer
pays one attribute test per check. With one (controller/authorizer.py, which
follows the metadata image), the request's principal and peer host, as the
connection gave them to ``RequestContext``, are asked about, as Kafka's
AuthHelper does.
"""

from __future__ import annotations

from controller.authorizer import CLUSTER_NAME, ResourceType, operations_bitfield

TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
CLUSTER = ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


def allowed(broker, ctx, operation: int, resource_type: int, name: str) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.host, operation, resource_type, name)


def cluster_allowed(broker, ctx, operation: int) -> bool:
    return allowed(broker, ctx, operation, CLUSTER, CLUSTER_NAME)


def denied(broker, ctx, operation: int, resource_type: int, names) -> set[str]:
    """The names among ``names`` (any iterable, not read without an authorizer) the caller
    may not ``operation``, each asked once."""
    authorizer = broker.authorizer
    if authorizer is None:
        return set()
    return {
        name
        for name in set(names)
        if not authorizer.authorize(ctx.principal, ctx.host, operation, resource_type, name)
    }


def operations(broker, ctx, resource_type: int, name: str, without_authorizer: int) -> int:
    """The authorized_operations int32 of a response field: ``without_authorizer`` (every
    operation of the type, as broker/authorized_operations.py gives it) when there is no
    authorizer, else what the caller may do."""
    authorizer = broker.authorizer
    if authorizer is None:
        return without_authorizer
    return operations_bitfield(authorizer.authorized_operations(ctx.principal, ctx.host, resource_type, name))
