"""WriteTxnMarkers (key 27): the transaction coordinator asks partition leaders to write commit/abort markers."""

from protocol.schema import BOOL, INT16, INT32, INT64, STRING, Api, Array, F, Struct

APIS = [
    Api(
        27, "WriteTxnMarkers", "0-1", flexible="1+",
        request=[
            F("markers", Array(Struct("WritableTxnMarker", [
                F("producer_id", INT64),
                F("producer_epoch", INT16),
                # True for commit, false for abort.
                F("transaction_result", BOOL),
                F("topics", Array(Struct("WritableTxnMarkerTopic", [
                    F("name", STRING),
                    F("partition_indexes", Array(INT32)),
                ]))),
                F("coordinator_epoch", INT32),
            ]))),
        ],
        response=[
            F("markers", Array(Struct("WritableTxnMarkerResult", [
                F("producer_id", INT64),
                F("topics", Array(Struct("WritableTxnMarkerTopicResult", [
                    F("name", STRING),
                    F("partitions", Array(Struct("WritableTxnMarkerPartitionResult", [
                        F("partition_index", INT32),
                        F("error_code", INT16),
                    ]))),
                ]))),
            ]))),
        ],
    ),
]
