"""DescribeUserScramCredentials (key 50) v0 and AlterUserScramCredentials (key 51) v0.

Describe is answered from this node's metadata image: every user with a
credential, or the users asked for, each with (mechanism, iterations), never a
key. Alter is the active controller's: a broker forwards it (broker/controller_node/forwarding.py)
and the controller plans it with controller/scram_commands.py, writing
UserScramCredentialRecord / RemoveUserScramCredentialRecord; SCRAM
authentications read the image, so a changed password counts once the records
reach this node. Without an authorizer any client may call both, as in Kafka.

With one: Describe needs DESCRIBE on the cluster (else the top-level code and
one result per named user are CLUSTER_AUTHORIZATION_FAILED), Alter ALTER on
the cluster (else every user named, once and sorted, answers
CLUSTER_AUTHORIZATION_FAILED), decided by the broker the client asked before
the Alter is forwarded.
"""

from __future__ import annotations

from broker.security.authorization import cluster_refusal, refuse_whole
from controller.authorizer import AclOperation
from controller.scram_commands import describe_user_scram_credentials
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes

DESCRIBE = APIS_BY_NAME["DescribeUserScramCredentials"]
ALTER = APIS_BY_NAME["AlterUserScramCredentials"]
_DESCRIBE = struct_classes(DESCRIBE.response)
_ALTER = struct_classes(ALTER.response)
_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    """``forwarded``: the controller listener, which serves only the Alter that brokers forward."""
    def describe(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.DESCRIBE)
        if message is not None:
            return _DESCRIBE.DescribeUserScramCredentialsResponse(
                throttle_time_ms=0,
                error_code=_DENIED,
                error_message=message,
                results=[
                    _DESCRIBE.DescribeUserScramCredentialsResult(user="", error_code=_DENIED, error_message=message, credential_infos=[])
                    for _ in request.users or []
                ],
            )
        return describe_user_scram_credentials(broker.image, request)

    def authorize_alter(ctx, request):
        message = cluster_refusal(broker, ctx, AclOperation.ALTER)
        if message is None:
            return None
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return refuse_whole(
            lambda: _ALTER.AlterUserScramCredentialsResponse(
                throttle_time_ms=0,
                results=[_ALTER.AlterUserScramCredentialsResult(user=u, error_code=_DENIED, error_message=message) for u in users],
            )
        )

    async def alter(ctx, request):
        return await broker.controller.alter_user_scram_credentials(request)

    if not forwarded:
        dispatcher.register(DESCRIBE.key, DESCRIBE.versions.low, DESCRIBE.versions.high, describe)
    dispatcher.register(ALTER.key, ALTER.versions.low, ALTER.versions.high, alter, authorize=authorize_alter)
