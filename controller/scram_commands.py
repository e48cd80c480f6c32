"""AlterUserScramCredentials and DescribeUserScramCredentials as pure functions of the metadata image.

A client never sends a password: it sends, per user and mechanism, a salt,
an iteration count and the salted password (RFC 5802's Hi(password, salt, i)).
The controller keeps only what a SCRAM server needs, StoredKey and ServerKey
(derived by ``protocol.scram``, which the SCRAM server shares), in a
UserScramCredentialRecord.

AlterUserScramCredentials follows Kafka's ScramControlManager:

- a user named twice in one request (in deletions, upsertions or both, any
  mechanisms) gets one DUPLICATE_RESOURCE and none of its changes apply;
- an empty user name is UNACCEPTABLE_CREDENTIAL; a mechanism other than
  SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2) UNSUPPORTED_SASL_MECHANISM;
- iterations must be within 4096..16384 (UNACCEPTABLE_CREDENTIAL: "Too few" /
  "Too many iterations"); an empty salted password is refused the same way
  (Kafka's HMAC cannot take an empty key and answers UNKNOWN_SERVER_ERROR);
- deleting a credential the user does not have is RESOURCE_NOT_FOUND.

Results come as Kafka builds them: the deletions that succeed, then the
upsertions that succeed, then one error per failed user (each group in
request order). Records: a RemoveUserScramCredentialRecord per deletion, a
UserScramCredentialRecord per upsertion.

DescribeUserScramCredentials (Kafka's ScramImage.describe): no users (null or
empty) lists every user that has a credential (sorted); a user named twice
gets DUPLICATE_RESOURCE, a user without credentials RESOURCE_NOT_FOUND; each
user's credentials are listed as (mechanism, iterations), never the keys.
"""

from __future__ import annotations

from controller.metadata.image import MetadataImage
from controller.metadata.records import REMOVE_USER_SCRAM_CREDENTIAL_RECORD, USER_SCRAM_CREDENTIAL_RECORD
from protocol.errors import ErrorCode
from protocol.registry import APIS_BY_NAME
from protocol.schema import struct_classes
from protocol.scram import ITERATIONS_MAX, ITERATIONS_MIN, ScramMechanism, credential_from_salted_password

# The mechanism codes of the records and the admin APIs (Kafka's ScramMechanism).
SCRAM_SHA_256 = ScramMechanism.SCRAM_SHA_256.type_code
SCRAM_SHA_512 = ScramMechanism.SCRAM_SHA_512.type_code

_ALTER = struct_classes(APIS_BY_NAME["AlterUserScramCredentials"].response)
_DESCRIBE = struct_classes(APIS_BY_NAME["DescribeUserScramCredentials"].response)

_DUPLICATE = "A user credential cannot be altered twice in the same request"
_DESCRIBE_DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "


def credential_record(name: str, mechanism: int, salt: bytes, salted: bytes, iterations: int):
    """The UserScramCredentialRecord for a salted password (whose StoredKey and ServerKey
    ``protocol.scram`` derives; the salted password itself is not kept)."""
    credential = credential_from_salted_password(
        ScramMechanism.for_type_code(mechanism), bytes(salted), bytes(salt), iterations
    )
    return USER_SCRAM_CREDENTIAL_RECORD(
        name=name,
        mechanism=mechanism,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )


# ----------------------------------------------------------------------------- AlterUserScramCredentials


def _name_and_mechanism_error(name: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.for_type_code(mechanism) is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _upsertion_error(upsertion) -> tuple[ErrorCode, str] | None:
    problem = _name_and_mechanism_error(upsertion.name, upsertion.mechanism)
    if problem is not None:
        return problem
    if upsertion.iterations < ITERATIONS_MIN:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if upsertion.iterations > ITERATIONS_MAX:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not upsertion.salted_password:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty"
    return None


def _deletion_error(image: MetadataImage, deletion) -> tuple[ErrorCode, str] | None:
    problem = _name_and_mechanism_error(deletion.name, deletion.mechanism)
    if problem is not None:
        return problem
    if (deletion.name, deletion.mechanism) not in image.scram_credentials:
        return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return None


def plan_alter_user_scram_credentials(image: MetadataImage, request):
    """(AlterUserScramCredentialsResponse, records) for a decoded request."""
    deletions: dict[str, object] = {}
    upsertions: dict[str, object] = {}
    errors: dict[str, tuple[ErrorCode, str]] = {}
    for deletion in request.deletions:
        name = deletion.name
        if name in errors:
            continue
        if deletions.pop(name, None) is not None:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE)
            continue
        problem = _deletion_error(image, deletion)
        if problem is None:
            deletions[name] = deletion
        else:
            errors[name] = problem
    for upsertion in request.upsertions:
        name = upsertion.name
        if name in errors:
            continue
        if deletions.pop(name, None) is not None or upsertions.pop(name, None) is not None:
            errors[name] = (ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE)
            continue
        problem = _upsertion_error(upsertion)
        if problem is None:
            upsertions[name] = upsertion
        else:
            errors[name] = problem

    results = []
    records = []
    for name, deletion in deletions.items():
        results.append(_ALTER.AlterUserScramCredentialsResult(user=name, error_code=ErrorCode.NONE, error_message=None))
        records.append(REMOVE_USER_SCRAM_CREDENTIAL_RECORD(name=name, mechanism=deletion.mechanism))
    for name, upsertion in upsertions.items():
        results.append(_ALTER.AlterUserScramCredentialsResult(user=name, error_code=ErrorCode.NONE, error_message=None))
        records.append(
            credential_record(
                name, upsertion.mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
            )
        )
    for name, (code, message) in errors.items():
        results.append(_ALTER.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
    return _ALTER.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results), records


# ----------------------------------------------------------------------------- DescribeUserScramCredentials


def describe_user_scram_credentials(image: MetadataImage, request):
    """DescribeUserScramCredentialsResponse for a decoded request, from the image's credentials."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for (name, mechanism), credential in image.scram_credentials.items():
        by_user.setdefault(name, []).append((mechanism, credential.iterations))
    if request.users:
        duplicated: dict[str, bool] = {}
        for user in request.users:
            duplicated[user.name] = user.name in duplicated
    else:
        duplicated = {name: False for name in sorted(by_user)}
    results = []
    for name, twice in duplicated.items():
        if twice:
            results.append(
                _DESCRIBE.DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.DUPLICATE_RESOURCE,
                    error_message=_DESCRIBE_DUPLICATE + name,
                    credential_infos=[],
                )
            )
        elif name not in by_user:
            results.append(
                _DESCRIBE.DescribeUserScramCredentialsResult(
                    user=name,
                    error_code=ErrorCode.RESOURCE_NOT_FOUND,
                    error_message=_DESCRIBE_MISSING + name,
                    credential_infos=[],
                )
            )
        else:
            infos = [_DESCRIBE.CredentialInfo(mechanism=m, iterations=i) for m, i in sorted(by_user[name])]
            results.append(
                _DESCRIBE.DescribeUserScramCredentialsResult(
                    user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=infos
                )
            )
    return _DESCRIBE.DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results
    )
