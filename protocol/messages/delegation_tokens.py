"""CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and DescribeDelegationToken (keys 38-41): delegation token lifecycle."""

from protocol.schema import BYTES, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        38, "CreateDelegationToken", "0-3", flexible="2+",
        request=[
            # Null owner: the token belongs to the principal making the request.
            F("owner_principal_type", STRING, "3+", nullable="3+"),
            F("owner_principal_name", STRING, "3+", nullable="3+"),
            F("renewers", Array(Struct("CreatableRenewers", [
                F("principal_type", STRING),
                F("principal_name", STRING),
            ]))),
            F("max_lifetime_ms", INT64),
        ],
        response=[
            F("error_code", INT16),
            F("principal_type", STRING),
            F("principal_name", STRING),
            F("token_requester_principal_type", STRING, "3+"),
            F("token_requester_principal_name", STRING, "3+"),
            F("issue_timestamp_ms", INT64),
            F("expiry_timestamp_ms", INT64),
            F("max_timestamp_ms", INT64),
            F("token_id", STRING),
            F("hmac", BYTES),
            F("throttle_time_ms", INT32),
        ],
    ),
    Api(
        39, "RenewDelegationToken", "0-2", flexible="2+",
        request=[
            F("hmac", BYTES),
            F("renew_period_ms", INT64),
        ],
        response=[
            F("error_code", INT16),
            F("expiry_timestamp_ms", INT64),
            F("throttle_time_ms", INT32),
        ],
    ),
    Api(
        40, "ExpireDelegationToken", "0-2", flexible="2+",
        request=[
            F("hmac", BYTES),
            F("expiry_time_period_ms", INT64),
        ],
        response=[
            F("error_code", INT16),
            F("expiry_timestamp_ms", INT64),
            F("throttle_time_ms", INT32),
        ],
    ),
    Api(
        41, "DescribeDelegationToken", "0-3", flexible="2+",
        request=[
            # Null asks for the tokens of every owner; an empty list matches none.
            F("owners", Array(Struct("DescribeDelegationTokenOwner", [
                F("principal_type", STRING),
                F("principal_name", STRING),
            ])), nullable="0+"),
        ],
        response=[
            F("error_code", INT16),
            F("tokens", Array(Struct("DescribedDelegationToken", [
                F("principal_type", STRING),
                F("principal_name", STRING),
                F("token_requester_principal_type", STRING, "3+"),
                F("token_requester_principal_name", STRING, "3+"),
                F("issue_timestamp", INT64),
                F("expiry_timestamp", INT64),
                F("max_timestamp", INT64),
                F("token_id", STRING),
                F("hmac", BYTES),
                F("renewers", Array(Struct("DescribedDelegationTokenRenewer", [
                    F("principal_type", STRING),
                    F("principal_name", STRING),
                ]))),
            ]))),
            F("throttle_time_ms", INT32),
        ],
    ),
]
