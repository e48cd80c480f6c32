"""DescribeUserScramCredentials (key 50) v0 and AlterUserScramCredentials (key 51) v0.

Describe is answered from this node's metadata image: every user with a
credential, or the users asked for, each with (mechanism, iterations), never a
key. Alter is the active controller's: a broker forwards it (broker/forwarding.py)
and the controller plans it with controller/scram_commands.py, writing
UserScramCredentialRecord / RemoveUserScramCredentialRecord; SCRAM
authentications read the image, so a changed password counts once the records
reach this node. As in Kafka without an authorizer, any client may call both.
"""

from __future__ import annotations

from controller.scram_commands import describe_user_scram_credentials
from protocol.registry import APIS_BY_NAME

DESCRIBE = APIS_BY_NAME["DescribeUserScramCredentials"]
ALTER = APIS_BY_NAME["AlterUserScramCredentials"]


def register(dispatcher, broker, *, forwarded: bool = False) -> None:
    """``forwarded``: the controller listener, which serves only the Alter that brokers forward."""
    def describe(ctx, request):
        return describe_user_scram_credentials(broker.image, request)

    async def alter(ctx, request):
        return await broker.controller.alter_user_scram_credentials(request)

    if not forwarded:
        dispatcher.register(DESCRIBE.key, DESCRIBE.versions.low, DESCRIBE.versions.high, describe)
    dispatcher.register(ALTER.key, ALTER.versions.low, ALTER.versions.high, alter)
