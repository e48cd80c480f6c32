"""Keys and values of the records in ``__share_group_state``.

The share coordinator keeps the delivery state of every share-partition (a
share group's view of one topic partition) in this compacted internal topic.
As in ``__consumer_offsets``, a record's key and value each start with an int16
version, and the key's version names the record's kind: 0 is a ShareSnapshot
(the whole state: it replaces what came before), 1 a ShareUpdate (the ranges
that changed since, laid over the last snapshot). Both keys hold the group
id, the topic id and the partition. Values are at version 0, flexible.

Delivery states in a state batch: 0 available, 1 acquired, 2 acknowledged,
4 archived (Kafka's RecordState values).
"""

from protocol.schema import INT8, INT16, INT32, INT64, STRING, UUID, DataMessage, Array, F, Struct

_STATE_BATCH = Struct("StateBatch", [
    F("first_offset", INT64),
    F("last_offset", INT64),
    F("delivery_state", INT8),
    F("delivery_count", INT16),
])

DATA = [
    DataMessage(
        "ShareSnapshotKey", "0", flexible="none",
        fields=[F("group_id", STRING, "0"), F("topic_id", UUID, "0"), F("partition", INT32, "0")],
    ),
    DataMessage(
        "ShareSnapshotValue", "0", flexible="0+",
        fields=[
            F("snapshot_epoch", INT32),
            F("state_epoch", INT32),
            F("leader_epoch", INT32),
            F("start_offset", INT64),
            F("create_timestamp", INT64, default=-1),
            F("write_timestamp", INT64, default=-1),
            F("state_batches", Array(_STATE_BATCH)),
        ],
    ),
    DataMessage(
        "ShareUpdateKey", "1", flexible="none",
        fields=[F("group_id", STRING, "1"), F("topic_id", UUID, "1"), F("partition", INT32, "1")],
    ),
    DataMessage(
        "ShareUpdateValue", "0", flexible="0+",
        fields=[
            F("snapshot_epoch", INT32),
            F("leader_epoch", INT32),
            F("start_offset", INT64),
            F("state_batches", Array(_STATE_BATCH)),
        ],
    ),
]
