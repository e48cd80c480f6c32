"""KRaft metadata records: declarations and the frame they travel in.

A metadata record is the value of a record in the ``__cluster_metadata`` log:
``uvarint frame_version (1) | uvarint api_key | uvarint version | body``, the
body always in the flexible encoding. Keys are null.
"""

from __future__ import annotations

from protocol.codec import decode_struct, encode_struct
from protocol.exceptions import ProtocolError
from protocol.primitives import read_uvarint, write_uvarint
from protocol.schema import BOOL, BYTES, FLOAT64, INT8, INT16, INT32, INT64, STRING, UINT16, UUID, Array, F, Struct

FRAME_VERSION = 1


class MetadataRecordType:
    """A record type: its api key in the metadata log, its versions and declaration."""

    def __init__(self, api_key: int, max_version: int, struct: Struct):
        self.api_key = api_key
        self.max_version = max_version
        self.struct = struct

    @property
    def name(self) -> str:
        return self.struct.name

    def __call__(self, **values):
        return self.struct.cls(**values)

    def __repr__(self) -> str:
        return f"MetadataRecordType({self.api_key}, {self.struct.name!r}, 0-{self.max_version})"


# ----------------------------------------------------------------------------- brokers and controllers

# Brokers and controllers describe their listeners and supported feature ranges
# with the same fields, in structs the reference names after their owner; we
# keep those names so the declarations can be checked against the reference.
def _endpoint_fields() -> list[F]:
    return [
        F("name", STRING),
        F("host", STRING),
        F("port", UINT16),
        F("security_protocol", INT16),
    ]


def _feature_fields() -> list[F]:
    return [
        F("name", STRING),
        F("min_supported_version", INT16),
        F("max_supported_version", INT16),
    ]


BROKER_ENDPOINT = Struct("BrokerEndpoint", _endpoint_fields())
BROKER_FEATURE = Struct("BrokerFeature", _feature_fields())
CONTROLLER_ENDPOINT = Struct("ControllerEndpoint", _endpoint_fields())
CONTROLLER_FEATURE = Struct("ControllerFeature", _feature_fields())

REGISTER_BROKER_RECORD = MetadataRecordType(0, 3, Struct("RegisterBrokerRecord", [
    F("broker_id", INT32),
    F("is_migrating_zk_broker", BOOL, "2+", default=False),
    F("incarnation_id", UUID),
    F("broker_epoch", INT64),
    F("end_points", Array(BROKER_ENDPOINT)),
    F("features", Array(BROKER_FEATURE)),
    F("rack", STRING, nullable="0+"),
    # A broker registers fenced; the controller unfences it once it has caught up.
    F("fenced", BOOL, default=True),
    F("in_controlled_shutdown", BOOL, "1+", default=False),
    F("log_dirs", Array(UUID), "3+", tagged="3+", tag=0),
]))

UNREGISTER_BROKER_RECORD = MetadataRecordType(1, 0, Struct("UnregisterBrokerRecord", [
    F("broker_id", INT32),
    F("broker_epoch", INT64),
]))

FENCE_BROKER_RECORD = MetadataRecordType(7, 0, Struct("FenceBrokerRecord", [
    F("id", INT32),
    F("epoch", INT64),
]))

UNFENCE_BROKER_RECORD = MetadataRecordType(8, 0, Struct("UnfenceBrokerRecord", [
    F("id", INT32),
    F("epoch", INT64),
]))

# BrokerRegistrationChangeRecord.fenced values.
FENCING_CHANGE_UNFENCE = -1
FENCING_CHANGE_NONE = 0
FENCING_CHANGE_FENCE = 1
# BrokerRegistrationChangeRecord.in_controlled_shutdown values.
CONTROLLED_SHUTDOWN_CHANGE_NONE = 0
CONTROLLED_SHUTDOWN_CHANGE_ENTER = 1

