"""Authorized-operations bitfields, as a Kafka broker without an authorizer reports them.

Responses that carry ``*_authorized_operations`` hold a 32-bit field with bit
``n`` set for each allowed ACL operation of code ``n`` (Kafka's AclOperation
codes). With no authorizer configured Kafka allows everything, so it reports
every operation defined for the resource type (AclEntry.supportedOperations);
INT32_MIN means the operations were not asked for. pybroker has no ACLs.
"""

from __future__ import annotations

from controller.authorizer import AclOperation
from controller.authorizer import operations_bitfield as bitfield

# Kafka's AclOperation codes (the ones resource types use), as the authorizer defines them.
READ = AclOperation.READ
WRITE = AclOperation.WRITE
CREATE = AclOperation.CREATE
DELETE = AclOperation.DELETE
ALTER = AclOperation.ALTER
DESCRIBE = AclOperation.DESCRIBE
CLUSTER_ACTION = AclOperation.CLUSTER_ACTION
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
ALTER_CONFIGS = AclOperation.ALTER_CONFIGS
IDEMPOTENT_WRITE = AclOperation.IDEMPOTENT_WRITE

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


CLUSTER_OPERATIONS = bitfield((CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE))
TOPIC_OPERATIONS = bitfield((READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS))
