"""Confluent's error answers: ``{"error_code": <int>, "message": "..."}`` with its HTTP statuses.

Kafka errors map as Confluent's exception mappers map the client's exceptions:
an unknown topic is 404/40403, a refused authorization 403/40301 (topic) or
40302 (cluster, group), bad arguments 400/40002, an existing topic 400/40002,
a record over the limit 413; the rest, a broker-side failure, 500/50003 with
Kafka's error name in the message.
"""

from __future__ import annotations

from protocol.errors import ErrorCode


class RestError(Exception):
    def __init__(self, status: int, error_code: int, message: str):
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.message}


UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."

_BY_KAFKA_CODE = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (404, 40403, UNKNOWN_TOPIC_MESSAGE),
    ErrorCode.UNKNOWN_TOPIC_ID: (404, 40403, UNKNOWN_TOPIC_MESSAGE),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (403, 40301, "Not authorized to access topics: [{name}]"),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (403, 40302, "Cluster authorization failed."),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (403, 40302, "Not authorized to access group: {name}"),
    ErrorCode.TOPIC_ALREADY_EXISTS: (400, 40002, "Topic '{name}' already exists."),
    ErrorCode.MESSAGE_TOO_LARGE: (413, 413, "The request included a message larger than the maximum message size the server can accept."),
    ErrorCode.RECORD_LIST_TOO_LARGE: (413, 413, "The request included message batch larger than the configured segment size on the server."),
    ErrorCode.GROUP_ID_NOT_FOUND: (404, 404, "Consumer group {name} could not be found."),
}
_BAD_ARGUMENTS = {
    ErrorCode.INVALID_PARTITIONS,
    ErrorCode.INVALID_REPLICATION_FACTOR,
    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    ErrorCode.INVALID_CONFIG,
    ErrorCode.INVALID_TOPIC_EXCEPTION,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.INVALID_TIMESTAMP,
    ErrorCode.POLICY_VIOLATION,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.INVALID_RECORD,
    ErrorCode.TOPIC_DELETION_DISABLED,
}


def kafka_error(code: int, message: str | None = None, name: str = "") -> RestError:
    code = ErrorCode(code)
    mapped = _BY_KAFKA_CODE.get(code)
    if mapped is not None:
        status, error_code, text = mapped
        return RestError(status, error_code, message if code not in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,) and message else text.format(name=name))
    if code in _BAD_ARGUMENTS:
        return RestError(400, 40002, message or f"{code.name}")
    return RestError(500, 50003, f"{code.name}: {message}" if message else code.name)


def not_found(message: str) -> RestError:
    return RestError(404, 404, message)


def bad_request(message: str) -> RestError:
    return RestError(400, 400, message)
