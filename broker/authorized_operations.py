"""Authorized-operations bitfields, as a Kafka broker without an authorizer reports them.

Responses that carry ``*_authorized_operations`` hold a 32-bit field with bit
``n`` set for each allowed ACL operation of code ``n`` (Kafka's AclOperation
codes). With no authorizer configured Kafka allows everything, so it reports
every operation defined for the resource type (AclEntry.supportedOperations);
INT32_MIN means the operations were not asked for. pybroker has no ACLs.
"""

from __future__ import annotations

# Kafka's AclOperation codes (the ones resource types use).
READ = 3
WRITE = 4
CREATE = 5
DELETE = 6
ALTER = 7
DESCRIBE = 8
CLUSTER_ACTION = 9
DESCRIBE_CONFIGS = 10
ALTER_CONFIGS = 11
IDEMPOTENT_WRITE = 12

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def bitfield(operations) -> int:
    field = 0
    for code in operations:
        field |= 1 << code
    return field


CLUSTER_OPERATIONS = bitfield((CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE))
TOPIC_OPERATIONS = bitfield((READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS))