BROKER_REGISTRATION_CHANGE_RECORD = MetadataRecordType(17, 2, Struct("BrokerRegistrationChangeRecord", [
    F("broker_id", INT32),
    F("broker_epoch", INT64),
    F("fenced", INT8, tagged="0+", tag=0),
    F("in_controlled_shutdown", INT8, "1+", tagged="1+", tag=1),
    # Empty means "no change": a broker always has at least one log dir.
    F("log_dirs", Array(UUID), "2+", tagged="2+", tag=2),
]))

REGISTER_CONTROLLER_RECORD = MetadataRecordType(27, 0, Struct("RegisterControllerRecord", [
    F("controller_id", INT32),
    F("incarnation_id", UUID),
    F("zk_migration_ready", BOOL),
    F("end_points", Array(CONTROLLER_ENDPOINT)),
    F("features", Array(CONTROLLER_FEATURE)),
]))

# ----------------------------------------------------------------------------- topics and partitions

TOPIC_RECORD = MetadataRecordType(2, 0, Struct("TopicRecord", [
    F("name", STRING),
    F("topic_id", UUID),
]))

PARTITION_RECORD = MetadataRecordType(3, 2, Struct("PartitionRecord", [
    F("partition_id", INT32, default=-1),
    F("topic_id", UUID),
    F("replicas", Array(INT32)),
    F("isr", Array(INT32)),
    F("removing_replicas", Array(INT32)),
    F("adding_replicas", Array(INT32)),
    F("leader", INT32, default=-1),
    F("leader_recovery_state", INT8, tagged="0+", tag=0, default=0),
    F("leader_epoch", INT32, default=-1),
    F("partition_epoch", INT32, default=-1),
    F("directories", Array(UUID), "1+"),
    F("eligible_leader_replicas", Array(INT32), "2+", nullable="2+", tagged="2+", tag=1, default=None),
    F("last_known_elr", Array(INT32), "2+", nullable="2+", tagged="2+", tag=2, default=None),
]))

# PartitionChangeRecord.leader: besides a broker id.
NO_LEADER = -1
NO_LEADER_CHANGE = -2
# PartitionChangeRecord.leader_recovery_state when it does not change.
NO_LEADER_RECOVERY_STATE_CHANGE = -1

# Every field but the partition's identity is tagged and defaults to "no change"
# (null lists, leader -2, recovery state -1), so a change record carries only
# what changed.
PARTITION_CHANGE_RECORD = MetadataRecordType(5, 2, Struct("PartitionChangeRecord", [
    F("partition_id", INT32, default=-1),
    F("topic_id", UUID),
    F("isr", Array(INT32), nullable="0+", tagged="0+", tag=0, default=None),
    F("leader", INT32, tagged="0+", tag=1, default=NO_LEADER_CHANGE),
    F("replicas", Array(INT32), nullable="0+", tagged="0+", tag=2, default=None),
    F("removing_replicas", Array(INT32), nullable="0+", tagged="0+", tag=3, default=None),
    F("adding_replicas", Array(INT32), nullable="0+", tagged="0+", tag=4, default=None),
    F("leader_recovery_state", INT8, tagged="0+", tag=5, default=NO_LEADER_RECOVERY_STATE_CHANGE),
    F("directories", Array(UUID), "1+", nullable="1+", tagged="1+", tag=8, default=None),
    F("eligible_leader_replicas", Array(INT32), "2+", nullable="2+", tagged="2+", tag=6, default=None),
    F("last_known_elr", Array(INT32), "2+", nullable="2+", tagged="2+", tag=7, default=None),
]))

REMOVE_TOPIC_RECORD = MetadataRecordType(9, 0, Struct("RemoveTopicRecord", [
    F("topic_id", UUID),
]))

# ----------------------------------------------------------------------------- configs, features, producer ids

CONFIG_RECORD = MetadataRecordType(4, 0, Struct("ConfigRecord", [
    F("resource_type", INT8),
    F("resource_name", STRING),
    F("name", STRING),
    F("value", STRING, nullable="0+"),
]))

FEATURE_LEVEL_RECORD = MetadataRecordType(12, 0, Struct("FeatureLevelRecord", [
    F("name", STRING),
    F("feature_level", INT16),
]))

