"""Keys and values of the records in ``__consumer_offsets``.

Each record's key and value start with an int16 version. Key versions 0 and 1
are committed offsets, key version 2 is a group's metadata; a null value is a
tombstone that compaction later removes together with older records of the key.

Key versions 3 to 8 are the records of KIP-848 consumer groups, one key version
per record type (the key's version says what the value is): the group's epoch
(3), its subscribed topics' metadata (4), a member's metadata (5), the target
assignment's epoch (6) and one member's target assignment (7), and a member's
current assignment with its reconciliation state (8), and what one of its
members' regular expressions resolved to (16, Kafka 4.0). Their values are at
version 0, flexible. Key versions 10 to 14 are those of KIP-932 share groups
(below).
"""

from protocol.schema import BYTES, INT8, INT32, INT64, STRING, UUID, Array, DataMessage, F, Struct

# One struct for both partition lists of a current assignment, so that their values share a class.
_TOPIC_PARTITIONS = Struct("TopicPartitions", [F("topic_id", UUID), F("partitions", Array(INT32))])

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

    DataMessage("ConsumerGroupMetadataKey", "3", flexible="none", fields=[F("group_id", STRING, "3")]),
    DataMessage("ConsumerGroupMetadataValue", "0", flexible="0+", fields=[F("epoch", INT32)]),
    DataMessage("ConsumerGroupPartitionMetadataKey", "4", flexible="none", fields=[F("group_id", STRING, "4")]),
    DataMessage(
        "ConsumerGroupPartitionMetadataValue", "0", flexible="0+",
        fields=[
            F("topics", Array(Struct("TopicMetadata", [
                F("topic_id", UUID),
                F("topic_name", STRING),
                F("num_partitions", INT32),
                # Empty when no partition's racks are known.
                F("partition_metadata", Array(Struct("PartitionMetadata", [
                    F("partition", INT32),
                    F("racks", Array(STRING)),
                ]))),
            ]))),
        ],
    ),
    DataMessage(
        "ConsumerGroupMemberMetadataKey", "5", flexible="none",
        fields=[F("group_id", STRING, "5"), F("member_id", STRING, "5")],
    ),
    DataMessage(
        "ConsumerGroupMemberMetadataValue", "0", flexible="0+",
        fields=[
            F("instance_id", STRING, nullable="0+"),
            F("rack_id", STRING, nullable="0+"),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", Array(STRING)),
            F("subscribed_topic_regex", STRING, nullable="0+"),
            F("rebalance_timeout_ms", INT32, default=-1),
            F("server_assignor", STRING, nullable="0+"),
            # Set for a member that joined with the classic protocol (a mixed group).
            F("classic_member_metadata", Struct("ClassicMemberMetadata", [
                F("session_timeout_ms", INT32),
                F("supported_protocols", Array(Struct("ClassicProtocol", [
                    F("name", STRING),
                    F("metadata", BYTES),
                ]))),
            ]), nullable="0+", tagged="0+", tag=0, default=None),
        ],
    ),
    DataMessage("ConsumerGroupTargetAssignmentMetadataKey", "6", flexible="none", fields=[F("group_id", STRING, "6")]),
    DataMessage("ConsumerGroupTargetAssignmentMetadataValue", "0", flexible="0+", fields=[F("assignment_epoch", INT32)]),
    DataMessage(
        "ConsumerGroupTargetAssignmentMemberKey", "7", flexible="none",
        fields=[F("group_id", STRING, "7"), F("member_id", STRING, "7")],
    ),
    DataMessage(
        "ConsumerGroupTargetAssignmentMemberValue", "0", flexible="0+",
        fields=[F("topic_partitions", Array(Struct("TopicPartition", [F("topic_id", UUID), F("partitions", Array(INT32))])))],
    ),
    DataMessage(
        "ConsumerGroupCurrentMemberAssignmentKey", "8", flexible="none",
        fields=[F("group_id", STRING, "8"), F("member_id", STRING, "8")],
    ),
    DataMessage(
        "ConsumerGroupCurrentMemberAssignmentValue", "0", flexible="0+",
        fields=[
            F("member_epoch", INT32),
            F("previous_member_epoch", INT32),
            F("state", INT8),
            F("assigned_partitions", Array(_TOPIC_PARTITIONS)),
            F("partitions_pending_revocation", Array(_TOPIC_PARTITIONS)),
        ],
    ),
    DataMessage(
        "ConsumerGroupRegularExpressionKey", "16", flexible="none",
        fields=[F("group_id", STRING, "16"), F("regular_expression", STRING, "16")],
    ),
    DataMessage(
        "ConsumerGroupRegularExpressionValue", "0", flexible="0+",
        fields=[
            F("topics", Array(STRING)),  # the matching topics, sorted
            F("version", INT64),  # the metadata image offset the topics were read at
            F("timestamp", INT64),  # when it was resolved, in ms
        ],
    ),
]

# KIP-932 share groups: key versions 10 to 14, one per record type as for
# consumer groups: a member's metadata (10), the group's epoch (11), the
# target assignment's epoch (12) and one member's target (13), and a member's
# current assignment (14). Values at version 0, flexible.
DATA += [
    DataMessage(
        "ShareGroupMemberMetadataKey", "10", flexible="none",
        fields=[F("group_id", STRING, "10"), F("member_id", STRING, "10")],
    ),
    DataMessage(
        "ShareGroupMemberMetadataValue", "0", flexible="0+",
        fields=[
            F("rack_id", STRING, nullable="0+"),
            F("client_id", STRING),
            F("client_host", STRING),
            F("subscribed_topic_names", Array(STRING)),
        ],
    ),
    DataMessage("ShareGroupMetadataKey", "11", flexible="none", fields=[F("group_id", STRING, "11")]),
    DataMessage("ShareGroupMetadataValue", "0", flexible="0+", fields=[F("epoch", INT32)]),
    DataMessage("ShareGroupTargetAssignmentMetadataKey", "12", flexible="none", fields=[F("group_id", STRING, "12")]),
    DataMessage("ShareGroupTargetAssignmentMetadataValue", "0", flexible="0+", fields=[F("assignment_epoch", INT32)]),
    DataMessage(
        "ShareGroupTargetAssignmentMemberKey", "13", flexible="none",
        fields=[F("group_id", STRING, "13"), F("member_id", STRING, "13")],
    ),
    DataMessage(
        "ShareGroupTargetAssignmentMemberValue", "0", flexible="0+",
        fields=[F("topic_partitions", Array(Struct("TopicPartition", [F("topic_id", UUID), F("partitions", Array(INT32))])))],
    ),
    DataMessage(
        "ShareGroupCurrentMemberAssignmentKey", "14", flexible="none",
        fields=[F("group_id", STRING, "14"), F("member_id", STRING, "14")],
    ),
    DataMessage(
        "ShareGroupCurrentMemberAssignmentValue", "0", flexible="0+",
        fields=[
            F("member_epoch", INT32),
            F("previous_member_epoch", INT32),
            F("state", INT8),
            F("assigned_partitions", Array(_TOPIC_PARTITIONS)),
        ],
    ),
]
