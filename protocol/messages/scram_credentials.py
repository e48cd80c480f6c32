"""DescribeUserScramCredentials and AlterUserScramCredentials (keys 50-51): manage users' SCRAM passwords."""

from protocol.schema import BYTES, INT8, INT16, INT32, STRING, Api, Array, F, Struct

APIS = [
    Api(
        50, "DescribeUserScramCredentials", "0", flexible="0+",
        request=[
            # Null or empty describes every user that has credentials.
            F("users", Array(Struct("UserName", [
                F("name", STRING),
            ])), nullable="0+"),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("error_code", INT16),
            F("error_message", STRING, nullable="0+"),
            F("results", Array(Struct("DescribeUserScramCredentialsResult", [
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
                F("credential_infos", Array(Struct("CredentialInfo", [
                    F("mechanism", INT8),
                    F("iterations", INT32),
                ]))),
            ]))),
        ],
    ),
    Api(
        51, "AlterUserScramCredentials", "0", flexible="0+",
        request=[
            F("deletions", Array(Struct("ScramCredentialDeletion", [
                F("name", STRING),
                F("mechanism", INT8),
            ]))),
            F("upsertions", Array(Struct("ScramCredentialUpsertion", [
                F("name", STRING),
                F("mechanism", INT8),
                F("iterations", INT32),
                F("salt", BYTES),
                F("salted_password", BYTES),
            ]))),
        ],
        response=[
            F("throttle_time_ms", INT32),
            F("results", Array(Struct("AlterUserScramCredentialsResult", [
                F("user", STRING),
                F("error_code", INT16),
                F("error_message", STRING, nullable="0+"),
            ]))),
        ],
    ),
]