PRODUCER_IDS_RECORD = MetadataRecordType(15, 0, Struct("ProducerIdsRecord", [
    F("broker_id", INT32),
    F("broker_epoch", INT64, default=-1),
    F("next_producer_id", INT64),
]))

# ----------------------------------------------------------------------------- security: SCRAM, client quotas, ACLs

# A user's SCRAM credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512):
# what the server needs to check a client's proof and prove itself, never the
# password (RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
# ServerKey = HMAC(SaltedPassword, "Server Key")).
USER_SCRAM_CREDENTIAL_RECORD = MetadataRecordType(11, 0, Struct("UserScramCredentialRecord", [
    F("name", STRING),
    F("mechanism", INT8),
    F("salt", BYTES),
    F("stored_key", BYTES),
    F("server_key", BYTES),
    F("iterations", INT32),
]))

REMOVE_USER_SCRAM_CREDENTIAL_RECORD = MetadataRecordType(22, 0, Struct("RemoveUserScramCredentialRecord", [
    F("name", STRING),
    F("mechanism", INT8),
]))

# One quota key of one entity (user, client-id, ip, or user + client-id; a null
# name is that type's default entity). ``remove`` deletes the key and ignores ``value``.
CLIENT_QUOTA_ENTITY = Struct("EntityData", [
    F("entity_type", STRING),
    F("entity_name", STRING, nullable="0+"),
])

CLIENT_QUOTA_RECORD = MetadataRecordType(14, 0, Struct("ClientQuotaRecord", [
    F("entity", Array(CLIENT_QUOTA_ENTITY)),
    F("key", STRING),
    F("value", FLOAT64),
    F("remove", BOOL),
]))

# One ACL binding under an id the controller picks; the codes are Kafka's
# ResourceType, PatternType, AclOperation and AclPermissionType (controller/authorizer.py).
ACCESS_CONTROL_ENTRY_RECORD = MetadataRecordType(18, 0, Struct("AccessControlEntryRecord", [
    F("id", UUID),
    F("resource_type", INT8),
    F("resource_name", STRING),
    F("pattern_type", INT8),
    F("principal", STRING),
    F("host", STRING),
    F("operation", INT8),
    F("permission_type", INT8),
]))

REMOVE_ACCESS_CONTROL_ENTRY_RECORD = MetadataRecordType(19, 0, Struct("RemoveAccessControlEntryRecord", [
    F("id", UUID),
]))

# ----------------------------------------------------------------------------- log bookkeeping

# Written when a new controller leader takes over (and periodically), so that the
# log advances even when nothing changes; the image ignores it.
NO_OP_RECORD = MetadataRecordType(20, 0, Struct("NoOpRecord", []))

# A metadata transaction groups records that must apply all together or not at
# all even when they do not fit in one batch (a topic with many partitions).
BEGIN_TRANSACTION_RECORD = MetadataRecordType(23, 0, Struct("BeginTransactionRecord", [
    F("name", STRING, nullable="0+", tagged="0+", tag=0, default=None),
]))

END_TRANSACTION_RECORD = MetadataRecordType(24, 0, Struct("EndTransactionRecord", []))

ABORT_TRANSACTION_RECORD = MetadataRecordType(25, 0, Struct("AbortTransactionRecord", [
    F("reason", STRING, nullable="0+", tagged="0+", tag=0, default=None),
]))

# ----------------------------------------------------------------------------- cluster links and mirror topics

# pybroker's own record types (Kafka's metadata log has no cluster links): their
# api keys start at 10000, far above Kafka's, so that a record of either kind is
# never read as the other.
PRIVATE_RECORD_TYPE_MIN = 10000

# A cluster link: a named connection from this cluster (the destination) to a
# source cluster, and its settings (bootstrap.servers, client security,
# consumer-offset sync...). A record replaces the whole link of its id.
CLUSTER_LINK_CONFIG = Struct("ClusterLinkConfig", [
    F("name", STRING),
    F("value", STRING),
])

