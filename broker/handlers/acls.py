"""DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31), v0-3.

Without an authorizer (``authorizer.class.name`` empty, the only setting the
broker accepts today) every answer is SECURITY_DISABLED, as Kafka's: the
request-level error for DescribeAcls, each creation's for CreateAcls, each
filter's for DeleteAcls. With one (``broker.authorizer``, which follows the
image), the request's principal and host need ALTER on the cluster to create
or delete and DESCRIBE on the cluster to describe, else
CLUSTER_AUTHORIZATION_FAILED in the same places.

Describe is answered from this node's image (controller/acl_commands.py).
Create and delete are the active controller's: the broker checks the caller
first and then sends the request on over the controller listener (so the
controller sees it already authorized, not as the forwarding node's
principal), or acts itself when it is the active controller; the controller
plans it with controller/acl_commands.py and answers once the ACL records are
committed.
"""

from __future__ import annotations

from controller.acl_commands import describe_acls
from controller.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE = APIS_BY_NAME["DescribeAcls"]
CREATE = APIS_BY_NAME["CreateAcls"]
DELETE = APIS_BY_NAME["DeleteAcls"]
_DESCRIBE = struct_classes(DESCRIBE.response)
_CREATE = struct_classes(CREATE.response)
_DELETE = struct_classes(DELETE.response)

NO_AUTHORIZER = "No Authorizer is configured."


def _refusal(broker, ctx, operation: int) -> tuple[int, str] | None:
    """(error code, message) when the caller may not do ``operation`` on the cluster, else None."""
    authorizer = broker.authorizer
    if authorizer is None:
        return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
    if not authorizer.authorize(ctx.principal, ctx.host, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"{ctx.principal} may not {AclOperation(operation).name} the cluster"
    return None


def create_refused(request, code: int, message: str):
    return _CREATE.CreateAclsResponse(
        throttle_time_ms=0,
        results=[_CREATE.AclCreationResult(error_code=code, error_message=message) for _ in request.creations],
    )


def delete_refused(request, code: int, message: str):
    return _DELETE.DeleteAclsResponse(
        throttle_time_ms=0,
        filter_results=[
            _DELETE.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
            for _ in request.filters
        ],
    )


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    """``forwarded``: the controller listener, which serves only the Create and Delete brokers send on
    (they checked the caller; the controller still refuses without an authorizer)."""

    def describe(ctx, request):
        refusal = _refusal(broker, ctx, AclOperation.DESCRIBE)
        if refusal is not None:
            return _DESCRIBE.DescribeAclsResponse(
                throttle_time_ms=0, error_code=refusal[0], error_message=refusal[1], resources=[]
            )
        return describe_acls(broker.image, request)

    async def on_controller(api, ctx, request, act):
        channel = dispatcher.forwarder
        if channel is not None:
            answer = await channel.send_to_leader(api, ctx.api_version, request)
            if answer is not None:
                return answer
        return await act(request)

    async def create(ctx, request):
        if forwarded:
            if broker.authorizer is None:
                return create_refused(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
            return await broker.controller.create_acls(request)
        refusal = _refusal(broker, ctx, AclOperation.ALTER)
        if refusal is not None:
            return create_refused(request, *refusal)
        return await on_controller(CREATE, ctx, request, broker.controller.create_acls)

    async def delete(ctx, request):
        if forwarded:
            if broker.authorizer is None:
                return delete_refused(request, ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
            return await broker.controller.delete_acls(request)
        refusal = _refusal(broker, ctx, AclOperation.ALTER)
        if refusal is not None:
            return delete_refused(request, *refusal)
        return await on_controller(DELETE, ctx, request, broker.controller.delete_acls)

    if not forwarded:
        dispatcher.register(DESCRIBE.key, DESCRIBE.versions.low, DESCRIBE.versions.high, describe)
    dispatcher.register(CREATE.key, CREATE.versions.low, CREATE.versions.high, create)
    dispatcher.register(DELETE.key, DELETE.versions.low, DELETE.versions.high, delete)
