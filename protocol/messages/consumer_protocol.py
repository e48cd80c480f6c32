"""The classic consumer protocol's embedded payloads: a member's subscription and its assignment."""

from protocol.schema import BYTES, INT32, STRING, Array, DataMessage, F, Struct

# Both travel as opaque bytes inside JoinGroup/SyncGroup, prefixed by an int16
# version; they are never flexible, whatever the enclosing API's version.
DATA = [
    DataMessage(
        "ConsumerProtocolAssignment", "0-3", flexible="none",
        fields=[
            F("assigned_partitions", Array(Struct("TopicPartition", [
                F("topic", STRING),
                F("partitions", Array(INT32)),
            ]))),
            F("user_data", BYTES, nullable="0+", default=None),
        ],
    ),
    DataMessage(
        "ConsumerProtocolSubscription", "0-3", flexible="none",
        fields=[
            F("topics", Array(STRING)),
            F("user_data", BYTES, nullable="0+", default=None),
            F("owned_partitions", Array(Struct("TopicPartition", [
                F("topic", STRING, "1+"),
                F("partitions", Array(INT32), "1+"),
            ])), "1+", ignorable=True),
            F("generation_id", INT32, "2+", default=-1, ignorable=True),
            F("rack_id", STRING, "3+", nullable="3+", default=None, ignorable=True),
        ],
    ),
]