CLUSTER_LINK_RECORD = MetadataRecordType(10000, 0, Struct("ClusterLinkRecord", [
    F("link_id", UUID),
    F("link_name", STRING),
    F("configs", Array(CLUSTER_LINK_CONFIG)),
]))

REMOVE_CLUSTER_LINK_RECORD = MetadataRecordType(10001, 0, Struct("RemoveClusterLinkRecord", [
    F("link_id", UUID),
]))

# MirrorTopicRecord.state values.
MIRROR_ACTIVE = 0  # the destination's leaders copy the source partitions
MIRROR_PAUSED = 1  # kept read-only, not copying
MIRROR_PENDING_PROMOTE = 2  # copying until caught up with the source, then stopping
MIRROR_PENDING_FAILOVER = 3  # stopping at what each leader has now
MIRROR_PROMOTED = 4  # stopped after catching up: a normal, writable topic
MIRROR_FAILED_OVER = 5  # stopped without the source: a normal, writable topic
MIRROR_SOURCE_DELETED = 6  # the source topic is gone: read-only, not copying
MIRROR_FAILED = 7  # stopped by an error that needs an operator (``reason`` says which)

MIRROR_STATE_NAMES = {
    MIRROR_ACTIVE: "ACTIVE",
    MIRROR_PAUSED: "PAUSED",
    MIRROR_PENDING_PROMOTE: "PENDING_PROMOTE",
    MIRROR_PENDING_FAILOVER: "PENDING_FAILOVER",
    MIRROR_PROMOTED: "PROMOTED",
    MIRROR_FAILED_OVER: "FAILED_OVER",
    MIRROR_SOURCE_DELETED: "SOURCE_DELETED",
    MIRROR_FAILED: "FAILED",
}
# States in which a mirror topic takes writes from producers.
MIRROR_WRITABLE_STATES = frozenset({MIRROR_PROMOTED, MIRROR_FAILED_OVER})

# One partition's position the controller keeps for a mirror: where a stopped
# mirror stopped (the offset after its last mirrored record, and the leader
# epoch of that record's batch), or where an active mirror's replicas were cut
# back to before it started copying (failback).
MIRROR_PARTITION_MARK = Struct("MirrorPartitionMark", [
    F("partition_id", INT32),
    F("offset", INT64),
    F("last_epoch", INT32),
])

# A topic of this cluster that mirrors ``source_topic`` over the link
# ``link_id``. A record replaces the topic's whole mirror state; a topic's
# RemoveTopicRecord removes it too.
MIRROR_TOPIC_RECORD = MetadataRecordType(10002, 0, Struct("MirrorTopicRecord", [
    F("topic_id", UUID),
    F("link_id", UUID),
    F("source_topic", STRING),
    F("state", INT8),
    F("reason", STRING, nullable="0+", default=None),
    F("partition_marks", Array(MIRROR_PARTITION_MARK)),
]))

# ----------------------------------------------------------------------------- the balancer

# BrokerPlacementRecord.state values: where the controller may put replicas.
PLACEMENT_NORMAL = 0  # anywhere (the record removes the broker's entry)
PLACEMENT_CORDONED = 1  # no new replica (KIP-1066's cordon): it keeps what it holds
PLACEMENT_DRAINING = 2  # no new replica, and the balancer moves every replica off it (remove-broker)
PLACEMENT_STATE_NAMES = {PLACEMENT_NORMAL: "normal", PLACEMENT_CORDONED: "cordoned", PLACEMENT_DRAINING: "draining"}

# An operator's placement decision for a broker (pybroker cluster cordon /
# remove-broker), kept in the log so that a controller failover keeps it. A
# record replaces the broker's state; it outlives the broker's registration.
BROKER_PLACEMENT_RECORD = MetadataRecordType(10003, 0, Struct("BrokerPlacementRecord", [
    F("broker_id", INT32),
    F("state", INT8),
]))

