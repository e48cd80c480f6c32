"""Keys and values of the records in ``__consumer_offsets``.

Each record's key and value start with an int16 version. Key versions 0 and 1
are committed offsets, key version 2 is a group's metadata; a null value is a
tombstone that compaction later removes together with older records of the key.
"""

from protocol.schema import BYTES, INT32, INT64, STRING, Array, DataMessage, F, Struct

DATA = [
    DataMessage(
        "OffsetCommitKey", "0-1", flexible="none",
        fields=[
            F("group", STRING, "0-1"),
            F("topic", STRING, "0-1"),
            F("partition", INT32, "0-1"),
        ],
    ),
    DataMessage(
        "OffsetCommitValue", "0-4", flexible="4+",
        fields=[
            F("offset", INT64),
            F("leader_epoch", INT32, "3+", default=-1, ignorable=True),
            F("metadata", STRING),
            F("commit_timestamp", INT64),
            F("expire_timestamp", INT64, "1", default=-1, ignorable=True),
        ],
    ),
    DataMessage(
        "GroupMetadataKey", "2", flexible="none",
        fields=[F("group", STRING, "2")],
    ),
    DataMessage(
        "GroupMetadataValue", "0-4", flexible="4+",
        fields=[
            F("protocol_type", STRING),
            F("generation", INT32),
            F("protocol", STRING, nullable="0+"),
            F("leader", STRING, nullable="0+"),
            F("current_state_timestamp", INT64, "2+", default=-1, ignorable=True),
            F("members", Array(Struct("MemberMetadata", [
                F("member_id", STRING),
                F("group_instance_id", STRING, "3+", nullable="3+", default=None, ignorable=True),
                F("client_id", STRING),
                F("client_host", STRING),
                F("rebalance_timeout", INT32, "1+", default=-1, ignorable=True),
                F("session_timeout", INT32),
                F("subscription", BYTES),
                F("assignment", BYTES),
            ]))),
        ],
    ),
]