# A throttle config the balancer set (``owned``) or removed (not ``owned``): which
# of the replication throttles are the balancer's is in the log, so the next
# active controller removes the ones its predecessor set, and only those (an
# operator's are never touched). ``value`` is what the balancer wrote: a value
# changed since is the operator's.
BALANCER_THROTTLE_RECORD = MetadataRecordType(10004, 0, Struct("BalancerThrottleRecord", [
    F("resource_type", INT8),
    F("resource_name", STRING),
    F("name", STRING),
    F("value", STRING),
    F("owned", BOOL),
]))

RECORD_TYPES = {
    t.api_key: t
    for t in (
        REGISTER_BROKER_RECORD,
        UNREGISTER_BROKER_RECORD,
        TOPIC_RECORD,
        PARTITION_RECORD,
        CONFIG_RECORD,
        PARTITION_CHANGE_RECORD,
        FENCE_BROKER_RECORD,
        UNFENCE_BROKER_RECORD,
        REMOVE_TOPIC_RECORD,
        FEATURE_LEVEL_RECORD,
        PRODUCER_IDS_RECORD,
        BROKER_REGISTRATION_CHANGE_RECORD,
        NO_OP_RECORD,
        BEGIN_TRANSACTION_RECORD,
        END_TRANSACTION_RECORD,
        ABORT_TRANSACTION_RECORD,
        REGISTER_CONTROLLER_RECORD,
        USER_SCRAM_CREDENTIAL_RECORD,
        REMOVE_USER_SCRAM_CREDENTIAL_RECORD,
        CLIENT_QUOTA_RECORD,
        ACCESS_CONTROL_ENTRY_RECORD,
        REMOVE_ACCESS_CONTROL_ENTRY_RECORD,
        CLUSTER_LINK_RECORD,
        REMOVE_CLUSTER_LINK_RECORD,
        MIRROR_TOPIC_RECORD,
        BROKER_PLACEMENT_RECORD,
        BALANCER_THROTTLE_RECORD,
    )
}
RECORD_TYPES_BY_NAME = {t.name: t for t in RECORD_TYPES.values()}
_TYPE_BY_STRUCT = {id(t.struct): t for t in RECORD_TYPES.values()}

# ConfigRecord resource types (the same numbering as DescribeConfigs).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

# The feature whose level decides the versions of every other record; a
# snapshot writes it first.
METADATA_VERSION_FEATURE = "metadata.version"


def record_api_key(value) -> int:
    return _TYPE_BY_STRUCT[id(value.STRUCT)].api_key


_REDACTED_FIELDS = {"UserScramCredentialRecord": ("salt", "stored_key", "server_key")}


def loggable_record(value) -> str:
    """``repr`` of a record value with its secrets replaced by "(redacted)" (a SCRAM
    credential's salt and keys), for logs and dumps (Kafka's RecordRedactor)."""
    hidden = _REDACTED_FIELDS.get(value.STRUCT.name)
    if not hidden:
        return repr(value)
    inner = ", ".join(
        f"{f.name}=(redacted)" if f.name in hidden else f"{f.name}={getattr(value, f.name)!r}"
        for f in value.STRUCT.fields
    )
    return f"{value.STRUCT.name}({inner})"


def encode_record(value, version: int | None = None) -> bytes:
    record_type = _TYPE_BY_STRUCT[id(value.STRUCT)]
    if version is None:
        version = record_type.max_version
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, record_type.api_key)
    write_uvarint(out, version)
    encode_struct(record_type.struct, version, True, value, out)
    return bytes(out)


def decode_record(data) -> tuple[int, object]:
    """Returns (api_key, value). Unknown record types raise ProtocolError."""
    try:
        frame_version, pos = read_uvarint(data, 0)
        api_key, pos = read_uvarint(data, pos)
        version, pos = read_uvarint(data, pos)
    except IndexError:
        raise ProtocolError("truncated metadata record frame") from None
    if frame_version != FRAME_VERSION:
        raise ProtocolError(f"unknown metadata frame version {frame_version}")
    record_type = RECORD_TYPES.get(api_key)
    if record_type is None or version > record_type.max_version:
        raise ProtocolError(f"unknown metadata record type {api_key} v{version}")
    value, _ = decode_struct(record_type.struct, version, True, data, pos)
    return api_key, value
